"""Closed-loop load: keep K runs in flight until N have finished, timing each one.

The same driver serves the pipeline (through AeonClient) and the references (through their own
tiny gateway), so throughput and latency are measured the same way for both. "Submit N at once"
is the special case K = N.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

OneRun = Callable[[], Awaitable[object]]


@dataclass
class LoadResult:
    """What a load produced: wall time, and per run its start and end (s from the load's start)
    and its result."""

    runs: int
    in_flight: int
    wall: float
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    results: list[object] = field(default_factory=list)

    @property
    def latencies(self) -> list[float]:
        return [end - start for start, end in zip(self.starts, self.ends, strict=True)]

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.wall if self.wall > 0 else 0.0

    def steady_runs_per_s(self) -> tuple[float, int]:
        """Throughput with every lane busy, by Little's law, and how many runs it rests on.

        A closed loop keeps `in_flight` runs going, so its throughput is in_flight ÷ mean
        latency. Only runs started after the first one ended count: the first wave all start
        at the same moment, which says more about a burst than about a steady load.
        """
        settled = min(self.ends, default=0.0)
        steady = [
            end - start
            for start, end in zip(self.starts, self.ends, strict=True)
            if start >= settled
        ]
        if not steady:
            return 0.0, 0
        return self.in_flight / (sum(steady) / len(steady)), len(steady)


async def closed_loop(one_run: OneRun, runs: int, in_flight: int) -> LoadResult:
    """Run `one_run` `runs` times with `in_flight` of them going at once."""
    result = LoadResult(runs, max(1, min(in_flight, runs)), 0.0)
    left = runs
    origin = time.perf_counter()

    async def lane() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            started = time.perf_counter() - origin
            outcome = await one_run()
            result.ends.append(time.perf_counter() - origin)
            result.starts.append(started)
            result.results.append(outcome)

    await asyncio.gather(*(lane() for _ in range(result.in_flight)))
    result.wall = time.perf_counter() - origin
    return result
