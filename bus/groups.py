"""The consumer group one consumer works in, on every shard of its stream.

Every part of the consumer (bus.consumer, bus.locking, bus.retry, bus.recovery) names the same
Redis connection, group, stream keys and consumer name in its commands; `Group` carries them
once. Making the group is here too, since reading recreates it when Redis lost its data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import ResponseError

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.redis_errors import group_exists, refuses_writes


@dataclass(frozen=True)
class Group:
    """One consumer group on its stream's shards, as one consumer of it addresses it."""

    redis: RedisClient
    #: The group's name in Redis (`phase-a` ...), and in every log line of its consumer.
    name: str
    #: The stream's key in every shard, by shard number.
    stream_keys: Sequence[str]
    #: This consumer's name in the group (AEON_CONSUMER_NAME).
    consumer: str

    async def ensure(self) -> None:
        """Create the group (and stream) of every shard if missing; start from the beginning
        so nothing published before the first worker started is skipped."""
        for stream_key in self.stream_keys:
            await self.ensure_in(stream_key)

    async def ensure_in(self, stream_key: str) -> None:
        """Create the group on one shard's stream if missing."""
        try:
            await self.redis.xgroup_create(stream_key, self.name, id="0", mkstream=True)
        except ResponseError as error:
            if group_exists(error):
                return
            if not (refuses_writes(error) and await self._exists_in(stream_key)):
                raise  # a worker starting while Redis refuses writes needs its group made

    async def _exists_in(self, stream_key: str) -> bool:
        try:
            groups = await self.redis.xinfo_groups(stream_key)
        except ResponseError:  # no such stream
            return False
        return any(g["name"] == self.name.encode() for g in groups)
