"""Phase E: answer synthesis for every LoopExited, whatever the reason.

The contract is docs/requirements.md, "Phase E: answer synthesis" (FR-019..FR-042).

Every accepted request must end with exactly one FinalAnswer, so nothing here may raise:

- The normal path asks the model (ANSWER_SYNTHESIS_USER through an LLMSession, so the reply is
  validated, repaired at most once and memoised) and the host adds what the model is not asked
  for: `ttl_exhausted`, the outcome, and which step ids really exist. An answer that is Aeon's
  own prompt text (the format's example, its instructions: prompts.echo) is an unusable reply
  to the session, so it is repaired once and otherwise replaced by the host's answer below:
  a copy is a failed answer, never a published one.
- An upstream run that did not go well (no pass ran, TTL exhausted, data missing, or the loop
  exited before converging) is still answered by the model, from whatever is available, but the
  answer is degraded: its outcome's `degraded` is True, `reason` and `degraded_because` say
  why, and the answer's `notes` say the loop exited early (FR-030, as docs/requirements.md
  reads it for an answer the model wrote: `answer_text` is the model's text alone, the text
  checked).
- When the model cannot be used (an LLM error, a reply unusable after its repair, a broken
  registry, a lost request, a passed deadline, or Phase E itself dead-lettered), the host
  assembles a degraded answer from the upstream artifacts alone (FR-027/FR-028): one builder,
  `degraded_answer`, serves `execute_phase_e`, `handle` and `fallback_answer`.

Compose, verify, publish: this module composes (the model's reply, or the draft:
`synthesize`) and has it verified (checked and refined: `answer_run`, phases.verification);
phases.publish publishes, with the one builder of a FinalAnswer (`final_answer`), the one of
the host's degraded answer (`degraded_answer`) and the one place the run's `Outcome`
(phases.outcome) is made (`build_outcome`); phases.upstream summarises what the run left, for
the synthesis prompt and the host's answer. The outcome is the answer's metadata
(`as_metadata`), read back only by `outcome_of`. How the run ended is decided in phases.exits
and worded in phases.render, from the same outcome every gateway shows.

FinalAnswer never gets a field beyond its six (FR-026, FR-033).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from aeonloop.bus.keys import memo_scope
from aeonloop.contracts import AttachedFile, Turn, Usage
from aeonloop.exceptions import RunStopped
from aeonloop.limits import LoopSettings
from aeonloop.llm.answer_field import FieldSink
from aeonloop.llm.base import LLMAdapter, TextSink
from aeonloop.llm.session import LLMSession
from aeonloop.phases import exits, history, publish, upstream, verification
from aeonloop.phases.cancels import Stopped, unless_stopped
from aeonloop.phases.deps import NO_STREAM, AnswerStream, PhaseDeps
from aeonloop.phases.events import Event, FinalAnswerReady, LoopExited, RunState, utcnow
from aeonloop.phases.models import AnswerReason, FinalAnswer, PhaseEInput, fail_rules
from aeonloop.phases.outcome import outcome_of
from aeonloop.prompts.registry import FinalAnswerOutput, PromptId, PromptRegistry
from aeonloop.runs.in_process import DictMemo

#: The request of a run whose state was lost and whose LoopExited did not carry the text either.
LOST_REQUEST = "(the request text was lost before answer synthesis)"
SYNTHESIS_SCOPE = memo_scope("e", "synthesis")
#: The field of the synthesis's reply (FinalAnswerOutput) that is the answer's text: what its
#: sink writes on as the reply is written (llm.answer_field).
ANSWER_FIELD = "answer_text"


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
    context: publish.ExitContext = publish.NO_CONTEXT,
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
            return publish.degraded_answer(phase_e_input, AnswerReason.REQUEST_LOST, context)
        output = await session.json(
            PromptId.ANSWER_SYNTHESIS_USER,
            functools.partial(upstream.synthesis_input, phase_e_input),
            FinalAnswerOutput,
            scope=SYNTHESIS_SCOPE,
            sink=sink,
        )
        if verify is not None:
            return await verify(output)
        return publish.model_answer(phase_e_input, output, context)
    except RunStopped:  # the caller's to answer: no call failed
        raise
    except Exception as error:  # FR-032: Phase E answers whatever went wrong
        reason = exits.synthesis_failure(error)
        return publish.degraded_answer(phase_e_input, reason, context, error)


#: Makes the FinalAnswer from the model's reply, once its answer is checked (`answer_run`).
Verify = Callable[[FinalAnswerOutput], Awaitable[FinalAnswer]]


async def answer_run(
    event: LoopExited,
    phase_e_input: PhaseEInput,
    session: LLMSession,
    context: publish.ExitContext,
    settings: LoopSettings,
    stream: AnswerStream = NO_STREAM,
) -> FinalAnswer:
    """The run's answer, checked (docs/verified-answers.md, "Verified answers"): the model's
    answer, checked, and rewritten while a fail-severity check does not hold, and the
    candidate that holds the most published. A run that ran no pass (it ended at Phase A on
    its draft, or the loop failed before its first pass) has no synthesis call, since a
    synthesis of no work is one more plain call, and a worse one: its draft is the text
    checked and rewritten. A run without checks or a draft (or whose state was lost) is answered
    as before. The answer's text, and each rewrite's, is written to `stream` as the model
    writes it (`synthesis_sink`)."""
    run = event.run
    sink = synthesis_sink(stream, phase_e_input, run)
    if run is None or not (run.rules or run.draft):
        return await synthesize(phase_e_input, session, context, sink=sink)

    async def verify(output: FinalAnswerOutput | None) -> FinalAnswer:
        checking = verification.verified(
            session,
            run,
            output.answer_text if output is not None else None,
            settings,
            lambda: not event.expired(),
            loop_converged=exits.converged(event.reason),
            stream=stream,
        )
        bounded = output is not None
        checked = await _checked_by_deadline(checking, event, run) if bounded else await checking
        noted = _noted(context, run)
        return publish.model_answer(phase_e_input, output, noted, checked, run.has_draft)

    if run.draft and run.pass_count == 0:
        return await verify(None)  # the draft is the text checked, and rewritten where it fails

    answer = await synthesize(phase_e_input, session, context, verify, sink)
    if run.draft and not outcome_of(answer.metadata).by_model:  # for want of the model's
        checked = await verification.draft_only(run, run.draft, settings)
        return publish.draft_instead(phase_e_input, answer, checked, _noted(context, run))
    return answer


#: How long past its run's deadline Phase E's checks and refinement may go on: less than the
#: grace a gateway waits past the deadline (gateway.client.ANSWER_GRACE_S, 5 s), so the answer
#: published when they are cut comes while the gateway still waits for it.
CHECKS_PAST_DEADLINE_S = 2.0
#: The note an answer whose checks and refinement were cut at the deadline carries.
CHECKS_CUT_NOTE = (
    "phase E: the answer's checks and refinement were cut at the run's deadline; the model's "
    "answer is published unchecked"
)


async def _checked_by_deadline(
    checking: Awaitable[verification.Verified], event: LoopExited, run: RunState
) -> verification.Verified | None:
    """The model's answer checked (and refined), or None, with a note on the run, when that
    is not done by the run's deadline (and CHECKS_PAST_DEADLINE_S): then the candidate in
    hand, the model's answer, is published unchecked. Checks had no bound of their own: 100
    slow rule patterns a run kept eight runs' answers 32 to 134 s past a 300 s deadline
    (issue 41)."""
    left = (event.deadline - utcnow()).total_seconds() + CHECKS_PAST_DEADLINE_S
    try:
        return await asyncio.wait_for(checking, max(left, 0.0))
    except TimeoutError:
        run.notes.append(CHECKS_CUT_NOTE)
        return None


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
    if run is not None and fail_rules(run.rules):
        return False
    reason = publish.answer_reason_of(phase_e_input, has_draft=run is not None and run.has_draft)
    return reason is AnswerReason.CONVERGED


def _noted(context: publish.ExitContext, run: RunState) -> publish.ExitContext:
    """The context with the run's notes as they are now (checking the answer may add some)."""
    return dataclasses.replace(context, notes=tuple(run.notes))


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
        execution_results=upstream.step_results(run.plan),
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
    context = publish.exit_context(event, usage)
    cid = event.correlation_id
    without = exits.answer_without_model(event, await deps.cancels.cancelled(cid))
    if without is not None:
        answer = publish.degraded_answer(phase_e_input, without, context)
        if without is AnswerReason.DEADLINE_EXCEEDED and event.run and event.run.draft:
            # No model call may start, but one was made in time: the reader gets it.
            checked = await verification.draft_only(event.run, event.run.draft, deps.settings)
            answer = publish.draft_instead(phase_e_input, answer, checked, context)
    else:
        session = deps.session(cid, usage, event.deadline, files, turns)
        stream = deps.answer_stream(cid)
        work = answer_run(event, phase_e_input, session, context, deps.settings, stream)
        done = await unless_stopped(deps.cancels, cid, work)
        if isinstance(done, Stopped):
            reason = exits.synthesis_stopped(done.error)
            answer = publish.degraded_answer(phase_e_input, reason, context, done.error)
        else:
            answer = done
    return [publish.answer_event(event, phase_e_input, answer, usage)]


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

    `reason` is the bus's account of why it gave up; it goes into the outcome's `error`. `passes`
    are the run's pass records if they were read (its outputs then are in its plan). The event
    id is the one `handle` would have used, so the run still gets only one FinalAnswer.
    """
    try:
        phase_e_input = build_phase_e_input(event, passes)
    except Exception:  # the last resort must answer even for a corrupt run
        phase_e_input = build_phase_e_input(event.model_copy(update={"run": None}))
    usage = event.run.usage.model_copy() if event.run else Usage()
    answer = publish.degraded_answer(
        phase_e_input, AnswerReason.PHASE_E_FAILED, publish.exit_context(event, usage), reason
    )
    return publish.answer_event(event, phase_e_input, answer, usage)


def _request_lost(phase_e_input: PhaseEInput) -> bool:
    return not phase_e_input.request.strip() or phase_e_input.request == LOST_REQUEST


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return model.model_dump(mode="json") if model is not None else None
