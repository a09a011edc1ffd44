"""Phase D: when the profile is revised, how TTL is rescaled, and spending TTL per pass."""

from __future__ import annotations

import pytest

from aeonloop.llm.base import LLMError
from aeonloop.phases import phase_d
from aeonloop.phases.events import LoopExited, PassCompleted, PassRequested, RunState
from aeonloop.phases.models import (
    ExecutionPass,
    SemanticValidationReport,
    TaskProfile,
    ValidationIssue,
)
from aeonloop.prompts.registry import PromptId

UPDATE = PromptId.TASKPROFILE_UPDATE_USER


def record(*severities: str, blocked: tuple[str, ...] = (), converged: bool = False):
    issues = [ValidationIssue(severity=s, description=f"{s} issue") for s in severities]
    return ExecutionPass(
        pass_number=1,
        executed_step_ids=["s1"],
        blocked_step_ids=list(blocked),
        validation=SemanticValidationReport(issues=issues),
        converged=converged,
    )


def completed(make_plan_ready, last: ExecutionPass, ttl: int = 4, max_ttl: int = 10):
    ready = make_plan_ready("a", ttl=ttl)
    run: RunState = ready.run.model_copy(update={"max_ttl": max_ttl})
    run.add_pass(last)
    return ready.child(PassCompleted, run=run, execution_pass=last)


# ---- the pure rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttl", "old", "new", "expected"),
    [
        (5, 3, 3, 5),  # no change in depth
        (5, 3, 5, 7),  # up Δ=2: 5 × 1.4 = 7
        (3, 3, 4, 3),  # up Δ=1: 3 × 1.2 = 3.6 → 3
        (5, 3, 4, 6),  # up Δ=1: 5 × 1.2 = 6
        (4, 3, 2, 3),  # down Δ=-1: 4 × 0.85 = 3.4 → 3
        (10, 5, 3, 7),  # down Δ=-2: 10 × 0.7 = 7
        (2, 5, 1, 0),  # down Δ=-4: 2 × 0.4 = 0.8 → 0, out of TTL
    ],
)
def test_rescale_ttl(ttl: int, old: int, new: int, expected: int) -> None:
    assert phase_d.rescale_ttl(ttl, old, new, ceiling=100) == expected


def test_rescale_never_exceeds_the_ceiling() -> None:
    assert phase_d.rescale_ttl(5, 1, 5, ceiling=6) == 6  # 5 × 1.8 = 9, capped


def test_ceiling_is_what_is_left_of_the_request_cap() -> None:
    run = RunState(request="r", max_ttl=10, passes=[ExecutionPass(pass_number=n) for n in (1, 2)])
    assert phase_d.ttl_ceiling(run) == 9  # passes 2..10 may still run, the current one included


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        (record(), False),
        (record("low", "low"), False),
        (record("medium"), True),
        (record("high"), True),
        (record(blocked=("s1",)), True),
        (record("high", converged=True), False),
    ],
)
def test_misjudged(last: ExecutionPass, expected: bool) -> None:
    assert phase_d.misjudged(last) is expected


# ---- the handler --------------------------------------------------------------------------------


async def test_a_pass_costs_one_ttl_unit(harness, make_plan_ready) -> None:
    h = harness({})
    (out,) = await phase_d.handle(completed(make_plan_ready, record("low"), ttl=4), h.deps)
    assert isinstance(out, PassRequested)
    assert out.run.ttl_remaining == 3 and h.llm.calls == []


async def test_last_unit_spent_exits_ttl_exhausted(harness, make_plan_ready) -> None:
    h = harness({})
    (out,) = await phase_d.handle(completed(make_plan_ready, record(), ttl=1), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "ttl_exhausted"
    assert out.run.ttl_remaining == 0


@pytest.mark.parametrize(
    ("last", "ttl", "due"),
    [
        (record("high"), 4, True),
        (record(blocked=("s1",)), 2, True),
        (record("low"), 4, False),  # the evidence does not ask for it
        (record("high"), 1, False),  # no update could give the run another pass
    ],
)
def test_reprofile_due(make_plan_ready, last: ExecutionPass, ttl: int, due: bool) -> None:
    run = completed(make_plan_ready, last, ttl=ttl).run
    assert phase_d.reprofile_due(run, last) is due


async def test_the_update_is_left_to_the_next_pass(harness, make_plan_ready) -> None:
    """Issue 33: D calls no model; the next pass makes the update beside its steps."""
    h = harness({})
    (out,) = await phase_d.handle(completed(make_plan_ready, record("high"), ttl=4), h.deps)
    assert isinstance(out, PassRequested) and h.llm.calls == []
    assert "high issue" in out.run.reprofile_evidence
    assert out.run.ttl_remaining == 3 and out.run.profile.profile_version == 1


async def test_with_one_unit_left_no_update_is_asked(harness, make_plan_ready) -> None:
    h = harness({})
    (out,) = await phase_d.handle(completed(make_plan_ready, record("high"), ttl=1), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "ttl_exhausted"
    assert out.run.reprofile_evidence is None and h.llm.calls == []


def charged(make_plan_ready, ttl: int = 4, max_ttl: int = 10) -> RunState:
    """The run as the next pass gets it: D charged pass 1 from `ttl`."""
    run = completed(make_plan_ready, record("high"), ttl=ttl, max_ttl=max_ttl).run
    run.ttl_remaining -= 1
    return run


def deeper(depth: int) -> TaskProfile:
    return TaskProfile.default().model_copy(update={"reasoning_depth": depth, "profile_version": 2})


def test_deeper_profile_gets_more_ttl(make_plan_ready) -> None:
    run = charged(make_plan_ready, ttl=4)
    phase_d.apply_update(run, 1, deeper(5))
    assert (run.profile.reasoning_depth, run.profile.profile_version) == (5, 2)
    assert run.ttl_remaining == 4  # 4 × 1.4 = 5.6 → 5, then one unit for pass 1
    assert "depth 3 → 5" in run.notes[-1] and "beside pass 2" in run.notes[-1]


def test_deeper_profile_stays_within_the_request_cap(make_plan_ready) -> None:
    run = charged(make_plan_ready, ttl=4, max_ttl=4)
    phase_d.apply_update(run, 1, deeper(5))
    assert run.ttl_remaining == 3  # ceiling 4 - 1 + 1 = 4, then one unit for pass 1


def test_shallower_profile_gets_less_ttl(make_plan_ready) -> None:
    run = charged(make_plan_ready, ttl=4)
    phase_d.apply_update(run, 1, deeper(1))
    assert run.profile.profile_version == 2
    assert run.ttl_remaining == 1  # 4 × 0.7 = 2.8 → 2, then one unit for pass 1


def test_update_failure_keeps_the_profile(make_plan_ready) -> None:
    run = charged(make_plan_ready, ttl=4)
    phase_d.apply_update(run, 1, LLMError("rate limited"))
    assert run.profile == TaskProfile.default() and run.ttl_remaining == 3
    assert "rate limited" in run.notes[-1] and "kept" in run.notes[-1]


async def test_same_event_twice_makes_no_call_and_the_same_event(
    harness, delivered, make_plan_ready
) -> None:
    h = harness({})
    event = completed(make_plan_ready, record(blocked=("s1",)), ttl=4)
    (first,) = await phase_d.handle(delivered(event), h.deps)
    (second,) = await phase_d.handle(delivered(event), h.deps)
    assert h.llm.calls == []
    assert first.event_id == second.event_id
    assert first.run.model_dump(exclude={"usage"}) == second.run.model_dump(exclude={"usage"})


async def test_no_pass_is_a_failed_exit(harness, make_plan_ready) -> None:
    ready = make_plan_ready("a")
    (out,) = await phase_d.handle(ready.child(PassCompleted, run=ready.run), harness({}).deps)
    assert isinstance(out, LoopExited) and out.reason == "failed"


async def test_an_event_with_its_passes_inline_is_judged_by_its_last(
    harness, make_plan_ready
) -> None:
    """A PassCompleted from a version that sent passes inline carries no `execution_pass`:
    its run's last pass is the one judged, refinement plan and all."""
    ready = make_plan_ready("a", ttl=4)
    body = ready.run.model_dump(mode="json") | {
        "passes": [{"pass_number": 1, "refinement": {"plan": {"goal": "g"}, "applied": []}}]
    }
    run = RunState.model_validate(body)
    (out,) = await phase_d.handle(ready.child(PassCompleted, run=run), harness({}).deps)
    assert isinstance(out, PassRequested) and out.run.ttl_remaining == 3


# ---- the whole loop, A to exit ------------------------------------------------------------------


async def test_ttl_exhausted_path(harness, replies, make_request, drive) -> None:
    refinements = [replies.refinement(replies.add(f"x{n}", f"more {n}")) for n in range(5)]
    script = {
        # 1 · 1.5 · 0.7 · 1 · 1 · 1 · 2 = 2.1 → TTL 2
        PromptId.TASKPROFILE_INFERENCE_USER: replies.profile(depth=1, info=0.7),
        PromptId.PLAN_GENERATION_USER: replies.plan("one", "two"),
        PromptId.VALIDATION_SEMANTIC_USER: replies.validation(),
        PromptId.REASONING_STEP_USER: replies.step_output,
        PromptId.PASS_EVALUATION_USER: [replies.weak(0.5), replies.weak(0.9)],
        PromptId.RECURSIVE_REFINEMENT_USER: refinements,
    }
    h = harness(script)
    trail = await drive(make_request(), h.deps)
    names = [type(e).__name__ for e in trail]
    assert names == [
        "TaskProfiled",
        "PlanReady",
        "PassCompleted",
        "PassRequested",
        "PassCompleted",
        "LoopExited",
    ]
    done = trail[-1]
    assert done.reason == "ttl_exhausted"
    assert len(done.run.passes) == 2 and done.run.ttl_remaining == 0
    assert done.run.total_refinements == 2
    assert done.correlation_id == trail[0].correlation_id


def test_steps_that_failed_for_transport_reasons_are_no_evidence() -> None:
    """An LLM outage, a cut reply or a refusal says nothing about how hard the task is."""
    last = record("low")
    last.failed_steps = {"s2": "the LLM call failed (LLMError: HTTP 503)"}
    assert phase_d.misjudged(last) is False
    assert phase_d.misjudged(record("low", blocked=("s2",))) is True
