"""Section 4, memory: a worker's peak RSS with one run in flight and with the largest burst.

Peak means VmHWM, the kernel's high-water mark of the resident set, read before the worker
stops; each figure comes from a fresh process, so it belongs to that load alone. Per in-flight
run is the difference divided by the extra runs the worker really held at once (sampled from
the groups' pending counts), not by the runs submitted.
"""

from __future__ import annotations

from bench.context import BenchContext
from bench.slowllm import burst, single_runs
from bench.stats import ratio


async def run_memory(ctx: BenchContext) -> dict[str, object]:
    single = await single_runs(ctx)
    big = await burst(ctx, ctx.profile.big_burst, 1)
    rss_1, rss_n = single.peak_rss_kb[0], big.peak_rss_kb[0]
    return {
        "peak_rss_kb_1_in_flight": rss_1,
        "peak_rss_kb_n_in_flight": rss_n,
        "n_submitted": big.runs,
        "n_max_in_flight": big.max_in_flight,
        "kb_per_in_flight_run": round(ratio(rss_n - rss_1, big.max_in_flight - 1), 2),
    }
