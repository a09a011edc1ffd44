"""How a run ends: every decision that ends the loop, and what its answer then is.

One model, decided here and nowhere else (docs/run-lifecycle.md, "How a run ends"):

- `ExitReason` (phases.models) is why the C-loop ended: `LoopExited.reason`, and the answer's
  `ExecutionResult.status`. The phases and the worker ask the functions below, which return an
  `Exit` (the reason, and a detail an operator can check) or None to go on, and make the event
  with `loop_exited`, the one constructor of a LoopExited.
- `AnswerReason` (phases.models) is what the answer is, `Outcome.reason`: derived from the
  exit, the data the run left and what Phase E could do with it (`answer_reason`,
  `synthesis_failure`).

Every function here is pure: it decides from what it is given and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from aeonloop.bus.codec import derived_id
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.exceptions import (
    BudgetExhausted,
    LLMError,
    LLMUnreachable,
    PromptError,
    ReplyError,
    RunCancelled,
    RunStopped,
)
from aeonloop.limits import LoopSettings
from aeonloop.phases import evaluation
from aeonloop.phases.events import Event, LoopExited, RequestSubmitted, RunState, utcnow
from aeonloop.phases.models import (
    AnswerReason,
    Evaluation,
    ExecutionPass,
    ExitReason,
    Plan,
    fail_rules,
)

#: How long Phase E has to answer a run known only by its correlation id (its deadline went
#: with the event that could not be read).
LOST_RUN_DEADLINE = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Exit:
    """A decision to end the loop: why, and the evidence in words."""

    reason: ExitReason
    detail: str


# ---------------------------------------------------------------------------------------------
# Phase A: the draft is enough.
# ---------------------------------------------------------------------------------------------

#: The deepest a profile may judge a request for its plain draft to be enough: 1 is "a fact or
#: a single lookup", 2 a little more; from 3 ("several connected steps") the loop's plan and
#: passes have something to add that one call does not.
DRAFT_MAX_DEPTH = 2


def draft_suffices(
    run: RunState, judged: Evaluation, *, tools_available: bool, simple: bool
) -> Exit | None:
    """The run ends at Phase A, its draft to be published, when the request needs no steps and
    nobody asked to see the plan first (docs/verified-answers.md, "Spend that follows need": the
    loop runs only where it has something to add). A draft that still fails a fail-severity
    check, the best of its samples and repaired by the host, is rewritten by Phase E (the draft
    path): on SmolLM2, the loop after a draft of a request that needs no steps held fewer rules
    than the draft path at six times its tokens (`aeon eval --effort low,medium,high`, the
    first 20 cases: docs/benchmarks.md).

    A simple ask (`simple`: no tools, no files, one short ask, phases.spend.simple_ask) needs no
    steps: no profile was asked for it. Any other request needs steps unless the model's profile,
    with its reasons, says it does not: depth at most DRAFT_MAX_DEPTH, and no tool use where the
    run has tools. A profile that could not be had (the default stands in) or that gives no
    reasons for its ratings says nothing of this request: SmolLM2's profiles of "What is the
    capital of France?" came back so, rated depth 3 in two runs of three (the format's example's
    depth), and each of those went on to a plan it could not make (issue 33).

    At the default effort a request with checks (at least one fail-severity check) and nothing
    to use but its own words (no tools, no files) ends here too, whatever its draft holds: the
    draft path (the best of the samples, the host's repairs, Phase E's rewrite) is what the
    loop would add to, at a fraction of its tokens. On SmolLM2 the loop after a draft of a
    request of several parts held 14 rules of the 11 such cases where best of 8 plain samples
    held 15, at 7.9 times their tokens; the one loop run of the 40 cases whose plan worked
    (`closing`) held what best of 8 held at 18,694 tokens, more than half of best of 8's for
    all 40 (docs/benchmarks.md). So at medium the loop runs where the draft cannot do the work
    (tools or files to use), or where nothing checks the draft and the profile asks for depth;
    effort high runs it for every request.

    The run's effort (limits.Effort) comes first: `low` ends every run here (the draft path
    only, whatever the request: Phase E rewrites a draft that fails a check once), `high` none
    (the loop runs even for a simple ask)."""
    profile = run.profile
    if profile is None or run.approve_plan:
        return None
    if run.effort == "low":  # the draft path only, whatever its checks say
        detail = f"effort low, the draft path only: the plain draft {_held(run, judged)}"
        return Exit(ExitReason.CONVERGED, detail)
    if run.effort == "high":
        return None
    if simple:
        asks = "the request is one short ask, with no tools or files to use"
    elif _profile_asks_no_more(run, tools_available):
        asks = (
            f"the profile asks for no more (reasoning depth {profile.reasoning_depth}, tool "
            f"use {profile.expected_tool_usage})"
        )
    elif not tools_available and not run.file_paths and fail_rules(run.rules):
        asks = "the request has checks to hold its draft to and nothing to use but its words"
    else:
        return None
    then = "; Phase E rewrites it for the checks it fails" if judged.failed else ""
    return Exit(ExitReason.CONVERGED, f"the plain draft {_held(run, judged)}, and {asks}{then}")


def _held(run: RunState, judged: Evaluation) -> str:
    """What the draft held, in words."""
    checks = len(fail_rules(run.rules))
    if not checks:
        return "had no check to fail"
    if judged.failed:
        return f"held {checks - len(judged.failed)} of {checks} fail-severity check(s)"
    return f"held all {checks} fail-severity check(s)"


def _profile_asks_no_more(run: RunState, tools_available: bool) -> bool:
    """The model's profile, with its reasons, rates the request within one call's reach."""
    profile = run.profile
    if profile is None or run.profile_is_default or not profile.raw_inference.strip():
        return False
    if tools_available and profile.expected_tool_usage != "none":
        return False
    return profile.reasoning_depth <= DRAFT_MAX_DEPTH


# ---------------------------------------------------------------------------------------------
# Phase B: no plan, nothing to run.
# ---------------------------------------------------------------------------------------------


def no_plan(why: str) -> Exit:
    """Plan generation gave nothing to execute: the loop ends before its first pass."""
    return Exit(ExitReason.FAILED, why)


# ---------------------------------------------------------------------------------------------
# Phase C: before a pass, after it, and after its refinement.
# ---------------------------------------------------------------------------------------------


def before_pass(run: RunState, number: int, settings: LoopSettings) -> Exit | None:
    """A pass that must not run: one past AEON_MAX_PASSES, or one with no plan to execute."""
    if number > settings.max_passes:
        detail = f"pass {number} would exceed the limit of {settings.max_passes} passes"
        return Exit(ExitReason.MAX_PASSES, detail)
    if run.plan is None:
        return Exit(ExitReason.FAILED, "phase C got a run without a plan")
    return None


def evaluation_failed(number: int, error: Exception) -> Exit:
    """The pass could not be judged (the LLM gave up, or its reply stayed unusable)."""
    return Exit(ExitReason.FAILED, f"evaluation of pass {number} failed: {error}")


def after_pass(run: RunState, record: ExecutionPass, settings: LoopSettings) -> Exit | None:
    """Why the loop ends after this judged pass, or None to refine and go on (whether TTL is
    left is Phase D's call). `run` holds the passes before this one."""
    number = record.pass_number
    if record.converged:
        basis = (
            "the rule evaluation passed"
            if evaluation.judged(run.rules, record.evaluation)
            else "the default rubric is met"
        )
        detail = f"pass {number} converged: {basis} (score {record.score})"
        return Exit(ExitReason.CONVERGED, detail)
    scores = [*run.scores, record.score]
    if stagnated(scores, settings.stagnation_epsilon):
        last = ", ".join(str(score) for score in scores[-3:])
        return Exit(
            ExitReason.STAGNATED,
            f"the score moved less than {settings.stagnation_epsilon} on two passes in a row "
            f"(last scores: {last})",
        )
    if number >= settings.max_passes:
        detail = f"pass {number} did not converge and was the last of {settings.max_passes} allowed"
        return Exit(ExitReason.MAX_PASSES, detail)
    return None


def stagnated(scores: Sequence[float], epsilon: float) -> bool:
    """The score moved less than `epsilon` on each of the last two passes (needs three scores)."""
    if len(scores) < 3:
        return False
    a, b, c = scores[-3:]
    return abs(c - b) < epsilon and abs(b - a) < epsilon


def nothing_left(
    plan: Plan, number: int, why: str, *, refinement_failed: bool = False
) -> Exit | None:
    """An exit when no step is pending after the pass's refinement: the next pass would only
    re-judge the same outputs; `failed` when the refinement call itself failed."""
    if plan.pending():
        return None
    reason = ExitReason.FAILED if refinement_failed else ExitReason.STAGNATED
    return Exit(
        reason,
        f"pass {number} did not converge and no step is left to execute ({why}); "
        "another pass would only re-judge the same outputs",
    )


# ---------------------------------------------------------------------------------------------
# Phase D: the pass boundary.
# ---------------------------------------------------------------------------------------------


def at_pass_boundary(last: ExecutionPass | None) -> Exit | None:
    """A PassCompleted that cannot go on: no pass to judge, or one that converged (C exits on
    convergence itself; this keeps a stray event ending well)."""
    if last is None:
        return Exit(ExitReason.FAILED, "phase D got a run with no pass")
    if last.converged:
        return Exit(ExitReason.CONVERGED, f"pass {last.pass_number} converged")
    return None


def after_charge(ttl_remaining: int, last: ExecutionPass) -> Exit | None:
    """Phase D has charged the pass just run: no TTL left ends the loop."""
    if ttl_remaining > 0:
        return None
    detail = f"no TTL left after pass {last.pass_number} and the loop has not converged"
    return Exit(ExitReason.TTL_EXHAUSTED, detail)


# ---------------------------------------------------------------------------------------------
# Any phase A–D (the worker): the deadline, and a phase that gave up.
# ---------------------------------------------------------------------------------------------


def deadline_passed(event: Event, now: datetime | None = None) -> Exit | None:
    """The request's deadline passed: the run goes to Phase E without another LLM call."""
    if not event.expired(now):
        return None
    return Exit(ExitReason.DEADLINE_EXCEEDED, "the request's deadline passed")


def llm_away(error: LLMUnreachable) -> Exit:
    """The deadline came while the LLM server could not be reached (llm.outage): the run's time
    ran out, which is no failure of the run, so it ends as the deadline does."""
    return Exit(ExitReason.DEADLINE_EXCEEDED, str(error))


def cancelled(correlation_id: str) -> Exit:
    """Someone cancelled the run: it ends at this hop, without another LLM call."""
    return Exit(ExitReason.CANCELLED, f"a cancel of run {correlation_id} was requested")


def stopped(error: RunStopped) -> Exit:
    """A hop that could start no further LLM call (llm.session): the run was cancelled, or
    its token budget cannot pay for the call it needed next."""
    if isinstance(error, BudgetExhausted):
        return Exit(ExitReason.BUDGET_EXHAUSTED, str(error))
    if isinstance(error, RunCancelled):
        return cancelled(error.correlation_id)
    raise TypeError(f"no exit for {type(error).__name__}")  # a new RunStopped must be named here


def interrupted(error: LLMUnreachable | RunStopped) -> Exit:
    """A hop whose work was stopped before its end (phases.cancels.unless_stopped)."""
    return llm_away(error) if isinstance(error, LLMUnreachable) else stopped(error)


def gave_up(group: str, why: str) -> Exit:
    """The bus gave up on one of the run's events (retries spent, or an entry it cannot read)."""
    return Exit(ExitReason.FAILED, f"{group} gave up: {why}")


# ---------------------------------------------------------------------------------------------
# The event.
# ---------------------------------------------------------------------------------------------


def loop_exited(cause: Event | DeadLetter, end: Exit, run: RunState | None = None) -> LoopExited:
    """The one way a LoopExited is made: from the event whose handling ended the loop, or from
    a dead letter that is no event at all but names its run.

    From an event: the run it carries as its handler left it (a request's run has not started),
    or `run` when the hop knows better (a hop abandoned midway ends the run as it was given
    it), the record of its newest pass when the hop has it in hand (Phase C, which just ran
    it), and a deterministic id (phases.events). From a dead letter: only the run's correlation
    id is known; the id derives from the entry's place, so the same dead entry always makes
    the same exit.
    """
    if isinstance(cause, Event):
        if run is None:
            run = cause.initial_state() if isinstance(cause, RequestSubmitted) else _run_of(cause)
        return cause.child(
            LoopExited,
            reason=end.reason,
            detail=end.detail,
            request=run.request if run else "",
            run=run,
            execution_pass=run.last_pass if run else None,
        )
    if not cause.correlation_id:
        raise ValueError(f"dead letter {cause.entry_id} names no run to end")
    return LoopExited(
        event_id=derived_id(f"{cause.stream}/{cause.entry_id}", LoopExited.__name__),
        correlation_id=cause.correlation_id,
        deadline=utcnow() + LOST_RUN_DEADLINE,
        reason=end.reason,
        detail=end.detail,
    )


def _run_of(event: Event) -> RunState | None:
    run = getattr(event, "run", None)
    return run if isinstance(run, RunState) else None


# ---------------------------------------------------------------------------------------------
# Phase E: what the answer is.
# ---------------------------------------------------------------------------------------------


def answer_too_late(event: LoopExited, now: datetime | None = None) -> bool:
    """No model call for this exit: the deadline passed, before the loop ended or since."""
    return event.reason == ExitReason.DEADLINE_EXCEEDED or event.expired(now)


def answer_without_model(
    event: LoopExited, cancelled: bool, now: datetime | None = None
) -> AnswerReason | None:
    """Why Phase E must answer without the model, or None to synthesise: the deadline passed,
    or the run was cancelled (by its exit, or since: `cancelled`)."""
    if answer_too_late(event, now):
        return AnswerReason.DEADLINE_EXCEEDED
    if cancelled or event.reason == ExitReason.CANCELLED:
        return AnswerReason.CANCELLED
    return None


def synthesis_stopped(error: LLMUnreachable | RunStopped) -> AnswerReason:
    """Why Phase E answered without the model when its synthesis was stopped (phases.cancels.
    unless_stopped): the deadline came while the LLM server was away, the budget cannot pay
    for the call, or the run was cancelled."""
    if isinstance(error, LLMUnreachable):
        return AnswerReason.DEADLINE_EXCEEDED
    if isinstance(error, BudgetExhausted):
        return AnswerReason.BUDGET_EXHAUSTED
    return AnswerReason.CANCELLED


def answered_status(loop_exit: ExitReason, answered: str) -> ExitReason:
    """The answer's `ExecutionResult.status`, given why the loop ended and what the answer is
    (its `Outcome.reason`): the loop's exit, except for a run cancelled after the loop
    ended but before its answer was written, which is answered `cancelled` as any cancelled
    run is, so its status and its reason never disagree; and a run whose loop path failed
    but whose draft path answered it (`draft_path_answered`: the reason is CONVERGED), which
    is `converged`, not `failed`: the status follows what the user got."""
    if answered == AnswerReason.CANCELLED:
        return ExitReason.CANCELLED
    if answered == AnswerReason.CONVERGED and loop_exit is ExitReason.FAILED:
        return ExitReason.CONVERGED
    return loop_exit


def converged(status: str) -> bool:
    """Whether an exit reason, as PhaseEInput carries it (a string, FR-037), is convergence."""
    return status.strip().lower() == ExitReason.CONVERGED


def ttl_spent(status: str, total_passes: int, ttl_remaining: int) -> bool:
    """Whether the run used its whole pass budget without converging. TTL counts passes, so a
    run that ran none cannot have spent it (a lost run reports 0 left)."""
    if status == ExitReason.TTL_EXHAUSTED:
        return True
    return ttl_remaining == 0 and total_passes > 0 and not converged(status)


def answered_by_draft(status: str, total_passes: int, has_draft: bool) -> bool:
    """Whether the run ended at Phase A on its draft (`draft_suffices`): converged before any
    pass, which nothing else can do. Phase E then publishes the draft without synthesis."""
    return has_draft and total_passes == 0 and converged(status)


def loop_path_unused(status: str, total_passes: int, has_draft: bool) -> bool:
    """Whether the run's loop path ended before its first pass for want of what it needed (no
    plan could be made: `no_plan`), with the draft path's candidate in hand: the loop path is
    not used, and the draft path answers the run."""
    return has_draft and total_passes == 0 and status.strip().lower() == ExitReason.FAILED


def draft_path_answered(
    status: str, total_passes: int, has_draft: bool, checks_failed: bool
) -> bool:
    """Whether the run is answered, not failed, by its draft path: it ended at Phase A on its
    draft (`answered_by_draft`), or its loop path could not be used (`loop_path_unused`) and
    the draft path's candidate, which the model wrote, holds every fail-severity check."""
    if answered_by_draft(status, total_passes, has_draft):
        return not checks_failed
    return loop_path_unused(status, total_passes, has_draft) and not checks_failed


def answer_reason(
    status: str,
    total_passes: int,
    ttl_remaining: int,
    missing: Sequence[str],
    *,
    checks_failed: bool = False,
    has_draft: bool = False,
) -> AnswerReason:
    """Why an answer the model wrote is degraded; CONVERGED when it is not. `checks_failed`:
    a fail-severity check does not hold on the answer as published; `has_draft`: the run has
    a draft, which a run that ended at Phase A publishes (`answered_by_draft`)."""
    if answered_by_draft(status, total_passes, has_draft):
        return AnswerReason.CHECKS_FAILED if checks_failed else AnswerReason.CONVERGED
    if draft_path_answered(status, total_passes, has_draft, checks_failed):
        return AnswerReason.CONVERGED  # the loop path could not be used; the draft path held
    if total_passes == 0:
        return AnswerReason.NO_PASSES
    if ttl_spent(status, total_passes, ttl_remaining):
        return AnswerReason.TTL_EXHAUSTED
    if missing:
        return AnswerReason.INCOMPLETE_STATE
    if not converged(status):
        return AnswerReason.NOT_CONVERGED
    if checks_failed:
        return AnswerReason.CHECKS_FAILED
    return AnswerReason.CONVERGED


def synthesis_failure(error: BaseException) -> AnswerReason:
    """Why the host wrote the answer, for an exception raised while synthesising it: by its
    branch of the exception tree (aeonloop.exceptions), anything else being a synthesis bug."""
    if isinstance(error, LLMError):
        return AnswerReason.LLM_ERROR
    if isinstance(error, ReplyError):
        return AnswerReason.INVALID_LLM_OUTPUT
    if isinstance(error, PromptError):
        return AnswerReason.PROMPT_ERROR
    return AnswerReason.SYNTHESIS_ERROR
