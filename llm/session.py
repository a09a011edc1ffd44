"""How a phase talks to the LLM: registry → UnifiedPrompt → adapter → memo → llm.reply.

Phases never build prompt text or parse replies themselves. This module is the one path:

- the system prompt comes from the registry's *_SYSTEM template for the adapter's model family,
  the instructions from the *_USER prompt, rendered from the validated input;
- the prompts that make the plan, the steps and the answer (`WITH_FILES`) carry the files the
  request attached, as `<file path=...>` context; those and the profile's (`WITH_TURNS`) carry
  the earlier turns of the conversation the request continues, as artifacts (`turn_context`);
- the prompt is fitted to the context budget: an input given as a builder of the per-output
  character cap is rebuilt with the largest cap that fits, and the context's files are cut to
  the same cap, so the longest outputs and files are clipped first, each with a visible marker,
  and the earlier turns together to that cap, the oldest left out first behind a marker (the
  request itself is never cut); a server that still refuses the prompt as too long gets
  it once more, fitted to a tighter budget;
- reasoning never reaches this module: adapters keep it out of `LLMReply.text`;
- a JSON reply is read by one pipeline, llm.reply's `read_json` (extract → validate → repair
  locally → validate → judge: never a reply cut at the length limit, nor one whose words are
  Aeon's own); one it cannot use gets the one repair call to the LLM, whose reply is read the
  same way;
- every reply is memoised per (run, phase, pass, step, prompt), with its truncated/refused
  flags, so a redelivered event does not pay for the same call again and decides the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Protocol, TypeVar

from pydantic import BaseModel

from aeonloop.bus.keys import memo_key, repair_scope
from aeonloop.contracts import AttachedFile, Turn, Usage
from aeonloop.exceptions import (
    BudgetExhausted,
    ContextLengthError,
    LLMError,
    LLMOutputError,
)
from aeonloop.limits import DEFAULT_CONTEXT_TOKENS
from aeonloop.llm import observed
from aeonloop.llm.base import LLMAdapter, LLMCall, LLMReply, TextSink
from aeonloop.llm.lenient import schema_of
from aeonloop.llm.reply import UNUSABLE, Reply, read_json, repair_input
from aeonloop.prompts.clipping import clip
from aeonloop.prompts.conversation import TURN_NAME, TURNS_LEFT_OUT, TURNS_LEFT_OUT_NAME
from aeonloop.prompts.registry import (
    PromptId,
    PromptInput,
    PromptRegistry,
    SystemPromptInput,
)
from aeonloop.prompts.unified import ContextItem, UnifiedPrompt

T = TypeVar("T", bound=BaseModel)
#: What `fit` rebuilds for each cap it tries.
P = TypeVar("P")

#: A prompt's input, or a builder of it from the per-output character cap (None: no clipping).
InputSource = PromptInput | Callable[[int | None], PromptInput]

#: Characters per token assumed when fitting a prompt: lower than English's ~4 so that code,
#: numbers and other languages, which take more tokens per character, still fit.
CHARS_PER_TOKEN = 3
#: Tokens of the window kept free for the reply: a quarter of it, at most this many.
REPLY_RESERVE_TOKENS = 4096


def prompt_budget_chars(context_tokens: int) -> int:
    """Characters of prompt that fit a window of `context_tokens`, leaving room for the reply."""
    reserve = min(REPLY_RESERVE_TOKENS, context_tokens // 4)
    return max(1, (context_tokens - reserve) * CHARS_PER_TOKEN)


#: The system prompt that frames each user prompt the loop sends.
SYSTEM_OF: dict[PromptId, PromptId] = {
    PromptId.TASKPROFILE_INFERENCE_USER: PromptId.TASKPROFILE_INFERENCE_SYSTEM,
    PromptId.TASKPROFILE_UPDATE_USER: PromptId.TASKPROFILE_UPDATE_SYSTEM,
    PromptId.PLAN_GENERATION_USER: PromptId.PLAN_GENERATION_SYSTEM,
    PromptId.VALIDATION_SEMANTIC_USER: PromptId.VALIDATION_SEMANTIC_SYSTEM,
    PromptId.RECURSIVE_REFINEMENT_USER: PromptId.RECURSIVE_REFINEMENT_SYSTEM,
    PromptId.REASONING_STEP_USER: PromptId.REASONING_STEP_SYSTEM,
    PromptId.CONVERGENCE_ASSESSMENT_USER: PromptId.CONVERGENCE_ASSESSMENT_SYSTEM,
    PromptId.PASS_EVALUATION_USER: PromptId.PASS_EVALUATION_SYSTEM,
    PromptId.RULE_CRITIQUE_USER: PromptId.RULE_CRITIQUE_SYSTEM,
    PromptId.ANSWER_SYNTHESIS_USER: PromptId.ANSWER_SYNTHESIS_SYSTEM,
    PromptId.CHECKS_PREPARE_USER: PromptId.CHECKS_PREPARE_SYSTEM,
    PromptId.ANSWER_DRAFT_USER: PromptId.ANSWER_DRAFT_SYSTEM,
    PromptId.ANSWER_REWRITE_USER: PromptId.ANSWER_REWRITE_SYSTEM,
    PromptId.SUPERVISOR_REPAIR_JSON_USER: PromptId.SUPERVISOR_REPAIR_SYSTEM,
    PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER: PromptId.SUPERVISOR_REPAIR_SYSTEM,
    PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER: PromptId.SUPERVISOR_REPAIR_SYSTEM,
}


#: The prompts that carry the request's attached files as context. They are the calls that
#: make something from the request, where a file is material to work from: the plan (which
#: steps the files call for), each reasoning step (which does the work the files are for) and
#: the answer (which must agree with them, and may quote them). The rest judge or adjust what
#: those made (profile, validation, refinement, assessment, critique, repair): the outputs they
#: judge already hold what the files gave, and sending every file to every call would multiply
#: a run's prompt tokens by its number of calls. The task profile is judged from the request
#: alone, as without files: it sizes the effort, which the steps' outputs later correct.
WITH_FILES = frozenset(
    {
        PromptId.PLAN_GENERATION_USER,
        PromptId.REASONING_STEP_USER,
        PromptId.ANSWER_SYNTHESIS_USER,
        # The plain draft answers the request as one call would, files and all.
        PromptId.ANSWER_DRAFT_USER,
    }
)


#: The prompts sent as one plain call sends them: the request alone, with none of Aeon's
#: framing, when they have no files or turns to carry. The draft is the floor a run's answer is
#: held to ("never worse than one call"), so it must be that call: a small model answers the
#: bare request far better than the same words inside Aeon's prompt XML (docs/verified-answers.md,
#: "Verified answers").
PLAIN = frozenset({PromptId.ANSWER_DRAFT_USER})


#: The prompts that carry the earlier turns of the conversation a request continues: those
#: that carry the files, and the profile's too. A turn can change what the request asks ("and
#: the other one?" means nothing without the turn before), so every prompt that reads the
#: request to make something of it gets them, the profile that sizes the effort included; the
#: prompts that judge what was made read it in the outputs, as with files.
WITH_TURNS = WITH_FILES | {PromptId.TASKPROFILE_INFERENCE_USER}


def file_context(files: Sequence[AttachedFile]) -> tuple[ContextItem, ...]:
    """The attached files as the context items of a UnifiedPrompt, in the request's order."""
    return tuple(ContextItem("file", file.path, file.content) for file in files)


def turn_context(turns: Sequence[Turn], cap: int | None = None) -> tuple[ContextItem, ...]:
    """The earlier turns as context artifacts, oldest first, holding at most `cap` characters
    together (None: all of them, whole).

    The newest turns are kept: the next question most often leans on the last answer. The turn
    that crosses the cap is clipped with a visible marker (prompts.clipping), and the older ones
    are left out behind one artifact that says how many (prompts.conversation), so the model
    knows the conversation began earlier. Each turn keeps its number from the first, whatever
    is left out. What is kept grows with `cap`, as `fit` needs."""
    kept: list[ContextItem] = []
    left = cap
    for number in range(len(turns), 0, -1):
        if left is not None and left <= 0:
            break
        turn = turns[number - 1]
        content = turn.content if left is None else clip(turn.content, left)
        name = TURN_NAME.format(number=number, role=turn.role)
        kept.append(ContextItem("artifact", name, content))
        left = None if left is None else left - len(turn.content)
    dropped = len(turns) - len(kept)
    marker = ContextItem("artifact", TURNS_LEFT_OUT_NAME, TURNS_LEFT_OUT.format(count=dropped))
    return (*([marker] if dropped else []), *reversed(kept))


class Memo(Protocol):
    """Where replies are remembered between deliveries of the same event."""

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str, until: datetime | None = None) -> None:
        """Remember `value`; `until` is when it stops being of use (the run's deadline: a
        redelivery after it ends the run without calling the LLM), None if not known."""


class FirstDeliveryMemo:
    """The memo of an event delivered for the first time (bus.delivery): no handler has run for
    it, so no reply to its calls can be remembered yet, and asking would only cost a round trip
    per call. Its replies are still remembered, for a redelivery."""

    def __init__(self, memo: Memo) -> None:
        self._memo = memo

    async def get(self, key: str) -> str | None:
        return None

    async def put(self, key: str, value: str, until: datetime | None = None) -> None:
        await self._memo.put(key, value, until)


@dataclass
class LLMSession:
    """One handler's access to the LLM for one run; usage is added to the run's total."""

    llm: LLMAdapter
    registry: PromptRegistry
    memo: Memo
    run_key: str
    usage: Usage
    #: No LLM call starts after this moment (the request's deadline).
    deadline: datetime | None = None
    #: Characters a rendered prompt may take (see `prompt_budget_chars`).
    prompt_chars: int = prompt_budget_chars(DEFAULT_CONTEXT_TOKENS)
    #: Asked before every call; raises RunCancelled once the run is cancelled (phases.cancels).
    check_cancelled: Callable[[], Awaitable[None]] | None = None
    #: The request's attached files (`file_context`), given to the prompts in WITH_FILES.
    files: tuple[ContextItem, ...] = ()
    #: The earlier turns of the conversation the request continues, given (`turn_context`,
    #: fitted to the budget) to the prompts in WITH_TURNS.
    turns: tuple[Turn, ...] = ()
    #: Tokens of the calls in flight that their replies have not yet counted: what the run's
    #: budget must also pay for when calls run side by side.
    _reserved: int = field(default=0, init=False, repr=False)

    async def text(
        self,
        prompt_id: PromptId,
        data: InputSource,
        *,
        scope: str,
        context: Sequence[ContextItem] = (),
        sink: TextSink | None = None,
    ) -> Reply:
        """A free-form reply; the caller decides what a truncated or refused one is worth.
        `sink`: where its text is written as the model writes it (a reply that may be
        published; a memoised reply is not written again)."""
        return await self._reply(prompt_id, data, scope, context, None, sink)

    async def json(
        self,
        prompt_id: PromptId,
        data: InputSource,
        model: type[T],
        *,
        scope: str,
        context: Sequence[ContextItem] = (),
        sink: TextSink | None = None,
    ) -> T:
        """A reply validated against `model`: as sent, else repaired locally, else by one call.
        `sink` is given the reply's text as it is written, and the repair call's after a reset
        (the reply it repairs is not the one used)."""
        reply = await self._reply(prompt_id, data, scope, context, model, sink)
        request = _request_of(data)
        try:
            return self._read(prompt_id, reply, model, request)
        except UNUSABLE as error:
            first_error = error
        if sink is not None:
            await sink.reset()
        self.usage.repair_calls += 1
        repaired = await self._reply(
            PromptId.SUPERVISOR_REPAIR_JSON_USER,
            repair_input(self.registry, prompt_id, request, reply, first_error),
            repair_scope(scope, prompt_id.value),
            (),
            model,
            sink,
        )
        try:
            return self._read(prompt_id, repaired, model, request)
        except UNUSABLE as error:
            raise LLMOutputError(prompt_id, error) from first_error

    def _read(self, prompt_id: PromptId, reply: Reply, model: type[T], request: str) -> T:
        """The reply read by llm.reply's one pipeline, its local repair counted."""
        read = read_json(self.registry, prompt_id, reply, model, request)
        if read.repaired:
            self.usage.local_repairs += 1
        return read.output

    async def _reply(
        self,
        prompt_id: PromptId,
        data: InputSource,
        scope: str,
        context: Sequence[ContextItem],
        model: type[BaseModel] | None,
        sink: TextSink | None = None,
    ) -> Reply:
        key = memo_key(self.run_key, scope, prompt_id.value)
        remembered = await self.memo.get(key)
        if remembered is not None:
            observed.memo_hit(prompt_id.value)
            return Reply.from_memo(remembered)
        schema = schema_of(model) if model is not None else None
        budget = self.prompt_chars
        try:
            answer = await self._send(self._call(prompt_id, data, context, schema, budget, sink))
        except ContextLengthError as error:
            budget = _tighter(budget, error.limit_tokens)
            answer = await self._send(self._call(prompt_id, data, context, schema, budget, sink))
        reply = _reply_of(answer)
        if not (reply.text.strip() or reply.truncated):
            raise LLMError(f"{prompt_id.value}: the model returned an empty reply", transient=True)
        used = answer.usage
        self.usage.add(
            used.prompt_tokens, used.completion_tokens, used.estimated, used.cached_tokens
        )
        await self.memo.put(key, reply.to_memo(), self.deadline)
        return reply

    async def _send(self, call: LLMCall) -> LLMReply:
        """The call, if it may start: the run is not cancelled, and its token budget can pay
        for the call at its most (`call_cost`); else RunStopped, and nothing is sent."""
        if self.check_cancelled is not None:
            await self.check_cancelled()
        limit = self.usage.token_budget
        # Priced only for a run with a budget: pricing renders the whole prompt once more.
        cost = 0 if limit is None else call_cost(call)
        spent = self.usage.total_tokens + self._reserved
        if limit is not None and spent + cost > limit:
            raise BudgetExhausted(call.prompt_id.value, spent, cost, limit)
        self._reserved += cost
        try:
            return await observed.complete(self.llm, call)
        finally:
            self._reserved -= cost

    def _call(
        self,
        prompt_id: PromptId,
        source: InputSource,
        context: Sequence[ContextItem],
        schema: dict | None,
        budget: int,
        sink: TextSink | None = None,
    ) -> LLMCall:
        """The call with its prompt fitted to `budget` characters as far as its input allows:
        the outputs its input is built with and the files of its context are cut to one cap,
        and its earlier turns to the same cap together."""
        system = self._system_prompt(prompt_id)
        items = (*self.files, *context) if prompt_id in WITH_FILES else tuple(context)
        turns = self.turns if prompt_id in WITH_TURNS else ()

        def build(cap: int | None) -> tuple[PromptInput, tuple[ContextItem, ...]]:
            data = source if isinstance(source, PromptInput) else source(cap)
            return data, (*turn_context(turns, cap), *clipped(items, cap))

        def render(part: tuple[PromptInput, tuple[ContextItem, ...]]) -> UnifiedPrompt:
            data, fitted = part
            instructions = self.registry.get_prompt(prompt_id, data)
            return UnifiedPrompt(system_prompt=system, instructions=instructions, context=fitted)

        if isinstance(source, PromptInput) and not (items or turns):  # nothing to clip
            part = build(None)
            prompt = render(part)
        else:
            part, prompt = fit(build, render, budget)
        return LLMCall(
            prompt_id=prompt_id,
            input=part[0],
            prompt=prompt,
            response_schema=schema,
            deadline=self.deadline,
            max_tokens=self.registry.reply_tokens(prompt_id),
            plain=prompt_id in PLAIN,
            sink=sink,
        )

    def _system_prompt(self, prompt_id: PromptId) -> str:
        return _system_text(self.registry, SYSTEM_OF[prompt_id], self.llm.family)


def call_cost(call: LLMCall) -> int:
    """The most tokens `call` may take: its prompt, estimated at CHARS_PER_TOKEN (fewer
    characters per token than most text has, so rarely an underestimate), and its reply budget
    (REPLY_TOKENS), which the server may not exceed."""
    prompt_chars = len(call.message)
    return -(-prompt_chars // CHARS_PER_TOKEN) + (call.max_tokens or 0)


def fit(
    build: Callable[[int | None], P],
    render: Callable[[P], UnifiedPrompt],
    budget: int,
) -> tuple[P, UnifiedPrompt]:
    """The input and prompt with the largest per-output cap whose XML fits `budget` characters.

    Unclipped when that fits; else a binary search over the cap, which is deterministic and
    clips the longest outputs (and files) first (a prompt's length grows with the cap, since
    `clip` never lengthens a text). When not even a cap of 0 fits (the request alone is too
    long), that is sent, and the server has the last word.
    """
    data = build(None)
    prompt = render(data)
    if _surely_fits(prompt, budget):
        return data, prompt
    whole = _xml_length(prompt)
    if whole <= budget:
        return data, prompt
    low, high = 0, whole
    while low < high:
        middle = (low + high + 1) // 2
        if _xml_length(render(build(middle))) <= budget:
            low = middle
        else:
            high = middle - 1
    data = build(low)
    return data, render(data)


def clipped(items: tuple[ContextItem, ...], cap: int | None) -> tuple[ContextItem, ...]:
    """`items` with each file's content cut to `cap` characters and marked (prompts.clipping);
    other context items, which the loop made to fit already, as they are."""
    if cap is None:
        return items
    return tuple(
        ContextItem(item.type, item.name, clip(item.content, cap)) if item.type == "file" else item
        for item in items
    )


#: The most characters XML escaping makes of one (`"` becomes `&quot;`), and room for the tags.
_ESCAPE_GROWTH, _TAGS = 6, 1_024


def _surely_fits(prompt: UnifiedPrompt, budget: int) -> bool:
    """True when even fully escaped the prompt fits: the common case, without rendering XML."""
    raw = len(prompt.system_prompt) + len(prompt.instructions)
    raw += sum(len(item.content) + len(item.name) for item in prompt.context)
    return raw * _ESCAPE_GROWTH + _TAGS <= budget


def _xml_length(prompt: UnifiedPrompt) -> int:
    return len(prompt.to_xml())


def _tighter(budget: int, limit_tokens: int | None) -> int:
    """The budget for the one retry after a context-length refusal: at most half the last one."""
    half = budget // 2
    return min(half, prompt_budget_chars(limit_tokens)) if limit_tokens else half


def _reply_of(answer: LLMReply) -> Reply:
    return Reply(
        text=_storable(answer.text),
        truncated=answer.truncated,
        refused=answer.refused,
    )


@lru_cache(maxsize=256)
def _system_text(registry: PromptRegistry, system_id: PromptId, family: str) -> str:
    """The system prompt `system_id` for `family`, rendered once per registry and family.

    Safe to keep: a system prompt depends on nothing else (the template file of its phase for
    that family, in the registry's template directory), and that file is read once per process
    anyway (prompts.unified caches `_load`), so a cached text can never be staler than a fresh
    rendering. A failure (no template file) raises and is not cached.
    """
    return registry.get_prompt(system_id, SystemPromptInput(agent=family))


def _storable(text: str) -> str:
    """The reply as valid UTF-8: a lone surrogate (a model cutting an emoji in half) becomes '?'
    here, rather than making every event that carries it impossible to encode."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _request_of(data: InputSource) -> str:
    """The request a prompt's input carries ('' for one without): built with no room for
    outputs when it is a builder, since only the request is wanted."""
    built = data if isinstance(data, PromptInput) else data(0)
    return str(getattr(built, "request", "") or "")
