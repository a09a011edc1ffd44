"""Section 3, scale-out: the largest burst on one worker process, then on two.

Workers share nothing but Redis (consumer groups split the entries), so two processes should
take the CPU-bound part of the work on both cores; on this 2-core machine they also share the
cores with Redis and the gateway, which the CPU figures show.
"""

from __future__ import annotations

from bench.concurrency import burst_row
from bench.context import BenchContext
from bench.slowllm import burst, single_runs
from bench.stats import ratio


async def run_scaleout(ctx: BenchContext) -> dict[str, object]:
    time_per_run = (await single_runs(ctx)).p50_s
    runs = ctx.profile.big_burst
    one = await burst(ctx, runs, 1)
    two = await burst(ctx, runs, 2)
    return {
        "submitted": runs,
        "points": [burst_row(one, time_per_run), burst_row(two, time_per_run)],
        "speedup_2_vs_1": round(
            ratio(two.measured.load.runs_per_s, one.measured.load.runs_per_s), 3
        ),
    }
