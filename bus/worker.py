"""A worker process's bus side: one committer, one consumer per route, a clean stop.

What its handlers read and write of a run beyond events (the memo, the run records, the
cancels: the run store, runs/) the phases' wiring builds on this worker's Redis, keys and
committer (phases.worker.make_worker): the store is above transport in the layers.

`stop()` (SIGTERM in `aeon worker`) stops reading and claiming; events in flight finish within
the grace period and are acked; anything unfinished stays pending for another worker to claim.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable, Sequence

from aeonloop.bus.commit import Committer
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.consumer import Consumer, Pause, Route
from aeonloop.bus.keys import ANSWERS, WEBHOOK_OUTCOMES, Keys
from aeonloop.bus.layout import agree_on_shards
from aeonloop.bus.redis_errors import said
from aeonloop.bus.retention import trim_all
from aeonloop.bus.settings import BusSettings, redact

log = logging.getLogger("aeon.bus")

#: Collect the youngest generation every 50,000 allocations instead of every 700.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Make Python's cycle collector cheap for a process that keeps many runs in flight.

    With a thousand runs in flight the heap holds a thousand large decoded events, and the
    default thresholds rescan them every few hundred allocations: a fixed tax on every hop that
    grows with load. Decoded events form almost no reference cycles, so collecting less often
    costs little memory. Freezing moves what start-up allocated (modules, schemas, templates)
    out of the collector's sight for good. Measured with `python -m bench --quick --only
    concurrency`: efficiency at 1,000 in flight rose from 0.48–0.57 to 0.62–0.67.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class BusWorker:
    def __init__(
        self, redis: RedisClient, settings: BusSettings, pauses: Sequence[Pause] = ()
    ) -> None:
        self.redis = redis
        self.settings = settings
        #: What work needs besides Redis (the LLM server): none of its consumers reads new
        #: work while one of these is away (bus.consumer.Pause).
        self.pauses = tuple(pauses)
        self.keys = Keys(settings.prefix, settings.shards)
        self.committer = Committer(redis, self.keys, settings)
        self.consumers: list[Consumer] = []
        #: Loops run beside the consumers while the worker runs (phases.approvals.Sweeper).
        self.background: list[Callable[[], Awaitable[None]]] = []

    def add(self, routes: Sequence[Route]) -> None:
        for route in routes:
            self.consumers.append(
                Consumer(
                    self.redis,
                    route,
                    self.settings,
                    self.committer,
                    self.keys,
                    self.pauses if route.paused else (),
                )
            )

    async def start(self) -> None:
        """Check the shard count, then create every group before reading, so a request
        published now is not missed."""
        await agree_on_shards(self.redis, self.keys)
        for consumer in self.consumers:
            await consumer.ensure_group()

    async def run(self) -> None:
        await self.start()
        url = redact(self.settings.redis_url or "")
        groups = ", ".join(c.route.group for c in self.consumers)
        log.info("worker %s consuming [%s] on %s", self.settings.consumer_name, groups, url)
        flusher = asyncio.create_task(self.committer.run(), name="committer")
        loops = [asyncio.create_task(loop()) for loop in self.background]
        loops.append(asyncio.create_task(self._trim_forever(), name="trimmer"))
        try:
            await asyncio.gather(*(c.run() for c in self.consumers))
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            self.committer.close()
            await flusher
            counts = ", ".join(f"{c.route.group}={c.handled}" for c in self.consumers)
            log.info("worker %s stopped; events handled: %s", self.settings.consumer_name, counts)

    async def trim_once(self) -> int:
        """Trim this worker's streams, and the streams no group reads (answers, webhook
        outcomes: bus.retention); returns the entries removed."""
        grouped = [key for c in self.consumers for key in self.keys.streams(c.route.stream)]
        return await trim_all(
            self.redis,
            grouped,
            [*self.keys.streams(ANSWERS), *self.keys.streams(WEBHOOK_OUTCOMES)],
            self.settings.stream_keep_s * 1000,
        )

    async def _trim_forever(self) -> None:
        """Trim every AEON_TRIM_INTERVAL_S; a failed trim is tried again next time (XTRIM
        needs no memory, so it runs while Redis refuses writes, and frees some)."""
        while True:
            await asyncio.sleep(self.settings.trim_interval_s)
            try:
                await self.trim_once()
            except Exception as error:  # trimming only frees memory: never stop the worker
                log.warning("trimming streams failed: %s", said(error))

    def stop(self) -> None:
        for consumer in self.consumers:
            consumer.stop()

    @property
    def in_flight(self) -> int:
        return sum(c.in_flight for c in self.consumers)
