"""A memo that cannot be read is a miss: it only saves an LLM call, and a failing master of a
memo's slot (outside the run's shard) must not send the run to dead letters."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.consumer import redelivered
from aeonloop.bus.keys import Keys
from aeonloop.bus.memo import RedisMemo


class FailingRedis:
    """A Redis whose node for the memo's slot refuses connections (a master failing over)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def get(self, key: str) -> bytes:
        self.asked.append(key)
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:19974. Connection refused.")


async def test_a_memo_that_cannot_be_read_is_a_miss() -> None:
    redis = FailingRedis()
    memo = RedisMemo(redis, Keys("aeon"), committer=None)  # type: ignore[arg-type]
    token = redelivered.set(True)
    try:
        assert await memo.get("run/b/plan") is None
    finally:
        redelivered.reset(token)
    assert redis.asked == ["aeon:memo:run/b/plan"]
