"""Phase E: answer synthesis for every LoopExited, whatever the reason.

The contract is docs/requirements.md, "Phase E: answer synthesis" (FR-019..FR-042).

Every accepted request must end with exactly one FinalAnswer, so nothing here may raise:

- The normal path asks the model (ANSWER_SYNTHESIS_USER through an LLMSession, so the reply is
  validated, repaired at most once and memoised) and the host adds what the model is not asked
  for: `ttl_exhausted`, `metadata`, and which step ids really exist. An answer that is Aeon's
  own prompt text (the format's example, its instructions: prompts.echo) is an unusable reply
  to the session, so it is repaired once and otherwise replaced by the host's answer below:
  a copy is a failed answer, never a published one.
- An upstream run that did not go well (no pass ran, TTL exhausted, data missing, or the loop
  exited before converging) is still answered by the model, from whatever is available, but the
  answer is degraded: `metadata["degraded"]` is True, `metadata["reason"]` says why, and
  `answer_text` opens by saying the loop exited early (FR-030).
- When the model cannot be used (an LLM error, a reply unusable after its repair, a broken
  registry, a lost request, a passed deadline, or Phase E itself dead-lettered), the host
  assembles a degraded answer from the upstream artifacts alone (FR-027/FR-028): one builder,
  `degraded_answer`, serves `execute_phase_e`, `handle` and `fallback_answer`.

Metadata always holds convergence_status, total_passes, total_refinements, ttl_remaining,
missing_fields, degraded and reason, plus the rules that did not hold in the last pass and each
upstream artifact present (FR-028's raw data). How the run ended is decided in phases.exits
and worded in phases.render, from the same metadata every gateway shows.

FinalAnswer never gets a field beyond its six (FR-026, FR-033).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from aeonloop.bus.keys import memo_scope
from aeonloop.contracts import AttachedFile, Turn, Usage
from aeonloop.exceptions import RunStopped
from aeonloop.limits import LoopSettings
from aeonloop.llm.answer_field import FieldSink
from aeonloop.llm.base import LLMAdapter, TextSink
from aeonloop.llm.session import LLMSession
from aeonloop.phases import exits, history, render, verification
from aeonloop.phases.cancels import Stopped, unless_stopped
from aeonloop.phases.deps import NO_STREAM, AnswerStream, PhaseDeps
from aeonloop.phases.events import (
    Event,
    ExecutionResult,
    FinalAnswerReady,
    LoopExited,
    RunState,
    utcnow,
)
from aeonloop.phases.models import (
    AnswerReason,
    ExecutionPass,
    FinalAnswer,
    PhaseEInput,
    Plan,
    RuleFinding,
)
from aeonloop.phases.render import as_json_text
from aeonloop.prompts.clipping import clip
from aeonloop.prompts.registry import (
    AnswerSynthesisInput,
    FinalAnswerOutput,
    PromptId,
    PromptRegistry,
    goal_text,
)
from aeonloop.runs.in_process import DictMemo

#: PhaseEInput's optional upstream artifacts, in the order answers present them (FR-028).
ARTIFACT_FIELDS = (
    "plan_state",
    "execution_results",
    "execution_passes",
    "convergence_assessment",
    "semantic_validation",
    "task_profile",
)
#: The request of a run whose state was lost and whose LoopExited did not carry the text either.
LOST_REQUEST = "(the request text was lost before answer synthesis)"
SYNTHESIS_SCOPE = memo_scope("e", "synthesis")
#: The field of the synthesis's reply (FinalAnswerOutput) that is the answer's text: what its
#: sink writes on as the reply is written (llm.answer_field).
ANSWER_FIELD = "answer_text"
#: Characters of one step's output shown to the model, and in a host-made degraded answer.
PROMPT_OUTPUT_CHARS = 8_000
ANSWER_OUTPUT_CHARS = 2_000
ERROR_CHARS = 500


@dataclass(frozen=True)
class ExitContext:
    """What the bus knows beyond PhaseEInput: why the loop exited, and the phases' notes."""

    detail: str = ""
    notes: tuple[str, ...] = ()


NO_CONTEXT = ExitContext()

#: What a degraded answer's opening says of the text after it: the plain draft, or the model's
#: answer from what the run had.
DRAFT_CAVEAT = "What follows is the plain draft answer (one call)."
REFINED_DRAFT_CAVEAT = (
    "What follows is the plain draft answer (one call), refined where the checks failed."
)
DATA_CAVEAT = "What follows rests only on the data that was available and may be incomplete."


# ---------------------------------------------------------------------------------------------
# Entry points.
# ---------------------------------------------------------------------------------------------


async def execute_phase_e(
    phase_e_input: PhaseEInput, llm_adapter: LLMAdapter, prompt_registry: PromptRegistry
) -> FinalAnswer:
    """Phase E as a library call (FR-021): a FinalAnswer for any input, never an exception.

    Replies are memoised in a private DictMemo and usage is not reported; the bus handler uses
    `synthesize` with the run's shared memo and usage instead.
    """
    session = LLMSession(
        llm_adapter, prompt_registry, DictMemo(), phase_e_input.correlation_id, Usage()
    )
    return await synthesize(phase_e_input, session)


async def synthesize(
    phase_e_input: PhaseEInput,
    session: LLMSession,
    context: ExitContext = NO_CONTEXT,
    verify: Verify | None = None,
    sink: TextSink | None = None,
) -> FinalAnswer:
    """The model's answer when it can be had, else the host's degraded answer; never raises.

    `verify`, given the model's reply, checks the answer (and refines it) and makes the
    FinalAnswer from what it chose (`answer_run`); without it the reply is the answer.
    `sink` is given the reply's answer text as the model writes it (`synthesis_sink`).

    Cancellation is not caught: a worker that is stopping must be allowed to stop, and the
    event is then redelivered.
    """
    try:
        if _request_lost(phase_e_input):
            return degraded_answer(phase_e_input, AnswerReason.REQUEST_LOST, context)
        output = await session.json(
            PromptId.ANSWER_SYNTHESIS_USER,
            functools.partial(synthesis_input, phase_e_input),
            FinalAnswerOutput,
            scope=SYNTHESIS_SCOPE,
            sink=sink,
        )
        if verify is not None:
            return await verify(output)
        return model_answer(phase_e_input, output, context)
    except RunStopped:  # the caller's to answer: no call failed
        raise
    except Exception as error:  # FR-032: Phase E answers whatever went wrong
        return degraded_answer(phase_e_input, exits.synthesis_failure(error), context, error)


#: Makes the FinalAnswer from the model's reply, once its answer is checked (`answer_run`).
Verify = Callable[[FinalAnswerOutput], Awaitable[FinalAnswer]]


async def answer_run(
    event: LoopExited,
    phase_e_input: PhaseEInput,
    session: LLMSession,
    context: ExitContext,
    settings: LoopSettings,
    stream: AnswerStream = NO_STREAM,
) -> FinalAnswer:
    """The run's answer, checked (docs/verified-answers.md, "Verified answers"): the model's
    answer, checked, critiqued and refined while a fail-severity check does not hold, and the
    candidate that holds the most published. A run that ran no pass (it ended at Phase A on
    its draft, or the loop failed before its first pass) has no synthesis call, since a
    synthesis of no work is one more plain call, and a worse one: its draft is the text
    checked and refined. A run without checks or a draft (or whose state was lost) is answered
    as before. The answer's text, and each refinement's, is written to `stream` as the model
    writes it (`synthesis_sink`)."""
    run = event.run
    sink = synthesis_sink(stream, phase_e_input, run)
    if run is None or not (run.rules or run.draft):
        return await synthesize(phase_e_input, session, context, sink=sink)

    async def verify(output: FinalAnswerOutput | None) -> FinalAnswer:
        checked = await verification.verified(
            session,
            run,
            output.answer_text if output is not None else None,
            settings,
            lambda: not event.expired(),
            loop_converged=exits.converged(event.reason),
            stream=stream,
        )
        return model_answer(phase_e_input, output, _noted(context, run), checked, run.has_draft)

    if run.draft and run.pass_count == 0:
        return await verify(None)  # the draft is the text checked, and refined where it fails

    answer = await synthesize(phase_e_input, session, context, verify, sink)
    if run.draft and "answered_by" not in answer.metadata:  # the host wrote it, for want of one
        checked = await verification.draft_only(run, run.draft, settings)
        return draft_instead(phase_e_input, answer, checked)
    return answer


def synthesis_sink(
    stream: AnswerStream, phase_e_input: PhaseEInput, run: RunState | None
) -> TextSink | None:
    """Where the synthesis's answer text is written as it comes: the `answer_text` of its JSON
    reply, provisional unless the host will publish it as written (`published_as_written`)."""
    inner = stream.sink("answer", not published_as_written(phase_e_input, run))
    return None if inner is None else FieldSink(inner, ANSWER_FIELD)


def published_as_written(phase_e_input: PhaseEInput, run: RunState | None) -> bool:
    """Whether the model's answer, once it is had, is published as the model wrote it: no
    fail-severity check can set it aside (none of the run's rules is one), and the run's end
    asks for no caveat before it (the reason the answer would be given is CONVERGED). Only a
    reply that turns out unusable (cut, not the JSON asked for, a copy of the prompt) is then
    not published: the host's checks have nothing left to judge."""
    if run is not None and verification.fail_rules(run.rules):
        return False
    reason = answer_reason_of(phase_e_input, has_draft=run is not None and run.has_draft)
    return reason is AnswerReason.CONVERGED


def answer_reason_of(
    p: PhaseEInput, *, has_draft: bool, checks_failed: bool = False
) -> AnswerReason:
    """The reason the answer is given (exits.answer_reason), from what Phase E was given."""
    return exits.answer_reason(
        p.convergence_status,
        p.total_passes,
        p.ttl_remaining,
        missing_fields(p),
        checks_failed=checks_failed,
        has_draft=has_draft,
    )


def draft_instead(
    phase_e_input: PhaseEInput, host_made: FinalAnswer, checked: verification.Verified
) -> FinalAnswer:
    """The run's plain draft in place of a host-made answer (the model's could not be had):
    still degraded, for the same reason, but the reader gets one call's answer rather than a
    summary of the run's data, so the answer is never worse than one call."""
    metadata = {**host_made.metadata, **checked.metadata()}
    opening = f"Degraded answer: {ending_text(phase_e_input, metadata)}"
    return FinalAnswer(
        answer_text=f"{opening} {DRAFT_CAVEAT}\n\n{checked.chosen.text}",
        ttl_exhausted=host_made.ttl_exhausted,
        metadata=metadata,
    )


def _noted(context: ExitContext, run: RunState) -> ExitContext:
    """The context with the run's notes as they are now (checking the answer may add some)."""
    return ExitContext(detail=context.detail, notes=tuple(run.notes))


def build_phase_e_input(
    event: LoopExited, passes: list[dict[str, Any]] | None = None
) -> PhaseEInput:
    """FR-028's mapping from the run the event carries (which may be partial, or lost) to E's input.

    `passes` are the run's pass records as read from its history (None: those in `run.passes`,
    or none but the event's own). A lost run keeps only what the event itself knows: the
    reason, the request text if it rode along, and the event's own time as the start (the real
    start went with the run).
    """
    run = event.run
    request = (run.request if run else "") or event.request or LOST_REQUEST
    if run is None:
        return PhaseEInput(
            request=request,
            correlation_id=event.correlation_id,
            execution_start_timestamp=event.created_at,
            convergence_status=event.reason,
            total_passes=0,
            total_refinements=0,
            ttl_remaining=0,
        )
    if passes is None:
        records = run.passes or ([event.execution_pass] if event.execution_pass else [])
        passes = [record.model_dump(mode="json") for record in records]
    last = passes[-1] if passes else {}
    return PhaseEInput(
        request=request,
        correlation_id=event.correlation_id,
        execution_start_timestamp=run.started_at,
        convergence_status=event.reason,
        total_passes=run.pass_count,
        total_refinements=run.total_refinements,
        ttl_remaining=run.ttl_remaining,
        plan_state=_dump(run.plan),
        execution_results=step_results(run.plan),
        convergence_assessment=last.get("assessment"),
        execution_passes=passes or None,
        semantic_validation=last.get("validation"),
        task_profile=_dump(run.profile),
    )


async def handle(event: LoopExited, deps: PhaseDeps) -> list[Event]:
    """LoopExited → FinalAnswerReady, one per run, with the run's token usage included.

    Replies go through `deps.memo`, so a redelivered event does not pay for synthesis twice, and
    the output's id derives from the input's, so the bus's dedupe drops a second copy. After the
    deadline no model is called: the gateway has stopped waiting and an answer now beats a
    better one later.
    """
    passes = await _load_history(deps, event) if event.run is not None else None
    files, turns = await _load_context(deps, event)
    await _load_draft(deps, event)
    phase_e_input = build_phase_e_input(event, passes)
    usage = event.run.usage.model_copy() if event.run else Usage()
    context = exit_context(event)
    cid = event.correlation_id
    without = exits.answer_without_model(event, await deps.cancels.cancelled(cid))
    if without is not None:
        answer = degraded_answer(phase_e_input, without, context)
        if without is AnswerReason.DEADLINE_EXCEEDED and event.run and event.run.draft:
            # No model call may start, but one was made in time: the reader gets it.
            checked = await verification.draft_only(event.run, event.run.draft, deps.settings)
            answer = draft_instead(phase_e_input, answer, checked)
    else:
        session = deps.session(cid, usage, event.deadline, files, turns)
        stream = deps.answer_stream(cid)
        work = answer_run(event, phase_e_input, session, context, deps.settings, stream)
        done = await unless_stopped(deps.cancels, cid, work)
        if isinstance(done, Stopped):
            reason = exits.synthesis_stopped(done.error)
            answer = degraded_answer(phase_e_input, reason, context, done.error)
        else:
            answer = done
    return [answer_event(event, phase_e_input, answer, usage)]


async def _load_history(deps: PhaseDeps, event: LoopExited) -> list[dict[str, Any]] | None:
    """The run's pass records (its outputs go back in its plan); None when the run has them in
    hand already. A history that is gone is noted and answered without."""
    run = event.run
    assert run is not None
    if run.history_loaded:
        return None
    try:
        return await history.load_pass_json(deps.records, event.correlation_id, run)
    except history.HistoryMissing as error:
        run.notes.append(f"phase E: answered without the passes' records: {error}")
        last = event.execution_pass
        return [last.model_dump(mode="json")] if last else []


async def _load_context(
    deps: PhaseDeps, event: LoopExited
) -> tuple[list[AttachedFile], list[Turn]]:
    """The files the run's request attached and the earlier turns it carried, for the answer's
    prompt; a record that is gone is noted, and the answer made without it (as without a lost
    history)."""
    run = event.run
    if run is None:
        return [], []
    cid = event.correlation_id
    files: list[AttachedFile] = []
    turns: list[Turn] = []
    try:
        files = await history.load_files(deps.records, cid, run)
    except history.HistoryMissing as error:
        run.notes.append(f"phase E: answered without the attached files: {error}")
    try:
        turns = await history.load_turns(deps.records, cid, run)
    except history.HistoryMissing as error:
        run.notes.append(f"phase E: answered without the earlier turns: {error}")
    return files, turns


async def _load_draft(deps: PhaseDeps, event: LoopExited) -> None:
    """The run's draft, into `event.run.draft`; a record that is gone is noted, and the answer
    made without it."""
    if event.run is None:
        return
    try:
        await history.load_draft(deps.records, event.correlation_id, event.run)
    except history.HistoryMissing as error:
        event.run.has_draft = False
        event.run.notes.append(f"phase E: answered without the draft: {error}")


def fallback_answer(
    event: LoopExited, reason: str, passes: list[dict[str, Any]] | None = None
) -> FinalAnswerReady:
    """A degraded answer made without any LLM call, for when Phase E's own event is dead-lettered.

    `reason` is the bus's account of why it gave up; it goes into metadata["error"]. `passes`
    are the run's pass records if they were read (its outputs then are in its plan). The event
    id is the one `handle` would have used, so the run still gets only one FinalAnswer.
    """
    try:
        phase_e_input = build_phase_e_input(event, passes)
    except Exception:  # the last resort must answer even for a corrupt run
        phase_e_input = build_phase_e_input(event.model_copy(update={"run": None}))
    usage = event.run.usage.model_copy() if event.run else Usage()
    answer = degraded_answer(
        phase_e_input, AnswerReason.PHASE_E_FAILED, exit_context(event), reason
    )
    return answer_event(event, phase_e_input, answer, usage)


# ---------------------------------------------------------------------------------------------
# What the run left: missing artifacts, rules that failed, the TTL flag.
# ---------------------------------------------------------------------------------------------


def missing_fields(phase_e_input: PhaseEInput) -> tuple[str, ...]:
    """Upstream artifacts that are absent or empty: an empty result is no result (FR-025)."""
    return tuple(name for name in ARTIFACT_FIELDS if not getattr(phase_e_input, name, None))


def failed_rules(phase_e_input: PhaseEInput) -> list[RuleFinding]:
    """The rules that did not hold in the last pass, failed ones first: what the answer names
    when it says what failed. A pass record of another shape names none."""
    passes = phase_e_input.execution_passes
    try:
        judged = (passes[-1] if passes else {}).get("evaluation") or {}
        found = [*(judged.get("failed") or []), *(judged.get("warnings") or [])]
    except (AttributeError, KeyError, TypeError):
        return []
    return render.findings_of(found)


def ttl_flag(phase_e_input: PhaseEInput) -> bool | None:
    """FinalAnswer.ttl_exhausted: True when TTL was exhausted, None otherwise (FR-027)."""
    p = phase_e_input
    return True if exits.ttl_spent(p.convergence_status, p.total_passes, p.ttl_remaining) else None


def exit_context(event: LoopExited) -> ExitContext:
    return ExitContext(detail=event.detail, notes=tuple(event.run.notes) if event.run else ())


# ---------------------------------------------------------------------------------------------
# Answers.
# ---------------------------------------------------------------------------------------------


def synthesis_input(phase_e_input: PhaseEInput, cap: int | None = None) -> AnswerSynthesisInput:
    """What the model is shown (FR-041): the run's facts and its artifacts, summarised.

    Each step output is clipped to PROMPT_OUTPUT_CHARS, or to `cap` when the session fits the
    prompt to the context window with a smaller one.
    """
    limit = PROMPT_OUTPUT_CHARS if cap is None else min(cap, PROMPT_OUTPUT_CHARS)
    assessment = "\n".join(
        text
        for text in (
            assessment_summary(phase_e_input.convergence_assessment),
            validation_summary(phase_e_input.semantic_validation),
        )
        if text
    )
    return AnswerSynthesisInput(
        request=phase_e_input.request,
        convergence_status=phase_e_input.convergence_status,
        total_passes=phase_e_input.total_passes,
        total_refinements=phase_e_input.total_refinements,
        ttl_remaining=phase_e_input.ttl_remaining,
        last_pass_score=last_pass_score(phase_e_input),
        plan_summary=plan_summary(phase_e_input.plan_state, phase_e_input.request),
        # Under their ids alone: the plan summary just above gives each step's description,
        # so repeating it over each result would send every description twice.
        results_summary=results_summary(phase_e_input.execution_results, None, limit),
        assessment_summary=assessment,
        missing_fields=list(missing_fields(phase_e_input)),
    )


def last_pass_score(phase_e_input: PhaseEInput) -> float:
    """The last pass's score, 0 to 1: the rule score when rules decided, else the assessment's
    (docs/verified-answers.md, "Convergence: the host decides"). 0 when no pass ran or its record
    carries no usable score: nothing was measured."""
    passes = phase_e_input.execution_passes or []
    last = passes[-1] if passes else None
    score = last.get("score") if isinstance(last, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        return 0.0
    return min(1.0, max(0.0, float(score)))


def model_answer(
    phase_e_input: PhaseEInput,
    output: FinalAnswerOutput | None,
    context: ExitContext = NO_CONTEXT,
    checked: verification.Verified | None = None,
    has_draft: bool = False,
) -> FinalAnswer:
    """The model's answer with the host's part: the TTL flag, metadata, and, when the run did
    not go well, an opening paragraph saying so (FR-030), since the model may not.

    `checked`: the answer was checked (phases.verification): its text is the candidate chosen
    (the draft, the model's answer, or a refinement), the metadata says which and lists each
    check with its verdict on that text, and a fail-severity check that does not hold makes
    the answer degraded (`checks_failed`). `output` is None only for a run answered by its
    draft at Phase A's word, which had no synthesis."""
    p = phase_e_input
    checks_failed = checked is not None and checked.failed
    reason = answer_reason_of(p, has_draft=has_draft, checks_failed=checks_failed)
    metadata = build_metadata(phase_e_input, reason, context)
    if checked is not None:
        metadata.update(checked.metadata())
    text = checked.chosen.text if checked is not None else output.answer_text if output else ""
    if reason is not AnswerReason.CONVERGED:
        caveat = _caveat(checked.chosen.source if checked is not None else "answer", output)
        text = f"Degraded answer: {ending_text(phase_e_input, metadata)} {caveat}\n\n{text}"
    # The model's own confidence and step ids are of the text it wrote (or refined); the draft
    # was written before any step, and judged by nobody.
    by_model = output is not None and (checked is None or checked.chosen.source != "draft")
    used = output.used_step_ids if by_model and output is not None else None
    known = known_step_ids(phase_e_input)
    return FinalAnswer(
        answer_text=text,
        confidence=output.confidence if by_model and output is not None else None,
        used_step_ids=None if used is None else [i for i in used if i in known],
        notes=output.notes if by_model and output is not None else None,
        ttl_exhausted=ttl_flag(phase_e_input),
        metadata=metadata,
    )


def _caveat(source: verification.Source, output: FinalAnswerOutput | None) -> str:
    """What a degraded answer's opening says of the text after it."""
    if source == "draft":
        return DRAFT_CAVEAT
    if output is None:  # a refinement of the draft: no pass ran, the model wrote no answer
        return REFINED_DRAFT_CAVEAT
    return DATA_CAVEAT


def degraded_answer(
    phase_e_input: PhaseEInput,
    reason: AnswerReason,
    context: ExitContext = NO_CONTEXT,
    error: BaseException | str | None = None,
) -> FinalAnswer:
    """The host's answer when the model's cannot be had: why, how the run ended, then the
    available data.

    Upstream data is summarised, never invented (FR-028); the raw artifacts go to metadata.
    Should even that fail on some unforeseen shape of data, a minimal answer still comes back.
    """
    try:
        metadata = build_metadata(phase_e_input, reason, context, error)
        opening = f"Unable to synthesize a complete answer. {ending_text(phase_e_input, metadata)}"
        results = phase_e_input.execution_results
        return FinalAnswer(
            answer_text=f"{opening}\n\n{available_data(phase_e_input)}",
            used_step_ids=list(results) if isinstance(results, dict) and results else None,
            ttl_exhausted=ttl_flag(phase_e_input),
            metadata=metadata,
        )
    except Exception as failure:  # the degraded path must not fail in turn
        return minimal_answer(phase_e_input, reason, failure)


def ending_text(phase_e_input: PhaseEInput, metadata: dict[str, Any]) -> str:
    """How the run ended and what failed, in the words every gateway shows them in (made from
    the same metadata, phases.render), then how many passes ran: an early exit said plainly
    (FR-030)."""
    lines = render.ending_lines(phase_e_input.convergence_status, metadata)
    return render.as_sentences([*lines, _passes_ran(phase_e_input, metadata)])


def minimal_answer(
    phase_e_input: PhaseEInput, reason: AnswerReason, failure: Exception
) -> FinalAnswer:
    """The last resort: no summaries, only the facts and the required metadata keys."""
    return FinalAnswer(
        answer_text=(
            f"Unable to synthesize an answer ({reason.value}), and the run's data could not be "
            f"summarised ({_error_text(failure)}). Request: {phase_e_input.request}"
        ),
        metadata={
            **_core_metadata(phase_e_input),
            "missing_fields": list(missing_fields(phase_e_input)),
            "degraded": True,
            "reason": reason.value,
            "error": _error_text(failure),
        },
    )


def build_metadata(
    phase_e_input: PhaseEInput,
    reason: AnswerReason,
    context: ExitContext = NO_CONTEXT,
    error: BaseException | str | None = None,
) -> dict[str, Any]:
    """The keys every answer has, the exit's context, the rules that did not hold in the last
    pass, and each upstream artifact present."""
    metadata: dict[str, Any] = {
        **_core_metadata(phase_e_input),
        "missing_fields": list(missing_fields(phase_e_input)),
        "degraded": reason is not AnswerReason.CONVERGED,
        "reason": reason.value,
    }
    if context.detail:
        metadata["exit_detail"] = context.detail
    if context.notes:
        metadata["run_notes"] = list(context.notes)
    if error is not None:
        metadata["error"] = _error_text(error)
    findings = failed_rules(phase_e_input)
    if findings:
        metadata["failed_rules"] = [finding.model_dump() for finding in findings]
    calls = tool_calls(phase_e_input)
    if calls:
        metadata["tool_calls"] = calls
    for name in ARTIFACT_FIELDS:
        value = getattr(phase_e_input, name)
        if value:
            metadata[name] = value
    return metadata


def tool_calls(phase_e_input: PhaseEInput) -> list[dict[str, Any]]:
    """Every tool call of the run, oldest first, each with its pass: what a reader of the
    answer looks for first, gathered from the passes' records (`execution_passes`)."""
    return [
        {"pass_number": record.get("pass_number"), **call}
        for record in phase_e_input.execution_passes or []
        for call in record.get("tool_calls") or []
    ]


def answer_event(
    event: LoopExited, phase_e_input: PhaseEInput, answer: FinalAnswer, usage: Usage
) -> FinalAnswerReady:
    """The run's ExecutionResult (FR-040), with token usage added to the answer's metadata."""
    usage_data = {**usage.model_dump(), "total_tokens": usage.total_tokens}
    answer = answer.model_copy(update={"metadata": {**answer.metadata, "usage": usage_data}})
    result = ExecutionResult(
        status=exits.answered_status(event.reason, str(answer.metadata.get("reason", ""))),
        degraded=bool(answer.metadata.get("degraded", True)),
        total_passes=phase_e_input.total_passes,
        total_refinements=phase_e_input.total_refinements,
        ttl_remaining=phase_e_input.ttl_remaining,
        usage=usage,
        elapsed_seconds=_elapsed_since(phase_e_input.execution_start_timestamp),
        final_answer=answer,
    )
    webhook_url = event.run.webhook_url if event.run else None
    request = event.request or (event.run.request if event.run else "")
    return event.child(FinalAnswerReady, result=result, webhook_url=webhook_url, request=request)


# ---------------------------------------------------------------------------------------------
# Summaries of upstream artifacts: plain data, read defensively.
# ---------------------------------------------------------------------------------------------


def _tolerant(summary: Callable[..., str]) -> Callable[..., str]:
    """Upstream dicts are data, not contracts: an unexpected shape is shown as its JSON."""

    @functools.wraps(summary)
    def summarise(value: Any, *args: Any) -> str:
        if not value:
            return ""
        try:
            return summary(value, *args)
        except (AttributeError, KeyError, TypeError, ValueError):
            return _clip(_json_text(value), ANSWER_OUTPUT_CHARS)

    return summarise


@_tolerant
def plan_summary(plan_state: dict[str, Any], request: str | None = None) -> str:
    """Goal, then one line per step with its status. Given the `request` a prompt also shows,
    a goal that only restates it is not sent again (registry.goal_text)."""
    goal = str(plan_state.get("goal") or "")
    if goal and request is not None:
        goal = goal_text(goal, request)
    lines = [f"goal: {goal}"] if goal else []
    lines += [
        f"- {step['step_id']} ({step.get('status', 'unknown')}): {step.get('description', '')}"
        for step in plan_state.get("steps") or []
    ]
    return "\n".join(lines)


@_tolerant
def results_summary(
    execution_results: dict[str, Any],
    plan_state: dict[str, Any] | None,
    limit: int,
    shorten: Callable[[str, int], str] = clip,
) -> str:
    """Each step's output under its id and, given the plan, its description; clipped to `limit`
    characters (with the context marker for a prompt; answers shown to people pass a plainer
    `shorten`)."""
    descriptions = _step_descriptions(plan_state)
    return "\n\n".join(
        _result_block(str(step_id), descriptions.get(str(step_id), ""), shorten(_text(out), limit))
        for step_id, out in execution_results.items()
    )


def _result_block(step_id: str, description: str, output: str) -> str:
    return f"[{step_id}] {description}".rstrip() + f"\n{output}"


@_tolerant
def passes_summary(execution_passes: list[dict[str, Any]]) -> str:
    """One line per pass, in the words progress lines and the run page use (phases.render)."""
    return "\n".join(
        f"- {render.pass_line(ExecutionPass.model_validate(record))}" for record in execution_passes
    )


@_tolerant
def assessment_summary(assessment: dict[str, Any]) -> str:
    """The last assessment's scores, reason codes and summary."""
    text = (
        f"completeness {assessment.get('completeness_score')}, "
        f"coherence {assessment.get('coherence_score')}"
    )
    if assessment.get("reason_codes"):
        text += f"; reasons: {', '.join(map(str, assessment['reason_codes']))}"
    if assessment.get("summary"):
        text += f"; {assessment['summary']}"
    return text


@_tolerant
def validation_summary(validation: dict[str, Any]) -> str:
    """The last semantic validation: its issues, one per line, or that there were none."""
    issues = validation.get("issues") or []
    lines = [f"validation: {len(issues)} issue(s)" if issues else "validation: no issues"]
    lines += [f"- [{i.get('severity', '?')}] {i['description']}" for i in issues]
    if validation.get("summary"):
        lines.append(str(validation["summary"]))
    return "\n".join(lines)


@_tolerant
def profile_shown(task_profile: dict[str, Any]) -> str:
    """The profile in the words the planner is shown it (phases.render), or its JSON when it has
    none of a profile's keys."""
    return render.profile_text(task_profile) or _json_text(task_profile)


def available_data(phase_e_input: PhaseEInput) -> str:
    """The request and a summary of each upstream artifact present, for a host-made answer."""
    p = phase_e_input
    results = results_summary(p.execution_results, p.plan_state, ANSWER_OUTPUT_CHARS, _clip)
    sections = [
        ("Plan", plan_summary(p.plan_state)),
        ("Step results", results),
        ("Passes", passes_summary(p.execution_passes)),
        ("Last assessment", assessment_summary(p.convergence_assessment)),
        ("Last validation", validation_summary(p.semantic_validation)),
        ("Task profile", profile_shown(p.task_profile)),
    ]
    parts = [f"Request: {p.request}"]
    parts += [f"{title}:\n{text}" for title, text in sections if text]
    if len(parts) == 1:
        parts.append("No execution data is available beyond the request.")
    return "\n\n".join(parts)


def step_results(plan: Plan | None) -> dict[str, Any] | None:
    """FR-028's execution_results: the output of every step that completed, by step id (one
    whose output is not in hand, its history unread, is left out, not shown empty)."""
    if plan is None:
        return None
    done = [s for s in plan.steps if s.status == "done" and s.output is not None]
    return {s.step_id: s.output for s in done} or None


def known_step_ids(phase_e_input: PhaseEInput) -> set[str]:
    """Step ids the run really has: the model may cite only these as used."""
    results = phase_e_input.execution_results
    ids = set(results) if isinstance(results, dict) else set()
    return ids | set(_step_descriptions(phase_e_input.plan_state))


def _step_descriptions(plan_state: dict[str, Any] | None) -> dict[str, str]:
    try:
        return {
            str(step["step_id"]): str(step.get("description", ""))
            for step in (plan_state or {}).get("steps") or []
        }
    except (AttributeError, KeyError, TypeError):
        return {}


# ---------------------------------------------------------------------------------------------
# Small helpers.
# ---------------------------------------------------------------------------------------------


def _core_metadata(phase_e_input: PhaseEInput) -> dict[str, Any]:
    return {
        "convergence_status": phase_e_input.convergence_status,
        "total_passes": phase_e_input.total_passes,
        "total_refinements": phase_e_input.total_refinements,
        "ttl_remaining": phase_e_input.ttl_remaining,
    }


def _request_lost(phase_e_input: PhaseEInput) -> bool:
    return not phase_e_input.request.strip() or phase_e_input.request == LOST_REQUEST


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return model.model_dump(mode="json") if model is not None else None


def _passes_ran(phase_e_input: PhaseEInput, metadata: dict[str, Any]) -> str:
    """How many passes ran (nothing when the reason said none did)."""
    count = phase_e_input.total_passes
    if count == 0:
        return "" if metadata.get("reason") == AnswerReason.NO_PASSES else "no execution pass ran"
    passes = f"{count} execution pass{'' if count == 1 else 'es'}"
    if exits.converged(phase_e_input.convergence_status):
        return f"the loop converged after {passes}"
    return f"{passes} ran"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


def _json_text(value: Any) -> str:
    try:
        return as_json_text(value)
    except TypeError:
        return repr(value)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " …"


def _error_text(error: BaseException | str) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return _clip(text, ERROR_CHARS)


def _elapsed_since(start: datetime) -> float:
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    return max(0.0, (utcnow() - start).total_seconds())
