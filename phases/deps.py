"""What every phase handler is given: the LLM, the registry, the memo, where run histories are
read from, the tools, and the loop's limits.

Handlers are plain async functions `(event, deps) -> list[Event]`; the bus runtime decodes the
event, calls the handler, and publishes what it returns. Keeping the bus out of handlers lets the
loop's logic be tested with a scripted LLM and no Redis at all. What the bus knows of one
delivery (bus.delivery: whether the event may have been handled before, the run records read
with its lock) reaches a handler only as its deps for that delivery (`PhaseDeps.delivered`).
A handler owns the event it is given and may grow its run in place: the bus decodes a fresh
copy for every delivery and retry, which is cheaper than a deep copy per hop (measured at 12%
of a worker's CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from aeonloop.bus.delivery import Delivery
from aeonloop.contracts import AttachedFile, Turn, Usage
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMAdapter, TextSink
from aeonloop.llm.session import (
    FirstDeliveryMemo,
    LLMSession,
    Memo,
    file_context,
    prompt_budget_chars,
)
from aeonloop.phases import cancels as run_cancels
from aeonloop.phases import tool_calls
from aeonloop.phases.events import Event, Fork, RunState, fork_of
from aeonloop.phases.history import ReadAhead, RunRecords
from aeonloop.phases.tool_calls import ToolRunner
from aeonloop.prompts.registry import PromptRegistry
from aeonloop.runs.answer_text import ResetWhy
from aeonloop.runs.in_process import DictCancels, DictMemo, DictRunRecords
from aeonloop.runs.memo import ForkedMemo
from aeonloop.tools.base import NoTools, Toolbox


class AnswerTexts(Protocol):
    """Where runs' answer text is written as the model writes it (runs.answer_text)."""

    def sink(self, correlation_id: str, candidate: str, provisional: bool) -> TextSink: ...

    async def reset(self, correlation_id: str, why: ResetWhy) -> None: ...


async def _nothing() -> None:
    return None


@dataclass(frozen=True)
class AnswerStream:
    """How a handler writes one run's answer text as it is written: `sink(candidate,
    provisional)` for a call whose reply may be published (None: nowhere to write), and
    `set_aside()` when the host sets the candidate written so far aside."""

    sink: Callable[[str, bool], TextSink | None] = lambda candidate, provisional: None
    set_aside: Callable[[], Awaitable[None]] = _nothing


#: For a handler with nowhere to write the answer's text (no bus: the phases as a library).
NO_STREAM = AnswerStream()


@dataclass
class PhaseDeps:
    llm: LLMAdapter
    registry: PromptRegistry
    memo: Memo = field(default_factory=DictMemo)
    #: Where runs' histories are read from (phases.history).
    records: RunRecords = field(default_factory=DictRunRecords)
    settings: LoopSettings = field(default_factory=LoopSettings)
    #: Where cancels are looked up (phases.cancels).
    cancels: run_cancels.Cancels = field(default_factory=DictCancels)
    #: The tools steps may call (tools/): the MCP servers AEON_MCP_CONFIG names, else none.
    tools: Toolbox = field(default_factory=NoTools)
    #: Where the runs' answer text is written as it comes (runs.answer_text); None: nowhere.
    answers: AnswerTexts | None = None

    def delivered(self, delivery: Delivery, event: Event | None = None) -> PhaseDeps:
        """These deps for one delivery of `event`: the memo is read only if the event may
        have been handled before (and, for a fork, its parent's replies before the fork
        point, on any delivery: `forked_memo`), and the run's records come first from those
        the bus read with the event's lock. Deps used as they are (a handler called directly)
        read both."""
        fork = fork_of(event) if event is not None else None
        if delivery.redelivered and not delivery.records and fork is None:
            return self
        memo = self.memo if delivery.redelivered else FirstDeliveryMemo(self.memo)
        if fork is not None and event is not None:
            memo = forked_memo(memo, self.memo, event.correlation_id, fork)
        records = ReadAhead(delivery.records, self.records) if delivery.records else self.records
        return replace(self, memo=memo, records=records)

    def answer_stream(self, correlation_id: str) -> AnswerStream:
        """How this run's answer text is written as it comes (NO_STREAM without `answers`)."""
        answers = self.answers
        if answers is None:
            return NO_STREAM
        return AnswerStream(
            functools.partial(answers.sink, correlation_id),
            functools.partial(answers.reset, correlation_id, ResetWhy.SET_ASIDE),
        )

    def tool_runner(self, run: RunState) -> ToolRunner:
        """The tools `run` may call (its request's `tools` narrow the toolbox's), and their
        timeout."""
        specs = tuple(tool_calls.available(self.tools, run.tools))
        return ToolRunner(self.tools, specs, self.settings.tool_timeout_s)

    def session(
        self,
        run_key: str,
        usage: Usage,
        deadline: datetime | None = None,
        files: Sequence[AttachedFile] = (),
        turns: Sequence[Turn] = (),
    ) -> LLMSession:
        """LLM access for one run; `usage` is the run's running total, updated in place;
        `files` are its request's attached files and `turns` the earlier turns of its
        conversation, given to the prompts that take them."""
        return LLMSession(
            self.llm,
            self.registry,
            self.memo,
            run_key,
            usage,
            deadline=deadline,
            prompt_chars=prompt_budget_chars(self.settings.llm_context_tokens),
            check_cancelled=functools.partial(run_cancels.check, self.cancels, run_key),
            files=file_context(files),
            turns=tuple(turns),
        )


def forked_memo(own: Memo, recorded: Memo, correlation_id: str, fork: Fork) -> Memo:
    """The memo of a hop of the fork `correlation_id`: `own` (what the delivery reads of its
    own replies), then the parent's replies in `recorded` for the calls before the fork point
    (runs.memo.ForkedMemo, `Fork.replays`)."""
    return ForkedMemo(own, recorded, correlation_id, fork.parent, fork.replays)
