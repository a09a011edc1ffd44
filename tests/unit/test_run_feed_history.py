"""The run feed loads a run's history before working out its steps, and a newer state that
comes while it loads is loaded in turn: a pass's step is never skipped for want of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import orjson

from aeonloop.bus.route import RunRecord
from aeonloop.gateway.http.run_feed import RunView, Watch, WatchedRun, stream_steps
from aeonloop.phases.events import LoopExited, PassCompleted, RunState
from aeonloop.phases.models import ExecutionPass, Plan, PlanStep
from aeonloop.testing import DictRunRecords

DEADLINE = "2030-01-01T00:00:00Z"


def after_one_pass() -> RunState:
    """A run as decoded after pass 1: its record and output are in the history only."""
    step = PlanStep(step_id="s1", description="d", status="done", executed_in_pass=1)
    return RunState(request="q", plan=Plan(goal="g", steps=[step]), pass_count=1, scores=[0.5])


class SlowRecords(DictRunRecords):
    """Records that take a while to read, calling `meanwhile` when asked."""

    def __init__(self, meanwhile: Callable[[], None]) -> None:
        super().__init__()
        self.meanwhile = meanwhile

    async def read(self, correlation_id: str, names: Sequence[str]) -> list[bytes | None]:
        self.meanwhile()
        await asyncio.sleep(0.05)
        return await super().read(correlation_id, names)


class Feed:
    open_streams = 0

    def __init__(self, records: DictRunRecords) -> None:
        self.records = records

    def _let_go(self, run: WatchedRun) -> None:
        pass


async def test_a_state_offered_while_the_last_one_loads_keeps_every_pass_step() -> None:
    record = ExecutionPass(pass_number=1)
    completed = PassCompleted(
        correlation_id="c", deadline=DEADLINE, run=after_one_pass(), execution_pass=record
    )
    exited = LoopExited(
        correlation_id="c", deadline=DEADLINE, reason="ttl_exhausted", run=after_one_pass()
    )
    watched = WatchedRun("c")
    watched.offer(RunView(completed, "1-0", None))
    offered: list[bool] = []

    def exit_arrives() -> None:  # D's exit, milliseconds after the PassCompleted
        if not offered:
            offered.append(True)
            watched.offer(RunView(exited, "2-0", None))

    records = SlowRecords(exit_arrives)
    records.write(
        [
            RunRecord("c", "pass:1", record.model_dump_json().encode()),
            RunRecord("c", "outputs:1", orjson.dumps({"s1": "out"})),
        ]
    )
    sent: list[str] = []

    async def read() -> None:
        async for step in stream_steps(Watch(Feed(records), watched), None):
            sent.append(step.kind)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.5)
    reader.cancel()
    assert sent == ["plan", "pass", "exit"]
