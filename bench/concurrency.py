"""Section 2, concurrency: how many runs one worker keeps in flight behind a 200 ms LLM.

Ideal throughput for N runs in flight is N ÷ (time per run), the time per run being measured
with one run in flight (about LLM calls per run × the delay). A burst of N runs submitted at
once reaches it only if the worker can start every LLM call as soon as the last one returns:
when it cannot, the worker's CPU says why. Its CPU time per run gives the ceiling one core
allows (runs/s), and so the number of runs in flight where scaling must stop: ceiling × time
per run.

A burst is the harsh case: all N runs wake from the LLM together, so each wave of N handlers
queues behind the others for the CPU even when the average load is well under a core. The
sustained load keeps N in flight for several rounds and reports the throughput once the runs
have spread out (`LoadResult.steady_runs_per_s`), which is what a worker behind a steady
stream of requests sees.
"""

from __future__ import annotations

from bench.context import BenchContext
from bench.slowllm import SlowLoad, burst, single_runs, sustained
from bench.stats import latency_summary, ratio


async def run_concurrency(ctx: BenchContext) -> dict[str, object]:
    single = await single_runs(ctx)
    time_per_run = single.p50_s
    points = [burst_row(await burst(ctx, runs, 1), time_per_run) for runs in ctx.profile.bursts]
    steady = await sustained(ctx, ctx.profile.big_burst)
    return {
        "llm_delay_ms": ctx.profile.llm_delay_ms,
        "concurrency_setting": ctx.profile.concurrency,
        "llm_calls_per_run": round(single.llm_calls_per_run, 2),
        "llm_floor_s": round(single.llm_calls_per_run * ctx.profile.llm_delay_ms / 1000, 3),
        "time_per_run_s": round(time_per_run, 3),
        "single_run": {
            "runs": single.runs,
            "latency_ms": latency_summary(single.measured.load.latencies),
            "worker_cpu_ms_per_run": round(1000 * single.worker_cpu_s / single.runs, 2),
        },
        "points": points,
        "sustained": sustained_row(steady, time_per_run),
    }


def sustained_row(load: SlowLoad, time_per_run: float) -> dict[str, object]:
    """A sustained load: the burst figures, plus throughput and efficiency in steady state."""
    row = burst_row(load, time_per_run)
    in_flight = load.measured.load.in_flight
    rate, counted = load.measured.load.steady_runs_per_s()
    ideal = in_flight / time_per_run
    row.update(
        {
            "in_flight": in_flight,
            "ideal_runs_per_s": round(ideal, 2),
            "steady_runs_per_s": round(rate, 2),
            "steady_runs_counted": counted,
            "efficiency": round(ratio(rate, ideal), 3),
        }
    )
    return row


def burst_row(load: SlowLoad, time_per_run: float) -> dict[str, object]:
    """One burst: throughput against ideal, and the CPU figures that explain a shortfall."""
    runs = load.runs
    ideal = runs / time_per_run
    cpu_per_run = load.worker_cpu_s / runs
    ceiling = load.workers / cpu_per_run if cpu_per_run else 0.0
    cpu = load.measured.cpu
    row: dict[str, object] = {
        "workers": load.workers,
        "submitted": runs,
        "max_in_flight": load.max_in_flight,
        "wall_s": round(load.measured.load.wall, 3),
        "runs_per_s": round(load.measured.load.runs_per_s, 2),
        "ideal_runs_per_s": round(ideal, 2),
        "efficiency": round(ratio(load.measured.load.runs_per_s, ideal), 3),
        "latency_ms": latency_summary(load.measured.load.latencies),
        "worker_cpu_percent": round(load.measured.cpu.percent("consumer"), 1),
        "cpu_percent": {
            role: round(load.measured.cpu.percent(role), 1) for role in load.measured.cpu.seconds
        },
        "worker_cpu_ms_per_run": round(1000 * cpu_per_run, 2),
        "cpu_ceiling_runs_per_s": round(ceiling, 1),
        "cpu_knee_in_flight": round(ceiling * time_per_run),
        "peak_rss_kb": list(load.peak_rss_kb),
        # Runnable but waiting for a core, % of the wall time: the machine as the limit.
        "core_wait_percent": {role: round(cpu.waiting_percent(role), 1) for role in cpu.waiting},
    }
    if load.metrics is not None:  # AEON_METRICS_PORT set: the workers' own histograms
        row["worker_metrics"] = load.metrics
    return row
