"""When the consumer processes a benchmark just started are really reading.

No measurement may include a process's start-up. A consumer shows in XINFO CONSUMERS only once
it has been delivered an entry (Redis 6.2), so readiness is read from CLIENT LIST instead: every
consumer of every started process blocks in XREADGROUP when its stream is empty, so the count of
such clients must grow by the number of consumers started. Counting from a baseline taken before
the start keeps other clients of a shared Redis out of the figure (as long as theirs is steady).
On a cluster the readers block on the masters owning their shards, so every master is counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from redis.asyncio import RedisCluster

from aeonloop.bus.connection import RedisClient, is_cluster
from bench.processes import Spawned

READY_TIMEOUT_S = 60.0


async def blocked_readers(redis: RedisClient) -> int:
    """Clients blocked in XREADGROUP right now (on every master of a cluster)."""
    if is_cluster(redis):
        # One master answers as a list, several as {node name: list}.
        reply = await redis.client_list(target_nodes=RedisCluster.PRIMARIES)
        clients = [c for part in reply.values() for c in part] if isinstance(reply, dict) else reply
    else:
        clients = await redis.client_list()
    return sum(1 for c in clients if c.get("cmd") == "xreadgroup" and "b" in c.get("flags", ""))


async def until_reading(
    redis: RedisClient, baseline: int, consumers: int, processes: Sequence[Spawned]
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
