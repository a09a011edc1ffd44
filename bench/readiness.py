"""When the consumer processes a benchmark just started are really reading.

No measurement may include a process's start-up. A consumer shows in XINFO CONSUMERS only once
it has been delivered an entry (Redis 6.2), so readiness is read from CLIENT LIST instead: every
consumer of every started process blocks in XREADGROUP when its stream is empty, so the count of
such clients must grow by the number of consumers started. Counting from a baseline taken before
the start keeps other clients of a shared Redis out of the figure (as long as theirs is steady).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from bench.processes import Spawned

READY_TIMEOUT_S = 60.0


async def blocked_readers(redis: Redis) -> int:
    """Clients blocked in XREADGROUP right now."""
    clients = await redis.client_list()
    return sum(1 for c in clients if c.get("cmd") == "xreadgroup" and "b" in c.get("flags", ""))


async def until_reading(
    redis: Redis, baseline: int, consumers: int, processes: Sequence[Spawned]
) -> None:
    """Return once `consumers` more clients than `baseline` block in XREADGROUP."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for process in processes:
            process.check()
        if await blocked_readers(redis) >= baseline + consumers:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{consumers} consumers were not all reading within {READY_TIMEOUT_S:g}s")
