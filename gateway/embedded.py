"""The zero-config stack: a private Redis and in-process workers for every phase.

`aeon ask` uses this when no AEON_REDIS_URL is set, so a fresh machine answers with nothing but
pip: the same bus, consumers and events as a deployment, only all in one process.

Nothing outlives the process, however it ends. The server is started from the main thread, so
the kernel's parent-death signal (armed per thread) stops it when the process is SIGKILLed, and
its directory is removed as soon as it answers: it persists nothing, so it needs no files.
A SIGTERM or Ctrl-C cancels `aeon ask`, and the teardown below stops it as a normal exit does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aeonloop.bus.connection import connect
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMAdapter
from aeonloop.phases.worker import PHASES, make_worker
from aeonloop.servers.embedded import RedisServer
from aeonloop.tools.base import Toolbox
from aeonloop.webhooks.delivery import worker_routes

log = logging.getLogger("aeon")


@contextlib.asynccontextmanager
async def embedded_pipeline(
    settings: BusSettings,
    llm: LLMAdapter,
    loop: LoopSettings | None = None,
    tools: Toolbox | None = None,
) -> AsyncIterator[BusSettings]:
    """Yield settings pointing at a running private pipeline; tear it all down on exit."""
    server = RedisServer().start()  # in this thread: see the module docstring (~20 ms)
    try:
        server.remove_files()
        settings = settings.with_(redis_url=server.url)
        async with in_process_workers(settings, llm, loop, tools):
            yield settings
    finally:
        server.close()


@contextlib.asynccontextmanager
async def in_process_workers(
    settings: BusSettings,
    llm: LLMAdapter,
    loop: LoopSettings | None = None,
    tools: Toolbox | None = None,
) -> AsyncIterator[BusWorker]:
    """Workers for every phase (and the webhooks group) in this process, reading the Redis
    `settings` name, while the context lasts: the embedded pipeline's, and the test harness's
    (aeonloop.testing), which may bring its own Redis."""
    redis = await connect(settings, consumers=len(PHASES) * settings.shards)
    try:
        worker = make_worker(redis, settings, llm, loop=loop, tools=tools, routes=worker_routes)
        await worker.start()
    except BaseException:
        await redis.aclose()
        raise
    running = asyncio.create_task(worker.run(), name="embedded-worker")
    try:
        yield worker
    except BaseException:
        running.cancel()  # interrupted: nothing in flight is worth waiting for
        raise
    finally:
        worker.stop()
        (ended,) = await asyncio.gather(running, return_exceptions=True)
        await redis.aclose()
        if isinstance(ended, Exception):  # say why the answer never came
            log.error("the embedded workers stopped: %s", ended)
