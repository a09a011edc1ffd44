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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Annotated

from pydantic import Field

from aeonloop.bus.delivery import Delivery
from aeonloop.contracts import AttachedFile, Usage
from aeonloop.llm.base import LLMAdapter
from aeonloop.llm.session import (
    DEFAULT_CONTEXT_TOKENS,
    DictMemo,
    FirstDeliveryMemo,
    LLMSession,
    Memo,
    file_context,
    prompt_budget_chars,
)
from aeonloop.phases import cancels as run_cancels
from aeonloop.phases import tool_calls
from aeonloop.phases.checks import DEFAULT_PATTERN_TIMEOUT_S
from aeonloop.phases.events import RunState
from aeonloop.phases.history import DictRunRecords, ReadAhead, RunRecords
from aeonloop.phases.models import DEFAULT_MAX_PASSES, MAX_TTL_CAP
from aeonloop.phases.tool_calls import ToolRunner
from aeonloop.prompts.registry import PromptRegistry
from aeonloop.settings import AeonSettings
from aeonloop.tools.base import NoTools, Toolbox

Whole = Annotated[int, Field(ge=1)]


class LoopSettings(AeonSettings):
    """Bounds of a run; every one is an environment setting AEON_<FIELD> (docs/configuration.md)."""

    #: The one cap on passes: a request's max_ttl may ask for fewer, never more (gateways
    #: refuse it; Phase A caps a request from elsewhere), and a run's TTL never exceeds it.
    max_passes: Annotated[int, Field(ge=1, le=MAX_TTL_CAP)] = DEFAULT_MAX_PASSES
    max_actions_per_pass: Whole = 5
    #: Plan steps of one run whose LLM calls may be in flight at once (phase_c.execute).
    max_parallel_steps: Whole = 4
    max_refinements_per_run: Annotated[int, Field(ge=0)] = 20
    stagnation_epsilon: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.02
    allow_executable_checks: bool = False
    executable_check_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0
    #: Seconds the patterns of one check (a rule's or a prepared one) may match, together, before
    #: the check fails (phases.checks.run_check): a check never holds a worker thread longer.
    check_pattern_timeout_s: Annotated[float, Field(gt=0, le=60, allow_inf_nan=False)] = (
        DEFAULT_PATTERN_TIMEOUT_S
    )
    #: The model's context window in tokens: every prompt is fitted to it (AEON_LLM_CONTEXT_TOKENS).
    llm_context_tokens: Whole = DEFAULT_CONTEXT_TOKENS
    #: Characters of a step's output kept in the run's history; the rest is cut with a marker,
    #: so model verbosity cannot grow a run's records (or its prompts) without bound.
    max_step_output_chars: Whole = 20_000
    #: The token budget of a run whose request sets none (AEON_RUN_TOKEN_BUDGET); None: no cap.
    run_token_budget: Whole | None = None
    #: Rounds of critique and refinement the answer may get while a fail-severity check does
    #: not hold on it (AEON_ANSWER_REFINE_ROUNDS; 0: the answer is checked, never refined).
    answer_refine_rounds: Annotated[int, Field(ge=0, le=10)] = 2
    #: Seconds one tool call may take (never past the run's deadline); past it the step fails.
    tool_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 30.0


@dataclass
class PhaseDeps:
    llm: LLMAdapter
    registry: PromptRegistry
    memo: Memo = field(default_factory=DictMemo)
    #: Where runs' histories are read from (phases.history).
    records: RunRecords = field(default_factory=DictRunRecords)
    settings: LoopSettings = field(default_factory=LoopSettings)
    #: Where cancels are looked up (phases.cancels).
    cancels: run_cancels.Cancels = field(default_factory=run_cancels.DictCancels)
    #: The tools steps may call (tools/): the MCP servers AEON_MCP_CONFIG names, else none.
    tools: Toolbox = field(default_factory=NoTools)

    def delivered(self, delivery: Delivery) -> PhaseDeps:
        """These deps for one delivery of an event: the memo is read only if the event may
        have been handled before, and the run's records come first from those the bus read
        with the event's lock. Deps used as they are (a handler called directly) read both."""
        if delivery.redelivered and not delivery.records:
            return self
        memo = self.memo if delivery.redelivered else FirstDeliveryMemo(self.memo)
        records = ReadAhead(delivery.records, self.records) if delivery.records else self.records
        return replace(self, memo=memo, records=records)

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
    ) -> LLMSession:
        """LLM access for one run; `usage` is the run's running total, updated in place;
        `files` are its request's attached files, given to the prompts that take them."""
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
        )
