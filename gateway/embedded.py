"""The zero-config stack: a private Redis and in-process workers for every phase.

`aeon ask` uses this when no AEON_REDIS_URL is set, so a fresh machine answers with nothing but
pip: the same bus, consumers and events as a deployment, only all in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from bus.connection import connect
from bus.embedded import RedisServer
from bus.settings import BusSettings
from llm.base import LLMAdapter
from phases.worker import PHASES, make_worker


@contextlib.asynccontextmanager
async def embedded_pipeline(settings: BusSettings, llm: LLMAdapter) -> AsyncIterator[BusSettings]:
    """Yield settings pointing at a running private pipeline; tear it all down on exit."""
    server = await asyncio.to_thread(RedisServer().start)
    try:
        settings = settings.with_(redis_url=server.url)
        redis = connect(settings, consumers=len(PHASES))
        worker = make_worker(redis, settings, llm)
        await worker.start()
        running = asyncio.create_task(worker.run(), name="embedded-worker")
        try:
            yield settings
        finally:
            worker.stop()
            await running
            await redis.aclose()
    finally:
        await asyncio.to_thread(server.close)
