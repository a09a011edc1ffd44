"""Issue 41, finding 8: against a slow server the runs API's event stream (and so the run page)
said nothing for minutes while calls ran. While nothing of a run comes, every WAITING_EVERY_S a
`waiting` event says what it waits for, with no SSE id (it marks no place to resume from); a
run paused for its plan's approval waits for a person, and gets none."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from aeonloop.gateway import progress
from aeonloop.gateway.http.run_feed import RunView, Watch, WatchedRun, WireStep, stream_steps
from aeonloop.phases.events import (
    LoopExited,
    PlanAwaitingApproval,
    PlanReady,
    RunState,
    TaskProfiled,
)
from aeonloop.phases.models import Plan, PlanStep, TaskProfile
from aeonloop.testing import DictRunRecords

DEADLINE = "2030-01-01T00:00:00Z"


class Feed:
    open_streams = 0

    def __init__(self) -> None:
        self.records = DictRunRecords()

    def _let_go(self, run: WatchedRun) -> None:
        pass


async def _read(watched: WatchedRun, seconds: float) -> list[WireStep]:
    sent: list[WireStep] = []

    async def read() -> None:
        async for step in stream_steps(Watch(Feed(), watched), None):
            sent.append(step)

    reader = asyncio.create_task(read())
    await asyncio.sleep(seconds)
    reader.cancel()
    return sent


@pytest.fixture(autouse=True)
def _every_tenth_of_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "WAITING_EVERY_S", 0.1)


async def test_a_silent_run_says_what_it_waits_for_and_stops_once_something_comes() -> None:
    watched = WatchedRun("c")
    run = RunState(request="q", profile=TaskProfile.default())
    profiled = TaskProfiled(correlation_id="c", deadline=DEADLINE, run=run)
    watched.offer(RunView(profiled, "1-0", None))
    sent: list[WireStep] = []

    async def read() -> None:
        async for step in stream_steps(Watch(Feed(), watched), None):
            sent.append(step)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.35)
    exited = LoopExited(correlation_id="c", deadline=DEADLINE, reason="converged", run=run)
    watched.offer(RunView(exited, "2-0", None))
    await asyncio.sleep(0.05)
    kinds_at_exit = len(sent)
    await asyncio.sleep(0.15)
    reader.cancel()

    waiting = [step for step in sent[:kinds_at_exit] if step.kind == "waiting"]
    assert sent[0].kind == "profile" and len(waiting) >= 2, [s.kind for s in sent]
    lines = [orjson.loads(step.data)["line"] for step in waiting]
    assert all(
        line.startswith("waiting for the model: the plan, or the answer (Phase B or E), ")
        for line in lines
    ), lines
    assert all(step.event_id == "" for step in waiting)  # no id: nothing to resume from
    # After the exit, what it waits for is the answer.
    after = [orjson.loads(s.data)["line"] for s in sent[kinds_at_exit:] if s.kind == "waiting"]
    assert sent[kinds_at_exit - 1].kind in ("exit", "waiting")
    assert all("the answer, and its checks (Phase E)" in line for line in after), after


async def test_a_run_paused_for_its_plans_approval_gets_no_waiting_line() -> None:
    step = PlanStep(step_id="s1", description="d")
    run = RunState(request="q", plan=Plan(goal="g", steps=[step]))
    paused = PlanAwaitingApproval(correlation_id="c", deadline=DEADLINE, run=run)
    watched = WatchedRun("c")
    watched.offer(RunView(paused, "1-0", None))
    sent = await _read(watched, 0.35)
    assert "awaiting_approval" in [s.kind for s in sent]
    assert not [s for s in sent if s.kind == "waiting"], [s.kind for s in sent]


async def test_a_run_silent_after_its_plan_says_it_waits_for_the_first_pass() -> None:
    """With several steps in, a reader going round its loop meets the steps it has sent again:
    only a step newer than any heard may count as something heard, or the waiting line after
    the plan (the first pass's calls, the longest silence of a run) never comes."""
    run = RunState(
        request="q",
        profile=TaskProfile.default(),
        plan=Plan(goal="g", steps=[PlanStep(step_id="s1", description="d")]),
    )
    planned = PlanReady(correlation_id="c", deadline=DEADLINE, run=run)
    watched = WatchedRun("c")
    watched.offer(RunView(planned, "1-0", None))
    sent = await _read(watched, 0.45)
    assert [s.kind for s in sent][:2] == ["profile", "plan"], [s.kind for s in sent]
    lines = [orjson.loads(s.data)["line"] for s in sent if s.kind == "waiting"]
    assert len(lines) >= 2, [s.kind for s in sent]
    assert all("the first pass's steps (Phase C)" in line for line in lines), lines
