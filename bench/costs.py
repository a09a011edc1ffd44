"""Section costs: what one answer costs in LLM calls, prompt tokens and waiting.

Runs the bench's standard request (the README's main job) one at a time through one `aeon
worker` whose offline model stands in for a server at a fixed `LLM_DELAY_MS` a call, and reports
per run: the calls, the prompt and completion tokens (estimated from text length: the offline
model counts none), the wall time, and the wall time ÷ the sum of the run's call latencies
(calls × LLM_DELAY_MS). That ratio is 1 when every call waits for the one before it; calls made
at once (a pass's evaluation, independent steps) bring it under 1.

It also prices the cancel checks (issue 26): a worker looks for a run's cancel mark (one
EXISTS) before each hop and each LLM call, and reads the marks of the runs it holds every
250 ms. EXISTS is the checks' command alone, so Redis's own count of it over the runs gives
the checks per run; timing that many checks against the same Redis gives what they cost.

Before (the code issue 27 started from, the same request and stand-in, measured with `aeon ask
--json`): 12 calls, a ratio of 1.03 and 1.06, 7,803 prompt tokens.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from aeonloop.bus.keys import Keys
from aeonloop.runs.cancels import RedisCancels
from bench.context import BenchContext
from bench.pipeline import running_pipeline

#: Checks timed to price one.
TIMED_CHECKS = 2_000

#: The stand-in latency of one LLM call, ms.
LLM_DELAY_MS = 300
#: Before (issue 27's figures for the same request), for the report.
BEFORE_RATIO = 1.04
BEFORE_PROMPT_TOKENS = 7803


async def run_costs(ctx: BenchContext) -> dict[str, Any]:
    prefix = ctx.new_prefix("costs")
    runs: list[dict[str, Any]] = []
    exists_before = await _exists_calls(ctx)
    async with running_pipeline(ctx, prefix, llm_delay_ms=LLM_DELAY_MS) as (_, gateway):
        for _ in range(ctx.profile.single_runs):
            started = time.perf_counter()
            result = await gateway.one_run()
            wall = time.perf_counter() - started
            usage = result.usage
            runs.append(
                {
                    "status": result.status,
                    "calls": usage.calls,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "wall_s": round(wall, 3),
                    "wall_vs_calls": round(wall / (usage.calls * LLM_DELAY_MS / 1000), 3),
                }
            )
    checks_per_run = (await _exists_calls(ctx) - exists_before) / len(runs)
    await ctx.clean(prefix)
    return {
        "cancel_checks": await _cancel_checks(ctx, prefix, checks_per_run),
        "llm_delay_ms": LLM_DELAY_MS,
        "runs": runs,
        "wall_vs_calls": statistics.median(r["wall_vs_calls"] for r in runs),
        "prompt_tokens_per_run": statistics.median(r["prompt_tokens"] for r in runs),
        "calls_per_run": statistics.median(r["calls"] for r in runs),
        "before": {"wall_vs_calls": BEFORE_RATIO, "prompt_tokens_per_run": BEFORE_PROMPT_TOKENS},
    }


async def _exists_calls(ctx: BenchContext) -> int:
    """EXISTS commands Redis has run: the cancel checks' one command."""
    stats = await ctx.redis.info("commandstats")
    return int(stats.get("cmdstat_exists", {}).get("calls", 0))


async def _cancel_checks(ctx: BenchContext, prefix: str, per_run: float) -> dict[str, Any]:
    """What the cancel checks of one run cost: `per_run` checks, each timed (wall and this
    process's CPU) over TIMED_CHECKS checks of a run's mark, as a worker makes them."""
    cancels = RedisCancels(ctx.redis, Keys(prefix))
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(TIMED_CHECKS):
        await cancels.cancelled(f"run-{n}")
    cpu_us = (time.process_time() - cpu) / TIMED_CHECKS * 1e6
    wall_us = (time.perf_counter() - wall) / TIMED_CHECKS * 1e6
    return {
        "per_run": round(per_run, 1),
        "cpu_us_each": round(cpu_us, 1),
        "wall_us_each": round(wall_us, 1),
        "cpu_ms_per_run": round(per_run * cpu_us / 1000, 3),
        "wall_ms_per_run": round(per_run * wall_us / 1000, 3),
    }
