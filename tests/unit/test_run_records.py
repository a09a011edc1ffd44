"""Reading a run's history: it waits out a Redis that is away (a master failing over), instead
of failing the handler, whose attempts would pass in under a second; and a handler reads the
records the bus read with its event's lock without asking Redis again."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import Keys
from aeonloop.llm.offline import OfflineLLM
from aeonloop.phases.deps import PhaseDeps
from aeonloop.prompts.registry import PromptRegistry
from aeonloop.runs.records import RedisRunRecords


class FailingOver:
    """A Redis whose master for the run's slot refuses connections `times` times."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.asked = 0
        self.names: list[list[str]] = []

    async def hmget(self, key: str, names: list[str]) -> list[bytes | None]:
        self.asked += 1
        self.names.append(names)
        if self.asked <= self.times:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:19974.")
        return [b"kept" for _ in names]


async def test_a_history_read_waits_out_a_failover() -> None:
    redis = FailingOver(times=2)
    records = RedisRunRecords(redis, Keys("aeon"))  # type: ignore[arg-type]
    assert await records.read("run-1", ["pass:1"]) == [b"kept"]
    assert redis.asked == 3


async def test_a_handler_reads_the_records_read_with_the_lock_and_asks_only_for_the_rest() -> None:
    redis = FailingOver(times=0)
    deps = PhaseDeps(
        llm=OfflineLLM(),
        registry=PromptRegistry(),
        records=RedisRunRecords(redis, Keys("aeon")),  # type: ignore[arg-type]
    )
    read = {("run-1", "pass:1"): b"read with the lock"}
    records = deps.delivered(Delivery(records=read)).records
    assert await records.read("run-1", ["pass:1"]) == [b"read with the lock"]
    assert redis.asked == 0, "no round trip for what the lock's round trip read"
    both = await records.read("run-1", ["pass:1", "outputs:1"])
    assert both == [b"read with the lock", b"kept"]
    assert redis.names == [["outputs:1"]]
    other_run = await records.read("run-2", ["pass:1"])
    assert other_run == [b"kept"], "what was read is another run's"
