"""One measured load: throughput, latency and the CPU each process spent on it.

Wraps `closed_loop` with CPU snapshots of the consumer processes (worker or reference), the
bench process (the gateway side) and Redis, and with a watchdog: a worker that dies fails the
benchmark at once with its log, instead of leaving the load waiting for answers forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from bench.load import LoadResult, OneRun, closed_loop
from bench.processes import Spawned
from bench.procstat import CpuSnapshot, CpuUsage
from bench.stats import latency_summary

LOAD_TIMEOUT_S = 600.0
T = TypeVar("T")


@dataclass(frozen=True)
class Measured:
    """A load's result and the CPU spent on it per role ("consumer", "bench", "redis")."""

    load: LoadResult
    cpu: CpuUsage

    def cpu_us_per_hop(self, hops_per_run: float) -> float:
        hops = self.load.runs * hops_per_run
        return 1e6 * self.cpu.seconds["consumer"] / hops if hops else 0.0

    def as_dict(self, hops_per_run: float | None = None) -> dict[str, object]:
        row: dict[str, object] = {
            "runs": self.load.runs,
            "in_flight": self.load.in_flight,
            "wall_s": round(self.load.wall, 3),
            "runs_per_s": round(self.load.runs_per_s, 2),
            "latency_ms": latency_summary(self.load.latencies),
            "cpu_percent": {role: round(self.cpu.percent(role), 1) for role in self.cpu.seconds},
        }
        if hops_per_run:
            row["hops_per_run"] = round(hops_per_run, 3)
            row["cpu_us_per_hop"] = round(self.cpu_us_per_hop(hops_per_run), 1)
        return row


async def measure(
    one_run: OneRun,
    runs: int,
    in_flight: int,
    consumers: Sequence[Spawned],
    redis_pid: int | None,
) -> Measured:
    """Run the load while watching `consumers`; CPU of each role over exactly the load."""
    pids: dict[str, list[int | None]] = {
        "consumer": [c.pid for c in consumers],
        "bench": [None],
    }
    if redis_pid is not None:
        pids["redis"] = [redis_pid]
    before = CpuSnapshot.take(pids)
    load = await guarded(closed_loop(one_run, runs, in_flight), consumers)
    after = CpuSnapshot.take(pids)
    return Measured(load, after.since(before))


async def guarded(work: Coroutine[Any, Any, T], watched: Sequence[Spawned]) -> T:
    """`work`'s result; ProcessDied as soon as a watched process exits, TimeoutError after
    LOAD_TIMEOUT_S: a broken pipeline must fail the benchmark, not hang it."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            for process in watched:
                process.check()
            await asyncio.sleep(0.25)

    watchdog = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait(
            {task, watchdog}, timeout=LOAD_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            return task.result()
        if watchdog in done:
            watchdog.result()  # raises ProcessDied
        raise TimeoutError(f"load still running after {LOAD_TIMEOUT_S:g}s")
    finally:
        for pending in (task, watchdog):
            pending.cancel()
        await asyncio.gather(task, watchdog, return_exceptions=True)
