"""Section costs: what one answer costs in LLM calls, prompt tokens and waiting.

Runs the bench's standard request (the README's main job) one at a time through one `aeon
worker` whose offline model stands in for a server at a fixed `LLM_DELAY_MS` a call, and reports
per run: the calls, the prompt and completion tokens (estimated from text length: the offline
model counts none), the wall time, and the wall time ÷ the sum of the run's call latencies
(calls × LLM_DELAY_MS). That ratio is 1 when every call waits for the one before it; calls made
at once (a pass's evaluation, independent steps) bring it under 1.

Before (the code issue 27 started from, the same request and stand-in, measured with `aeon ask
--json`): 12 calls, a ratio of 1.03 and 1.06, 7,803 prompt tokens.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.context import BenchContext
from bench.pipeline import running_pipeline

#: The stand-in latency of one LLM call, ms.
LLM_DELAY_MS = 300
#: Before (issue 27's figures for the same request), for the report.
BEFORE_RATIO = 1.04
BEFORE_PROMPT_TOKENS = 7803


async def run_costs(ctx: BenchContext) -> dict[str, Any]:
    prefix = ctx.new_prefix("costs")
    runs: list[dict[str, Any]] = []
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
    await ctx.clean(prefix)
    return {
        "llm_delay_ms": LLM_DELAY_MS,
        "runs": runs,
        "wall_vs_calls": statistics.median(r["wall_vs_calls"] for r in runs),
        "prompt_tokens_per_run": statistics.median(r["prompt_tokens"] for r in runs),
        "calls_per_run": statistics.median(r["calls"] for r in runs),
        "before": {"wall_vs_calls": BEFORE_RATIO, "prompt_tokens_per_run": BEFORE_PROMPT_TOKENS},
    }
