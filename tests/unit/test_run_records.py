"""Reading a run's history waits out a Redis that is away (a master failing over), instead of
failing the handler, whose attempts would pass in under a second."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.keys import Keys
from aeonloop.bus.records import RedisRunRecords


class FailingOver:
    """A Redis whose master for the run's slot refuses connections `times` times."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.asked = 0

    async def hmget(self, key: str, names: list[str]) -> list[bytes | None]:
        self.asked += 1
        if self.asked <= self.times:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:19974.")
        return [b"kept" for _ in names]


async def test_a_history_read_waits_out_a_failover() -> None:
    redis = FailingOver(times=2)
    records = RedisRunRecords(redis, Keys("aeon"))  # type: ignore[arg-type]
    assert await records.read("run-1", ["pass:1"]) == [b"kept"]
    assert redis.asked == 3
