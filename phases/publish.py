"""Phase E's last step, publish: the FinalAnswer and the run's outcome, each made in one place.

- `build_outcome` makes the run's `Outcome` (phases.outcome): why it stopped, what is
  published, why it is degraded, the checks with their verdicts, FR-028's raw artifacts.
- `final_answer` is the one builder of a FinalAnswer (FR-038's six fields), its metadata the
  outcome (`as_metadata`); `model_answer` (the model's answer, or the candidate the checks
  chose) and `draft_instead` (the draft, for want of the model's) publish through it.
- `degraded_answer` is the one builder of the host's answer, for when the model's cannot be
  had (FR-027/FR-028): why, how the run ended, then the available data.
- `answer_event` sends the ExecutionResult (FR-040), its status and degradation the outcome's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from aeonloop.contracts import Usage
from aeonloop.phases import exits, render, upstream, verification
from aeonloop.phases.events import ExecutionResult, FinalAnswerReady, LoopExited, utcnow
from aeonloop.phases.models import AnswerReason, ExitReason, FinalAnswer, PhaseEInput
from aeonloop.phases.outcome import (
    SUMMARY,
    CandidateTally,
    Outcome,
    as_metadata,
    outcome_of,
    published_label,
    verdicts,
)
from aeonloop.prompts.registry import FinalAnswerOutput

ERROR_CHARS = 500


@dataclass(frozen=True)
class ExitContext:
    """What the bus knows beyond PhaseEInput: why the loop exited, the phases' notes, and the
    run's token usage (None for Phase E as a library call, which reports none)."""

    detail: str = ""
    notes: tuple[str, ...] = ()
    usage: Usage | None = None


NO_CONTEXT = ExitContext()
#: What the host's account of a degraded answer (in its notes) says of the text published: the
#: plain draft, or the model's answer from what the run had.
DRAFT_CAVEAT = "The answer is the plain draft (one call)."
REFINED_DRAFT_CAVEAT = (
    "The answer is the plain draft (one call), rewritten where the checks failed."
)
DATA_CAVEAT = "The answer rests only on the data that was available and may be incomplete."


def answer_reason_of(
    p: PhaseEInput, *, has_draft: bool, checks_failed: bool = False
) -> AnswerReason:
    """The reason the answer is given (exits.answer_reason), from what Phase E was given."""
    return exits.answer_reason(
        p.convergence_status,
        p.total_passes,
        p.ttl_remaining,
        upstream.missing_fields(p),
        checks_failed=checks_failed,
        has_draft=has_draft,
    )


def ttl_flag(phase_e_input: PhaseEInput) -> bool | None:
    """FinalAnswer.ttl_exhausted: True when TTL was exhausted, None otherwise (FR-027)."""
    p = phase_e_input
    return True if exits.ttl_spent(p.convergence_status, p.total_passes, p.ttl_remaining) else None


def exit_context(event: LoopExited, usage: Usage | None = None) -> ExitContext:
    """The context of `event`'s answer; `usage`, the run's, is final once the answer is made
    (no call follows it), so the outcome records it then."""
    notes = tuple(event.run.notes) if event.run else ()
    return ExitContext(detail=event.detail, notes=notes, usage=usage)


def model_answer(
    phase_e_input: PhaseEInput,
    output: FinalAnswerOutput | None,
    context: ExitContext = NO_CONTEXT,
    checked: verification.Verified | None = None,
    has_draft: bool = False,
) -> FinalAnswer:
    """The model's answer with the host's part: the TTL flag, the outcome, and, when the run did
    not go well, the host's account of it in `notes` (FR-030, as docs/requirements.md reads it
    for an answer the model wrote): `answer_text` is the model's answer alone, so the text
    delivered is the text checked, and nothing the host says can break a check the request
    states (a word limit, a language).

    `checked`: the answer was checked (phases.verification): its text is the candidate chosen
    (the draft, the model's answer, or a refinement), the outcome says which and lists each
    check with its verdict on that text, and a fail-severity check that does not hold makes
    the answer degraded (`checks_failed`). `output` is None only for a run answered by its
    draft path (no pass ran), which had no synthesis."""
    p = phase_e_input
    checks_failed = checked is not None and checked.failed
    reason = answer_reason_of(p, has_draft=has_draft, checks_failed=checks_failed)
    outcome = build_outcome(phase_e_input, reason, context, checked=checked)
    text = checked.chosen.text if checked is not None else output.answer_text if output else ""
    account = None
    if reason is not AnswerReason.CONVERGED:
        caveat = _caveat(checked.chosen.source if checked is not None else "answer", output)
        account = f"{ending_text(phase_e_input, outcome)} {caveat}"
    # The model's own confidence and step ids are of the text it wrote (or refined); the draft
    # was written before any step, and judged by nobody.
    by_model = output is not None and (checked is None or checked.chosen.source != "draft")
    return final_answer(phase_e_input, text, outcome, output if by_model else None, account=account)


def final_answer(
    phase_e_input: PhaseEInput,
    text: str,
    outcome: Outcome,
    output: FinalAnswerOutput | None = None,
    used_step_ids: list[str] | None = None,
    account: str | None = None,
) -> FinalAnswer:
    """The one builder of a FinalAnswer (FR-038's six fields): the text to publish, the model's
    own confidence, step ids (those the run really has) and notes when `output` is the model's
    reply the text is from, the TTL flag, and the outcome as the metadata (`as_metadata`).
    `account`, the host's account of a run that did not go well, opens the notes."""
    if output is not None:
        known = upstream.known_step_ids(phase_e_input)
        used_step_ids = [i for i in output.used_step_ids or [] if i in known]
        if output.used_step_ids is None:
            used_step_ids = None
    notes = [part for part in (account, output.notes if output else None) if part]
    return FinalAnswer(
        answer_text=text,
        confidence=output.confidence if output is not None else None,
        used_step_ids=used_step_ids,
        notes="\n\n".join(notes) or None,
        ttl_exhausted=ttl_flag(phase_e_input),
        metadata=as_metadata(outcome),
    )


def _caveat(source: verification.Source, output: FinalAnswerOutput | None) -> str:
    """What the host's account says of the text published."""
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
    """The one builder of a host-made answer, for when the model's cannot be had: why, how the
    run ended, then the available data (its outcome publishes a `summary`).

    Upstream data is summarised, never invented (FR-028); the raw artifacts go to the outcome.
    Should even that fail on some unforeseen shape of data, the facts alone still come back.
    """
    errors = _error_text(error) if error is not None else None
    try:
        outcome = build_outcome(phase_e_input, reason, context, error=errors)
        opening = f"Unable to synthesize a complete answer. {ending_text(phase_e_input, outcome)}"
        results = phase_e_input.execution_results
        return final_answer(
            phase_e_input,
            f"{opening}\n\n{upstream.available_data(phase_e_input)}",
            outcome,
            used_step_ids=list(results) if isinstance(results, dict) and results else None,
        )
    except Exception as failure:  # the degraded path must not fail in turn
        p = phase_e_input
        outcome = Outcome(
            stopped=_stopped(p, reason),
            convergence_status=p.convergence_status,
            published=SUMMARY,
            degraded=True,
            reason=reason,
            error=_error_text(failure),
            missing_fields=list(upstream.missing_fields(p)),
            total_passes=p.total_passes,
            total_refinements=p.total_refinements,
            ttl_remaining=p.ttl_remaining,
            usage=context.usage,
        )
        text = (
            f"Unable to synthesize an answer ({reason.value}), and the run's data could not be "
            f"summarised ({_error_text(failure)}). Request: {p.request}"
        )
        return final_answer(p, text, outcome)


def draft_instead(
    phase_e_input: PhaseEInput,
    host_made: FinalAnswer,
    checked: verification.Verified,
    context: ExitContext = NO_CONTEXT,
) -> FinalAnswer:
    """The run's plain draft in place of a host-made answer (the model's could not be had): the
    reader gets one call's answer rather than a summary of the run's data, so the answer is
    never worse than one call. `answer_text` is the draft alone; the host's account is in the
    notes. Degraded for the host's reason, unless the draft path answered the run
    (exits.draft_path_answered: the loop path could not be used, and the draft holds every
    fail-severity check), which is answered, not failed."""
    host = outcome_of(host_made.metadata)
    p = phase_e_input
    reason = host.reason
    if exits.draft_path_answered(p.convergence_status, p.total_passes, True, checked.failed):
        reason = AnswerReason.CONVERGED
    outcome = build_outcome(phase_e_input, reason, context, error=host.error, checked=checked)
    account = f"{ending_text(phase_e_input, outcome)} {DRAFT_CAVEAT}"
    return final_answer(phase_e_input, checked.chosen.text, outcome, account=account)


def ending_text(phase_e_input: PhaseEInput, outcome: Outcome) -> str:
    """How the run ended and what failed, in the words every gateway shows them in (made from
    the same outcome, phases.render), then how many passes ran: an early exit said plainly
    (FR-030)."""
    lines = render.ending_lines(outcome)
    return render.as_sentences([*lines, _passes_ran(phase_e_input, outcome.reason)])


def build_outcome(
    phase_e_input: PhaseEInput,
    reason: AnswerReason,
    context: ExitContext = NO_CONTEXT,
    *,
    error: str | None = None,
    checked: verification.Verified | None = None,
) -> Outcome:
    """The one place a run's Outcome is made (phases.outcome): why it stopped, what is
    published (the candidate `checked` chose; else the model's answer, or the host's summary
    for a reason the host answers), why it is degraded, the checks with their verdicts, the
    rules that did not hold in the last pass, each upstream artifact present, and the run's
    usage (`context.usage`)."""
    p = phase_e_input
    chosen = checked.chosen if checked is not None else None
    outcome = Outcome(
        stopped=_stopped(p, reason),
        exit_detail=context.detail,
        convergence_status=p.convergence_status,
        published=published_label(reason, chosen.label if chosen else None),
        degraded=reason is not AnswerReason.CONVERGED,
        reason=reason,
        error=error,
        not_used=_not_used(p, reason, context),
        run_notes=list(context.notes),
        missing_fields=list(upstream.missing_fields(p)),
        answered_by=chosen.label if chosen else None,
        repairs=list(chosen.repairs) if chosen else [],
        checks=verdicts(checked.rules, chosen.evaluation) if checked and chosen else [],
        candidates=[
            CandidateTally(answered_by=c.label, held=c.held, repairs=list(c.repairs))
            for c in (checked.candidates if checked else ())
        ],
        checks_never_held=(
            verification.never_held(checked.rules, checked.candidates) if checked else []
        ),
        failed_rules=upstream.failed_rules(p),
        total_passes=p.total_passes,
        total_refinements=p.total_refinements,
        ttl_remaining=p.ttl_remaining,
        usage=context.usage,
        tool_calls=upstream.tool_calls(p),
        **{name: getattr(p, name) or None for name in upstream.ARTIFACT_FIELDS},
    )
    return outcome.model_copy(update={"degraded_because": render.degradations(outcome)})


def _not_used(phase_e_input: PhaseEInput, reason: AnswerReason, context: ExitContext) -> str | None:
    """The loop, when its path failed and the draft path answered the run instead
    (exits.answered_status makes such a run `converged`)."""
    failed = phase_e_input.convergence_status.strip().lower() == ExitReason.FAILED
    if not (failed and reason is AnswerReason.CONVERGED):
        return None
    return f"the loop (phases B to D): {context.detail or 'it failed'}"


def _stopped(phase_e_input: PhaseEInput, reason: AnswerReason) -> ExitReason:
    """Why the run stopped: the loop's exit as Phase E was given it (a string, FR-037; one no
    exit names is a failure), or `cancelled` for a run cancelled since (exits.answered_status)."""
    try:
        loop_exit = ExitReason(phase_e_input.convergence_status)
    except ValueError:
        loop_exit = ExitReason.FAILED
    return exits.answered_status(loop_exit, reason)


def answer_event(
    event: LoopExited, phase_e_input: PhaseEInput, answer: FinalAnswer, usage: Usage
) -> FinalAnswerReady:
    """The run's ExecutionResult (FR-040): its status and degradation are the answer's outcome's
    (which recorded the usage when it was made: `exit_context`)."""
    outcome = outcome_of(answer.metadata)
    result = ExecutionResult(
        status=outcome.stopped,
        degraded=outcome.degraded,
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


def _passes_ran(phase_e_input: PhaseEInput, reason: AnswerReason) -> str:
    """How many passes ran (nothing when the reason said none did)."""
    count = phase_e_input.total_passes
    if count == 0:
        return "" if reason is AnswerReason.NO_PASSES else "no execution pass ran"
    passes = f"{count} execution pass{'' if count == 1 else 'es'}"
    if exits.converged(phase_e_input.convergence_status):
        return f"the loop converged after {passes}"
    return f"{passes} ran"


def _error_text(error: BaseException | str) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return upstream.clipped(text, ERROR_CHARS)


def _elapsed_since(start: datetime) -> float:
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    return max(0.0, (utcnow() - start).total_seconds())
