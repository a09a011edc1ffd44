"""Section quality: `aeon eval` on its 40 shipped cases, against the server the flags name.

`python -m bench --only quality --llm-url URL --model NAME` runs the harness of `aeon eval`
(aeonloop.gateway.quality: its cases, paths, tables and picture) on the shipped cases, with one
in-process worker of every phase on the bench's Redis, and returns its report as the section.
The server and model are the section's flags; the rest (AEON_LLM_TIMEOUT and the other bounds,
AEON_MAX_PASSES) is the environment's, as a worker's would be, so a loaded machine can be
measured. `--quality-results PATH` gets the report after every case (a run cut short keeps its
table), and a later run with the same file keeps the cases it holds (same case, options and
model) and runs only the rest; `--quality-plot PATH` draws the frontier picture.
"""

from __future__ import annotations

import sys
from typing import Any

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.quality.cases import load_cases
from aeonloop.gateway.quality.paths import Plan, efforts_to_run, evaluate
from aeonloop.gateway.quality.report import ProgressBar, kept_records, plot, write_json
from aeonloop.limits import LoopSettings
from aeonloop.llm.factory import LLMSettings, ready_adapter
from aeonloop.testing import AeonTestStack
from bench.context import BenchContext


async def run_quality(ctx: BenchContext) -> dict[str, Any]:
    if not (ctx.llm_url and ctx.model):
        raise ValueError("the quality section needs --llm-url and --model (an OpenAI server)")
    cases = load_cases().checked()[: ctx.quality_cases or None]
    efforts = efforts_to_run(ctx.quality_effort or [])
    loop = LoopSettings.from_env()
    plan = Plan(tuple(ctx.quality_modes), efforts, ctx.quality_k, loop=loop)
    server = {"kind": "openai", "base_url": ctx.llm_url, "model": ctx.model}
    llm = await ready_adapter(LLMSettings.from_env().model_copy(update=server))
    prefix = ctx.new_prefix("quality")
    settings = BusSettings(redis_url=ctx.redis_url, prefix=prefix)
    results = ctx.quality_results
    kept = kept_records(results, ctx.model) if results else {}
    try:
        async with AeonTestStack(llm, settings=settings, loop=loop) as stack:
            report = await evaluate(
                cases,
                llm,
                stack.client,
                plan,
                ctx.model,
                ProgressBar(sys.stderr, len(cases)),
                (lambda report: write_json(report, results)) if results else lambda report: None,
                kept,
            )
    finally:
        await llm.aclose()
        await ctx.clean(prefix)
    if ctx.quality_plot:
        plot(report, ctx.quality_plot)
    return report
