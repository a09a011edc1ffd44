"""Loads behind a slow LLM stand-in (the offline model sleeping `llm_delay_ms` per call).

Sections 2–4 share these loads, each on fresh worker processes so a peak RSS (VmHWM) belongs
to one load only: the single-run probe (one run in flight at a time: the time per run, and the
memory of a worker with one run), bursts of N runs submitted at once on 1 or 2 workers, and a
sustained load keeping N runs in flight for several rounds.
A load measured for one section is reused by the others (memoised in the context), so
`--only concurrency,scaleout,memory` does each load once.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from aeonloop.phases.events import ExecutionResult
from bench.context import BenchContext
from bench.inflight import InFlightSampler
from bench.measure import Measured, measure
from bench.pipeline import running_pipeline
from bench.procstat import memory_kb
from bench.scrape import worker_metrics


@dataclass(frozen=True)
class SlowLoad:
    workers: int
    measured: Measured
    #: Most runs the workers held at once (sum of the phase groups' pending entries).
    max_in_flight: int
    #: VmHWM of each worker after the load, KB.
    peak_rss_kb: tuple[int, ...]
    llm_calls_per_run: float
    #: The workers' /metrics at the end of the load (bench.scrape), None without metrics.
    metrics: dict[str, object] | None = None

    @property
    def runs(self) -> int:
        return self.measured.load.runs

    @property
    def worker_cpu_s(self) -> float:
        return self.measured.cpu.seconds["consumer"]

    @property
    def p50_s(self) -> float:
        return statistics.median(self.measured.load.latencies)


async def single_runs(ctx: BenchContext) -> SlowLoad:
    """`single_runs` runs one after the other: the time per run with nothing else going on."""
    return await _memoised(ctx, "single", 1, ctx.profile.single_runs, in_flight=1)


async def burst(ctx: BenchContext, runs: int, workers: int) -> SlowLoad:
    """`runs` runs submitted at once to `workers` fresh worker processes."""
    return await _memoised(ctx, f"burst-{runs}x{workers}", workers, runs, in_flight=runs)


async def sustained(ctx: BenchContext, in_flight: int) -> SlowLoad:
    """`in_flight` runs kept going on one fresh worker, `sustained_rounds` runs per lane: past
    the first wave the runs no longer move in lockstep, as they would behind a real gateway."""
    runs = in_flight * ctx.profile.sustained_rounds
    return await _memoised(ctx, f"sustained-{in_flight}", 1, runs, in_flight=in_flight)


async def _memoised(
    ctx: BenchContext, key: str, workers: int, runs: int, in_flight: int
) -> SlowLoad:
    cached = ctx.shared.get(key)
    if isinstance(cached, SlowLoad):
        return cached
    load = await _slow_load(ctx, workers, runs, in_flight)
    ctx.shared[key] = load
    return load


async def _slow_load(ctx: BenchContext, workers: int, runs: int, in_flight: int) -> SlowLoad:
    profile = ctx.profile
    prefix = ctx.new_prefix(f"slow-{runs}x{workers}")
    async with running_pipeline(
        ctx,
        prefix,
        workers=workers,
        concurrency=profile.concurrency,
        llm_delay_ms=profile.llm_delay_ms,
    ) as (procs, gateway):
        async with InFlightSampler(ctx.redis, prefix) as sampler:
            measured = await measure(gateway.one_run, runs, in_flight, procs, ctx.redis_pid)
        peaks = tuple(memory_kb(proc.pid, "VmHWM") for proc in procs)
        scraped = await worker_metrics(procs)
    await ctx.clean(prefix)
    results = [r for r in measured.load.results if isinstance(r, ExecutionResult)]
    calls = statistics.fmean(r.usage.calls for r in results) if results else 0.0
    return SlowLoad(workers, measured, sampler.max_in_flight, peaks, calls, scraped)
