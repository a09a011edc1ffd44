"""The lines `aeon ask` prints as a run goes (gateway.progress): Phase B's count is the plan as B
made it, a step a later refinement added is named in the line of the pass that added it, and
a run paused for its plan's approval has B's line before the question."""

from __future__ import annotations

from datetime import timedelta

from aeonloop.gateway.progress import progress_of
from aeonloop.phases import approvals
from aeonloop.phases.events import (
    PassCompleted,
    PlanAwaitingApproval,
    PlanReady,
    RunState,
    utcnow,
)
from aeonloop.phases.models import (
    ExecutionPass,
    Plan,
    PlanStep,
    RefinementAction,
    RefinementRecord,
)

PLAN = Plan(
    goal="explain tides",
    steps=[
        PlanStep(step_id="s1", description="say what pulls"),
        PlanStep(step_id="s2", description="say it simply"),
    ],
)


def _event(cls: type, **fields: object) -> object:
    return cls(correlation_id="c", deadline=utcnow() + timedelta(hours=1), **fields)


def _lines(event: object) -> list[str]:
    return [progress.line for progress in progress_of(event)]


def test_b_counts_the_steps_it_planned_and_a_pass_names_the_steps_its_refinement_added() -> None:
    run = RunState(request="Explain tides", plan=PLAN)
    assert _lines(_event(PlanReady, run=run)) == [
        "B  planned: 2 steps, plan check applied 0 refinement action(s)"
    ]
    added = PlanStep(step_id="s3", description="review it")
    record = ExecutionPass(
        pass_number=1,
        executed_step_ids=["s1", "s2"],
        refinement=RefinementRecord(
            applied=[
                RefinementAction(action_type="ADD", new_step=added),
                RefinementAction(
                    action_type="MODIFY",
                    target_step_id="s2",
                    new_step=PlanStep(step_id="s2", description="say it for a child"),
                ),
            ]
        ),
    )
    (line,) = _lines(_event(PassCompleted, run=run, execution_pass=record))
    assert line.endswith("2 step(s) run, 2 refinement action(s) applied (added s3)"), line


def test_a_paused_run_says_b_planned_then_that_its_plan_was_approved() -> None:
    run = RunState(request="Explain tides", plan=PLAN, approve_plan=True)
    paused = _event(PlanAwaitingApproval, run=run)
    assert _lines(paused) == [
        "B  planned: 2 steps, plan check applied 0 refinement action(s); awaiting approval"
    ]
    edited = Plan(goal="g", steps=[PlanStep(step_id="only", description="say it")])
    assert _lines(approvals.approved(paused, edited)) == ["B  plan approved: 1 steps; running it"]
