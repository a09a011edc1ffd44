"""Every process of a deployment must split its streams into the same shards (bus.keys).

A gateway with AEON_SHARDS=3 publishing to workers started with 1 would put two thirds of the
requests where no worker reads, and nothing would say why. So the first process to start under
a prefix records its shard count in Redis, and every later one checks its own against it.
"""

from __future__ import annotations

from redis.exceptions import ResponseError

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys
from aeonloop.bus.redis_errors import refuses_writes
from aeonloop.exceptions import SettingsError


async def agree_on_shards(redis: RedisClient, keys: Keys) -> None:
    """Record `keys.shards` for the prefix, or check it against the one recorded; a
    SettingsError names both numbers and what to do."""
    recorded = await redis.get(keys.shard_count)
    if recorded is None:
        try:
            await redis.set(keys.shard_count, keys.shards, nx=True)
        except ResponseError as error:
            if not refuses_writes(error):
                raise
            return  # out of memory: the next process to start records it
        recorded = await redis.get(keys.shard_count)
    if recorded is not None and int(recorded) != keys.shards:
        raise SettingsError(
            f"AEON_SHARDS={keys.shards}, but the deployment under AEON_PREFIX={keys.prefix!r} "
            f"uses {int(recorded)} shards: set AEON_SHARDS={int(recorded)}, or to change it, "
            f"stop every process, drain the streams and delete the key {keys.shard_count}"
        )
