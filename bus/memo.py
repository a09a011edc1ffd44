"""LLM replies remembered in Redis, so a redelivered event does not pay for the same calls.

Reads happen only when the event may have been handled before (the consumer's `redelivered`
flag): a first delivery cannot have memoised replies, so it spends no round trip asking.
Writes ride along with the committer's next flush instead of costing a round trip each.
"""

from __future__ import annotations

from bus.commit import Committer
from bus.connection import RedisClient
from bus.consumer import redelivered
from bus.keys import Keys


class RedisMemo:
    def __init__(self, redis: RedisClient, keys: Keys, committer: Committer) -> None:
        self._redis = redis
        self._keys = keys
        self._committer = committer

    async def get(self, key: str) -> str | None:
        if not redelivered.get():
            return None
        value = await self._redis.get(self._keys.memo(key))
        return value.decode() if value is not None else None

    async def put(self, key: str, value: str) -> None:
        self._committer.remember(key, value)
