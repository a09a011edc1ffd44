"""How many runs the workers hold right now, sampled from Redis while a load runs.

A run has one live event at a time, and a worker holds an event from its XREADGROUP to its
XACK: so the sum of the phase groups' pending counts is the number of runs inside workers
(reading, waiting on the LLM, or committing), as opposed to runs the gateway has submitted
that are still queued in a stream. The maximum over the load is "runs in flight".
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Self

from redis.asyncio import Redis

from aeonloop.bus.keys import Keys
from bench.pipeline import PHASE_STREAMS

SAMPLE_INTERVAL_S = 0.05


class InFlightSampler:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keys(prefix)
        self._task: asyncio.Task[None] | None = None
        self.max_in_flight = 0
        self.samples = 0

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._sample_forever())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sample(self) -> int:
        pipe = self._redis.pipeline(transaction=False)
        for phase, stream in PHASE_STREAMS.items():
            pipe.xpending(self._keys.stream(stream, 0), self._keys.group(phase))
        replies = await pipe.execute()
        return sum(reply["pending"] for reply in replies)

    async def _sample_forever(self) -> None:
        while True:
            self.max_in_flight = max(self.max_in_flight, await self.sample())
            self.samples += 1
            await asyncio.sleep(SAMPLE_INTERVAL_S)
