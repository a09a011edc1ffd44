"""A running pipeline to measure: `aeon worker` processes under a fresh prefix, and a gateway.

`running_pipeline` returns only once every consumer of every worker is reading, so no
measurement includes a worker's start-up, and a scale-out run really has both workers reading.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from aeonloop.llm.offline import OfflineLLM
from aeonloop.phases.deps import PhaseDeps
from aeonloop.phases.worker import build_routes
from aeonloop.prompts.registry import PromptRegistry
from bench.context import BenchContext
from bench.gateways import PipelineGateway
from bench.processes import Spawned, aeon_workers
from bench.readiness import blocked_readers, until_reading

#: Every phase group's route, as phases.worker wires it. The bench reads only their groups,
#: streams and event types: the handlers, bound to an offline LLM here, never run.
PHASE_ROUTES = build_routes(PhaseDeps(llm=OfflineLLM(), registry=PromptRegistry()))
#: Each phase group and the stream it reads.
PHASE_STREAMS = {route.group: route.stream for route in PHASE_ROUTES}


@contextlib.asynccontextmanager
async def running_pipeline(
    ctx: BenchContext,
    prefix: str,
    *,
    workers: int = 1,
    concurrency: int | None = None,
    llm_delay_ms: float = 0.0,
    argv: list[str] | None = None,
    shards: int | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[tuple[list[Spawned], PipelineGateway]]:
    """Workers serving every phase under `prefix`, ready, and a gateway to send runs through.

    `argv` runs another worker program in their place (default `aeon worker`); `shards` is
    AEON_SHARDS for the workers and the gateway alike (None: what the environment says); `env`
    adds variables for the workers."""
    baseline = await blocked_readers(ctx.redis)
    with aeon_workers(
        workers,
        ctx.redis_url,
        prefix,
        ctx.log_dir,
        concurrency=concurrency,
        llm_delay_ms=llm_delay_ms,
        argv=argv,
        shards=shards,
        env=env,
    ) as procs:
        # Each consumer blocks in one XREADGROUP per shard of its stream.
        readers = len(PHASE_STREAMS) * workers * (shards or 1)
        await until_reading(ctx.redis, baseline, readers, procs)
        async with PipelineGateway(ctx.redis_url, prefix, shards) as gateway:
            yield procs, gateway
