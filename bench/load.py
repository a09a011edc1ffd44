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
    """What a load produced: per-run latencies (s), wall time (s) and the run results."""

    runs: int
    in_flight: int
    wall: float
    latencies: list[float] = field(default_factory=list)
    results: list[object] = field(default_factory=list)

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.wall if self.wall > 0 else 0.0


async def closed_loop(one_run: OneRun, runs: int, in_flight: int) -> LoadResult:
    """Run `one_run` `runs` times with `in_flight` of them going at once."""
    in_flight = max(1, min(in_flight, runs))
    latencies: list[float] = []
    results: list[object] = []
    left = runs

    async def lane() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            started = time.perf_counter()
            results.append(await one_run())
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    wall = time.perf_counter() - started
    return LoadResult(runs, in_flight, wall, latencies, results)
