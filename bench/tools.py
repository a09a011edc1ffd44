"""Section tools: what a tool call adds to a hop's cost.

One `aeon worker` with the instant offline model and the bench's MCP server (bench.mcp_server,
over stdio) answers two requests in turn, one run in flight, `single_runs × 10` times each:

- "Use the tool add with a=2 b=3, then explain the result": a plan of a tool step and a
  reasoning step built on it;
- "Add 2 and 3, then explain the result": the same plan with two reasoning steps.

Each run makes the same hops; they differ only in one step being a tool call rather than an
LLM call (which, offline and instant, costs next to nothing). The difference in wall time and
in the worker's CPU per run is what one tool call adds to its hop: the MCP round trip over
stdio, the argument check against the tool's schema, and the memo write of the result. The
MCP server's own CPU is its own process's, outside the worker's. Figures only: no target.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.context import BenchContext
from bench.pipeline import running_pipeline
from bench.procstat import cpu_seconds

WITH_TOOL = "Use the tool add with a=2 b=3, then explain the result"
WITHOUT = "Add 2 and 3, then explain the result"
RUNS_PER_SINGLE_RUN = 10


async def run_tools(ctx: BenchContext) -> dict[str, Any]:
    prefix = ctx.new_prefix("tools")
    config = ctx.log_dir / "bench-mcp.json"
    # By its path: a stdio server gets the SDK's few variables, not PYTHONPATH or the cwd.
    server = {"command": sys.executable, "args": [str(Path(__file__).with_name("mcp_server.py"))]}
    config.write_text(json.dumps({"mcpServers": {"bench": server}}), encoding="utf-8")
    runs = ctx.profile.single_runs * RUNS_PER_SINGLE_RUN
    env = {"AEON_MCP_CONFIG": str(config)}
    async with running_pipeline(ctx, prefix, env=env) as (procs, gateway):
        (worker,) = procs
        measured = {}
        for name, request in (("reasoning", WITHOUT), ("tool", WITH_TOOL)):
            await gateway.ask(request)  # warm: the first run of a kind pays for imports
            measured[name] = await _runs(gateway, worker.pid, request, runs)
    await ctx.clean(prefix)
    tool, plain = measured["tool"], measured["reasoning"]
    return {
        "runs": runs,
        "reasoning": plain,
        "tool": tool,
        "tool_call_adds_ms": round(tool["wall_ms"] - plain["wall_ms"], 2),
        "tool_call_adds_cpu_ms": round(tool["worker_cpu_ms"] - plain["worker_cpu_ms"], 2),
    }


async def _runs(gateway: Any, pid: int, request: str, runs: int) -> dict[str, Any]:
    walls = []
    cpu_before = cpu_seconds(pid)
    for _ in range(runs):
        started = time.perf_counter()
        result = await gateway.ask(request)
        walls.append(time.perf_counter() - started)
        calls = result.outcome.tool_calls
        if request == WITH_TOOL and [c["outcome"] for c in calls] != ["ok"]:
            raise RuntimeError(f"the tool run did not call its tool once: {calls}")
    return {
        "wall_ms": round(statistics.median(walls) * 1000, 2),
        "worker_cpu_ms": round((cpu_seconds(pid) - cpu_before) / runs * 1000, 2),
    }
