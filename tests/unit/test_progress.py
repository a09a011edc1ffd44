"""The lines `aeon ask` prints as a run goes (gateway.progress): Phase B's count is the plan as B
made it, a step a later refinement added is named in the line of the pass that added it, and
a run paused for its plan's approval has B's line before the question. And how a gateway relays
them as they come (`lines_until`: MCP's progress notifications, the chat stream's reasoning)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from aeonloop.gateway.progress import Progress, lines_until, progress_of
from aeonloop.phases import approvals
from aeonloop.phases.events import (
    LoopExited,
    PassCompleted,
    PlanAwaitingApproval,
    PlanReady,
    RunState,
    utcnow,
)
from aeonloop.phases.models import (
    ExecutionPass,
    ExitReason,
    Plan,
    PlanStep,
    RefinementAction,
    RefinementRecord,
    TaskProfile,
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


@pytest.mark.parametrize(
    ("reason", "lines"),
    [
        (
            ExitReason.CONVERGED,
            [
                "A  profiled: depth 1, pass budget 2; the draft is enough",
                "E  loop ended: converged (why); answering",
            ],
        ),
        (ExitReason.CANCELLED, ["E  loop ended: cancelled (why); answering"]),
    ],
)
def test_a_run_phase_a_ends_on_its_draft_says_a_profiled_it(
    reason: ExitReason, lines: list[str]
) -> None:
    """No TaskProfiled is sent for a run Phase A ends on its draft, so its exit says A's part;
    an exit at A for another reason (a cancel) says nothing of a draft."""
    run = RunState(request="Name Paris", profile=TaskProfile(reasoning_depth=1), ttl_remaining=2)
    assert _lines(_event(LoopExited, reason=reason, detail="why", run=run)) == lines


def test_a_paused_run_says_b_planned_then_that_its_plan_was_approved() -> None:
    run = RunState(request="Explain tides", plan=PLAN, approve_plan=True)
    paused = _event(PlanAwaitingApproval, run=run)
    assert _lines(paused) == [
        "B  planned: 2 steps, plan check applied 0 refinement action(s); awaiting approval"
    ]
    edited = Plan(goal="g", steps=[PlanStep(step_id="only", description="say it")])
    assert _lines(approvals.approved(paused, edited)) == ["B  plan approved: 1 steps; running it"]


async def test_lines_until_relays_each_line_then_those_queued_before_the_answer() -> None:
    lines: asyncio.Queue[Progress] = asyncio.Queue()
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    relayed: list[str] = []

    async def relay() -> None:
        async for progress in lines_until(lines, answer):
            relayed.append(progress.line)

    relaying = asyncio.ensure_future(relay())
    lines.put_nowait(Progress("c", "A", "A  profiled"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert relayed == ["A  profiled"]  # as it comes, not at the end
    # The answer and the last lines arrive together: the lines are not lost to the answer.
    lines.put_nowait(Progress("c", "C", "C  pass 1"))
    lines.put_nowait(Progress("c", "E", "E  loop ended"))
    answer.set_result("answered")
    await asyncio.wait_for(relaying, 5)
    assert relayed == ["A  profiled", "C  pass 1", "E  loop ended"]


async def test_lines_until_ends_with_its_caller_and_leaves_the_queue_whole() -> None:
    lines: asyncio.Queue[Progress] = asyncio.Queue()
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    relaying = asyncio.ensure_future(anext(lines_until(lines, answer)))
    await asyncio.sleep(0)
    relaying.cancel()
    with pytest.raises(asyncio.CancelledError):
        await relaying
    lines.put_nowait(Progress("c", "A", "A  profiled"))
    for _ in range(3):
        await asyncio.sleep(0)  # a wait for a line left behind would take it now
    assert lines.get_nowait().line == "A  profiled"
