"""How a run ends (phases.exits): each decision that ends the loop, the one LoopExited
constructor, and what the answer then is. Pure functions, so no LLM and no Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest

from aeonloop.bus.deadletter import DeadLetter
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMError
from aeonloop.llm.session import LLMOutputError
from aeonloop.phases import exits
from aeonloop.phases.events import (
    LoopExited,
    PassCompleted,
    PlanReady,
    RequestSubmitted,
    RunState,
    derived_id,
    utcnow,
)
from aeonloop.phases.models import (
    AnswerReason,
    Evaluation,
    ExecutionPass,
    ExitReason,
    Plan,
    PlanStep,
    Rule,
    RuleCheck,
    RuleResult,
)
from aeonloop.prompts.errors import PromptNotFoundError
from aeonloop.prompts.registry import PromptId

SETTINGS = LoopSettings(max_passes=3, stagnation_epsilon=0.02)


def a_run(*scores: float, rules: list[Rule] | None = None) -> RunState:
    run = RunState(request="Explain tides", rules=rules or [], plan=Plan(goal="g", steps=[]))
    run.scores, run.pass_count = list(scores), len(scores)
    return run


def a_pass(number: int, score: float = 0.5, converged: bool = False, **fields) -> ExecutionPass:
    return ExecutionPass(pass_number=number, score=score, converged=converged, **fields)


# ---- phase C ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.5, 0.51], False),  # needs two moves
        ([0.5, 0.51, 0.52], True),
        ([0.5, 0.51, 0.6], False),
        ([0.3, 0.5, 0.51], False),
        ([0.1, 0.9, 0.9, 0.9], True),
        ([0.5, 0.52, 0.54], False),  # exactly epsilon is movement
    ],
)
def test_stagnated(scores: list[float], expected: bool) -> None:
    assert exits.stagnated(scores, 0.02) is expected


def test_after_a_pass_convergence_comes_first_then_stagnation_then_the_pass_limit() -> None:
    flat = a_run(0.5, 0.5)
    assert exits.after_pass(flat, a_pass(3, 0.5, converged=True), SETTINGS).reason == "converged"
    assert exits.after_pass(flat, a_pass(3, 0.5), SETTINGS).reason == "stagnated"
    climbing = a_run(0.1, 0.5)
    assert exits.after_pass(climbing, a_pass(3, 0.9), SETTINGS).reason == "max_passes"
    assert exits.after_pass(a_run(0.1), a_pass(2, 0.5), SETTINGS) is None


def test_each_exit_after_a_pass_says_what_ended_it() -> None:
    stagnated = exits.after_pass(a_run(0.5, 0.5), a_pass(3, 0.5), SETTINGS)
    assert stagnated.detail == (
        "the score moved less than 0.02 on two passes in a row (last scores: 0.5, 0.5, 0.5)"
    )
    last = exits.after_pass(a_run(0.1, 0.5), a_pass(3, 0.9), SETTINGS)
    assert last.detail == "pass 3 did not converge and was the last of 3 allowed"
    rubric = exits.after_pass(a_run(), a_pass(1, 0.97, converged=True), SETTINGS)
    assert rubric.detail == "pass 1 converged: the default rubric is met (score 0.97)"


def test_a_pass_converged_by_rules_says_so() -> None:
    rule = Rule(id="r", check=RuleCheck(type="content", search="x"))
    judged = Evaluation(score=1.0, passed=True, rule_results=[RuleResult(id="r", verdict="pass")])
    record = a_pass(1, 1.0, converged=True, evaluation=judged)
    end = exits.after_pass(a_run(rules=[rule]), record, SETTINGS)
    assert end == exits.Exit(
        ExitReason.CONVERGED, "pass 1 converged: the rule evaluation passed (score 1.0)"
    )


def test_before_a_pass() -> None:
    assert exits.before_pass(a_run(), 3, SETTINGS) is None
    assert exits.before_pass(a_run(), 4, SETTINGS) == exits.Exit(
        ExitReason.MAX_PASSES, "pass 4 would exceed the limit of 3 passes"
    )
    planless = RunState(request="Explain tides")
    assert exits.before_pass(planless, 1, SETTINGS).reason == ExitReason.FAILED


def test_nothing_left_to_run_ends_the_loop_and_a_failed_refinement_says_failed() -> None:
    pending = Plan(goal="g", steps=[PlanStep(step_id="s1", description="d")])
    done = Plan(goal="g", steps=[PlanStep(step_id="s1", description="d", status="done")])
    assert exits.nothing_left(pending, 2, "refined") is None
    stagnated = exits.nothing_left(done, 2, "refinement applied 0 action(s)")
    assert stagnated.reason == ExitReason.STAGNATED
    assert "pass 2 did not converge and no step is left to execute" in stagnated.detail
    failed = exits.nothing_left(done, 2, "refinement failed", refinement_failed=True)
    assert failed.reason == ExitReason.FAILED


def test_an_evaluation_that_failed_is_a_failed_exit() -> None:
    end = exits.evaluation_failed(2, LLMError("503"))
    assert end == exits.Exit(ExitReason.FAILED, "evaluation of pass 2 failed: 503")


# ---- phases B and D, and the worker -----------------------------------------------------------


def test_no_plan_fails() -> None:
    assert exits.no_plan("no steps") == exits.Exit(ExitReason.FAILED, "no steps")


def test_at_the_pass_boundary() -> None:
    assert exits.at_pass_boundary(None).reason == ExitReason.FAILED
    assert exits.at_pass_boundary(a_pass(2, converged=True)).reason == ExitReason.CONVERGED
    assert exits.at_pass_boundary(a_pass(2)) is None
    assert exits.after_charge(1, a_pass(2)) is None
    assert exits.after_charge(0, a_pass(2)) == exits.Exit(
        ExitReason.TTL_EXHAUSTED, "no TTL left after pass 2 and the loop has not converged"
    )


def test_the_deadline_and_a_phase_that_gave_up() -> None:
    request = RequestSubmitted.new("Explain tides", timeout=60)
    assert exits.deadline_passed(request) is None
    late = request.created_at + timedelta(seconds=61)
    assert exits.deadline_passed(request, late).reason == ExitReason.DEADLINE_EXCEEDED
    assert exits.gave_up("phase-c", "boom") == exits.Exit(
        ExitReason.FAILED, "phase-c gave up: boom"
    )


# ---- the one constructor ----------------------------------------------------------------------


def test_an_exit_from_an_event_carries_its_run_and_a_deterministic_id() -> None:
    run = a_run(0.4)
    record = a_pass(1, 0.4)
    run.passes = [record]
    ready = PlanReady(correlation_id="cid", deadline=utcnow() + timedelta(hours=1), run=run)
    end = exits.Exit(ExitReason.STAGNATED, "flat")
    made = exits.loop_exited(ready, end)
    assert made.event_id == exits.loop_exited(ready, end).event_id  # the same hop, again
    assert (made.event_id, made.causation_id) == (
        derived_id(ready.event_id, "LoopExited"),
        ready.event_id,
    )
    assert (made.reason, made.detail, made.request) == ("stagnated", "flat", "Explain tides")
    assert made.run is run and made.execution_pass == record
    assert made.deadline == ready.deadline


def test_an_exit_from_a_request_starts_its_run() -> None:
    request = RequestSubmitted.new("Explain tides", timeout=60)
    made = exits.loop_exited(request, exits.Exit(ExitReason.DEADLINE_EXCEEDED, "late"))
    assert made.run is not None and made.run.request == "Explain tides"
    assert made.run.pass_count == 0 and made.execution_pass is None


def test_an_exit_from_an_event_without_a_run_keeps_what_it_has() -> None:
    completed = PassCompleted.model_construct(
        event_id="e1", correlation_id="cid", deadline=utcnow(), run=None
    )
    made = exits.loop_exited(completed, exits.gave_up("phase-d", "bad"))
    assert (made.run, made.request, made.correlation_id) == (None, "", "cid")


def _dead(cid: bytes) -> DeadLetter:
    fields = {b"type": b"Nope", b"cid": cid, b"body": b"{"}
    return DeadLetter("aeon:{s0}:passes", "phase-c", "1-0", fields, "not JSON", 1)


def test_an_exit_from_a_dead_entry_that_names_its_run() -> None:
    made = exits.loop_exited(_dead(b"cid-7"), exits.gave_up("phase-c", "not JSON"))
    assert isinstance(made, LoopExited)
    assert made.event_id == derived_id("aeon:{s0}:passes/1-0", "LoopExited")
    assert (made.correlation_id, made.reason, made.run) == ("cid-7", "failed", None)
    assert made.deadline > utcnow()
    with pytest.raises(ValueError, match="names no run"):
        exits.loop_exited(_dead(b""), exits.gave_up("phase-c", "not JSON"))


# ---- what the answer is -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "passes", "ttl", "missing", "expected"),
    [
        ("converged", 2, 3, (), AnswerReason.CONVERGED),
        (" Converged ", 2, 3, (), AnswerReason.CONVERGED),
        ("failed", 0, 0, (), AnswerReason.NO_PASSES),
        ("ttl_exhausted", 3, 0, ("semantic_validation",), AnswerReason.TTL_EXHAUSTED),
        ("max_passes", 3, 0, (), AnswerReason.TTL_EXHAUSTED),  # no TTL left is TTL spent
        ("stagnated", 3, 1, ("execution_results",), AnswerReason.INCOMPLETE_STATE),
        ("stagnated", 3, 1, (), AnswerReason.NOT_CONVERGED),
        ("converged", 1, 0, (), AnswerReason.CONVERGED),  # converged on its last pass
    ],
)
def test_answer_reason(
    status: str, passes: int, ttl: int, missing: tuple[str, ...], expected: AnswerReason
) -> None:
    assert exits.answer_reason(status, passes, ttl, missing) is expected


def test_ttl_is_spent_only_by_passes_that_ran() -> None:
    assert exits.ttl_spent("ttl_exhausted", 2, 0)
    assert exits.ttl_spent("stagnated", 2, 0)
    assert not exits.ttl_spent("failed", 0, 0)  # a lost run reports 0 left, and ran nothing
    assert not exits.ttl_spent("converged", 2, 0)


def test_why_the_host_wrote_the_answer() -> None:
    assert exits.synthesis_failure(LLMError("down")) is AnswerReason.LLM_ERROR
    assert (
        exits.synthesis_failure(LLMOutputError(PromptId.ANSWER_SYNTHESIS_USER, ValueError("x")))
        is AnswerReason.INVALID_LLM_OUTPUT
    )
    assert exits.synthesis_failure(PromptNotFoundError("X")) is AnswerReason.PROMPT_ERROR
    assert exits.synthesis_failure(RuntimeError("bug")) is AnswerReason.SYNTHESIS_ERROR


@pytest.mark.parametrize("loop_exit", list(ExitReason))
def test_a_cancelled_answer_is_answered_cancelled_whatever_the_loop_exit(
    loop_exit: ExitReason,
) -> None:
    """Issue 35: a cancel after the loop converged, before the answer was written, gave status
    `converged` beside reason `cancelled`. The status follows a cancelled answer."""
    assert exits.answered_status(loop_exit, AnswerReason.CANCELLED) is ExitReason.CANCELLED


@pytest.mark.parametrize("answered", [r for r in AnswerReason if r is not AnswerReason.CANCELLED])
def test_any_other_answer_keeps_the_loops_exit_as_its_status(answered: AnswerReason) -> None:
    for loop_exit in ExitReason:
        if (loop_exit, answered) == (ExitReason.FAILED, AnswerReason.CONVERGED):
            continue  # the draft path answered the run (below)
        assert exits.answered_status(loop_exit, answered) is loop_exit


def test_a_failed_loop_path_whose_draft_path_answered_is_converged() -> None:
    """Issue 41, finding 7: the status follows what the user got. A loop that could not be used
    (no plan) while the draft path's candidate holds every check is answered, not failed."""
    failed = ExitReason.FAILED
    assert exits.answered_status(failed, AnswerReason.CONVERGED) is ExitReason.CONVERGED
    assert exits.answer_reason("failed", 0, 0, [], has_draft=True) is AnswerReason.CONVERGED
    held_not = exits.answer_reason("failed", 0, 0, [], checks_failed=True, has_draft=True)
    assert held_not is AnswerReason.NO_PASSES
    assert exits.answer_reason("failed", 0, 0, [], has_draft=False) is AnswerReason.NO_PASSES
    assert exits.answer_reason("failed", 1, 0, [], has_draft=True) is not AnswerReason.CONVERGED


def test_no_model_call_for_a_late_exit() -> None:
    soon = utcnow() + timedelta(hours=1)
    on_time = LoopExited(correlation_id="c", deadline=soon, reason="stagnated")
    assert not exits.answer_too_late(on_time)
    assert exits.answer_too_late(on_time, soon)
    assert exits.answer_too_late(on_time.model_copy(update={"reason": "deadline_exceeded"}))


#: A LoopExited as an earlier version wrote it (reason a plain string, no execution_pass).
EARLIER_EXIT = (
    '{"event_id": "e1", "correlation_id": "c", "causation_id": "e0", '
    '"created_at": "2025-01-01T00:00:00Z", "deadline": "2025-01-01T01:00:00Z", '
    '"reason": "%s", "detail": "d", "request": "Explain tides", "run": null}'
)


@pytest.mark.parametrize(
    "value",
    ["converged", "ttl_exhausted", "stagnated", "max_passes", "deadline_exceeded", "failed"],
)
def test_an_exit_written_by_an_earlier_version_still_decodes(value: str) -> None:
    """The wire values are the strings every version wrote (docs/events.md)."""
    decoded = LoopExited.model_validate_json(EARLIER_EXIT % value)
    assert decoded.reason is ExitReason(value)
    assert decoded.model_dump(mode="json")["reason"] == value


def test_an_exit_reason_no_version_wrote_is_refused() -> None:
    with pytest.raises(ValueError, match="reason"):
        LoopExited.model_validate_json(EARLIER_EXIT % "gave_up")
