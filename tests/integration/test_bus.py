"""The bus runtime against a real Redis: delivery, dedupe, poison, retries, recovery, answers.

These use tiny events of their own so they test the transport, not the phases. Every test runs
twice: on one server with one shard, and on a real 3-master Redis Cluster with 3 shards (the
cluster client, every stream split over three slots on three nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import ClassVar

import pytest
from pydantic import BaseModel
from redis.asyncio import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.codec import encode
from aeonloop.bus.commit import Commit
from aeonloop.bus.compact import PACKED, unpack
from aeonloop.bus.connection import RedisClient, connect, is_cluster
from aeonloop.bus.consumer import Consumer, Route
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import Keys, LockState
from aeonloop.bus.locking import Locks
from aeonloop.bus.retention import trim
from aeonloop.bus.route import RunRecord
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker
from aeonloop.runs.records import RedisRunRecords
from aeonloop.settings import SettingsError


class Ping(BaseModel):
    STREAM: ClassVar[str] = "in"
    event_id: str
    correlation_id: str
    n: int


class Pong(BaseModel):
    STREAM: ClassVar[str] = "out"
    event_id: str
    correlation_id: str
    n: int


class Answer(BaseModel):
    STREAM: ClassVar[str] = "answers"
    event_id: str
    correlation_id: str
    text: str

    @property
    def published_text(self) -> str:
        """What the answer publishes (bus.codec.Published): the run's answer text settles on it."""
        return self.text


def ping(n: int, event_id: str | None = None) -> Ping:
    return Ping(event_id=event_id or uuid.uuid4().hex, correlation_id=f"run-{n}", n=n)


def pong_of(event: Ping) -> list[Pong]:
    return [Pong(event_id=f"{event.event_id}/pong", correlation_id=event.correlation_id, n=event.n)]


def give_up_with(dead: DeadLetter, delivery: Delivery) -> list[Pong]:
    return [Pong(event_id=f"{dead.entry_id}/dead", correlation_id=dead.correlation_id, n=-1)]


@pytest.fixture(params=["server", "cluster"])
def settings(request: pytest.FixtureRequest, settings: BusSettings) -> BusSettings:
    """The shared test settings (conftest.py) with quicker claims and a short lock lease (the
    recovery tests here wait for both); on the session's cluster, with three shards."""
    settings = settings.with_(claim_idle_ms=300, claim_interval_s=0.1, lock_lease_ms=600)
    if request.param == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        settings = settings.with_(redis_url=cluster.url, shards=3)
    return settings


@pytest.fixture
async def redis(settings: BusSettings) -> AsyncIterator[RedisClient]:
    client = await connect(settings, consumers=4)
    yield client
    await client.aclose()


class Running:
    """A BusWorker running one route in the background of a test."""

    def __init__(self, redis: RedisClient, settings: BusSettings, route: Route) -> None:
        self.worker = BusWorker(redis, settings)
        self.worker.add([route])
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> BusWorker:
        await self.worker.start()
        self.task = asyncio.create_task(self.worker.run())
        return self.worker

    async def __aexit__(self, *exc: object) -> None:
        self.worker.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)


def route(
    handle: Callable,
    give_up: Callable = give_up_with,
    types: tuple = (Ping,),
    records: Callable | None = None,
) -> Route:
    return Route("in", "t", {t.__name__: t for t in types}, handle, give_up, records)


@contextlib.asynccontextmanager
async def flushing(redis: RedisClient, settings: BusSettings) -> AsyncIterator[BusWorker]:
    """A worker whose committer flushes until the block ends (commits made by hand)."""
    worker = BusWorker(redis, settings)
    flusher = asyncio.create_task(worker.committer.run())
    try:
        yield worker
    finally:
        worker.committer.close()
        await flusher


async def publish(redis: RedisClient, settings: BusSettings, *events: BaseModel) -> None:
    for event in events:
        await redis.xadd(
            keys_of(settings).stream_of(event.STREAM, event.correlation_id), encode(event)
        )


def keys_of(settings: BusSettings) -> Keys:
    return Keys(settings.prefix, settings.shards)


async def entries(redis: RedisClient, settings: BusSettings, name: str) -> list:
    """The entries of stream `name` in every shard, shard by shard."""
    found = []
    for key in keys_of(settings).streams(name):
        found += await redis.xrange(key)
    return found


async def xlen(redis: RedisClient, settings: BusSettings, name: str) -> int:
    return sum([await redis.xlen(key) for key in keys_of(settings).streams(name)])


async def wait_for_len(
    redis: RedisClient, settings: BusSettings, name: str, n: int, timeout: float = 10.0
) -> list:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        found = await entries(redis, settings, name)
        if len(found) >= n:
            return found
        await asyncio.sleep(0.02)
    have = len(await entries(redis, settings, name))
    raise AssertionError(f"{name} has {have} entries, wanted {n}")


async def ensure_groups(redis: RedisClient, settings: BusSettings) -> None:
    for key in keys_of(settings).streams("in"):
        await redis.xgroup_create(key, "phase-t", id="0", mkstream=True)


async def pending_count(redis: RedisClient, settings: BusSettings) -> int:
    return sum(
        [
            (await redis.xpending(key, "phase-t"))["pending"]
            for key in keys_of(settings).streams("in")
        ]
    )


async def _no_pending(redis: RedisClient, settings: BusSettings) -> bool:
    return await pending_count(redis, settings) == 0


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0) -> None:
    """Wait until `check()` holds (it may be async); fail the test if it never does."""
    for _ in range(int(timeout / 0.05)):
        outcome = check()
        if await outcome if inspect.isawaitable(outcome) else outcome:
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"still not true after {timeout:g} s: {check}")


class Held:
    """A handler that records each event and holds it until released."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.release = asyncio.Event()

    async def __call__(self, event: Ping, delivery: Delivery) -> list[Pong]:
        self.calls.append(event.n)
        await self.release.wait()
        return pong_of(event)


async def test_every_event_handled_once_and_acked(
    redis: RedisClient, settings: BusSettings
) -> None:
    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await publish(redis, settings, *(ping(i) for i in range(250)))
        out = await wait_for_len(redis, settings, "out", 250)
        await asyncio.sleep(0.2)
    assert sorted(int(f[b"cid"].split(b"-")[1]) for _, f in out) == list(range(250))
    assert await pending_count(redis, settings) == 0


async def test_duplicate_event_id_is_handled_once(
    redis: RedisClient, settings: BusSettings
) -> None:
    calls: list[int] = []

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        calls.append(event.n)
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await publish(redis, settings, ping(1, "same"))
        await wait_for_len(redis, settings, "out", 1)
        await publish(redis, settings, ping(1, "same"), ping(2))
        await wait_for_len(redis, settings, "out", 2)
        await asyncio.sleep(0.3)
    assert calls == [1, 2]
    assert await xlen(redis, settings, "out") == 2
    assert await pending_count(redis, settings) == 0


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"type": "Ping", "cid": "run-9", "body": "not json"}, "does not validate"),
        ({"type": "Ping", "cid": "run-9", "body": '{"event_id": "x"}'}, "does not validate"),
        ({"type": "Unknown", "cid": "run-9", "body": "{}"}, "not one this consumer accepts"),
        ({"cid": "run-9"}, "not one this consumer accepts"),
        ({"type": "Ping", "cid": "run-9", "body": "x" * 5000}, "exceeds the limit"),
    ],
)
async def test_poison_entries_go_to_dead_letters_at_once(
    redis: RedisClient, settings: BusSettings, fields: dict, reason: str
) -> None:
    settings = settings.with_(max_event_bytes=4000)
    handled: list[int] = []

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        handled.append(event.n)
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await redis.xadd(keys_of(settings).stream_of("in", "run-9"), fields)
        await publish(redis, settings, ping(1))
        dead = await wait_for_len(redis, settings, "dead-letter", 1)
        out = await wait_for_len(redis, settings, "out", 2)
    record = dead[0][1]
    assert reason in record[b"reason"].decode()
    assert record[b"attempts"] == b"1"
    assert record[b"source_stream"] == b"in"
    assert handled == [1], "the worker keeps serving after a poison entry"
    # give_up was told the run (cid) of the undecodable entry so it could carry it on.
    assert {f[b"cid"] for _, f in out} == {b"run-1", b"run-9"}
    assert await pending_count(redis, settings) == 0


async def test_failing_handler_is_retried_then_dead_lettered(
    redis: RedisClient, settings: BusSettings
) -> None:
    attempts: list[int] = []

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        attempts.append(event.n)
        if event.n == 1:
            raise RuntimeError("always fails")
        if attempts.count(2) < 2:
            raise RuntimeError("fails once")
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await publish(redis, settings, ping(1), ping(2))
        dead = await wait_for_len(redis, settings, "dead-letter", 1)
        out = await wait_for_len(redis, settings, "out", 2)
    assert attempts.count(1) == settings.handler_attempts
    assert attempts.count(2) == 2
    assert b"always fails" in dead[0][1][b"reason"]
    assert sorted(f[b"body"].count(b'"n":-1') for _, f in out) == [0, 1]


async def test_dead_consumers_entries_are_claimed(
    redis: RedisClient, settings: BusSettings
) -> None:
    await ensure_groups(redis, settings)
    await publish(redis, settings, ping(1), ping(2))
    # A consumer reads both and dies without acking.
    for key in keys_of(settings).streams("in"):
        await redis.xreadgroup("phase-t", "dead-worker", {key: ">"}, count=10)
    assert await pending_count(redis, settings) == 2

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        out = await wait_for_len(redis, settings, "out", 2)
        await asyncio.sleep(0.2)
    assert len(out) == 2
    assert await pending_count(redis, settings) == 0


async def kill(running: Running) -> None:
    """As SIGKILL would leave it: no heartbeat, no commit, its entries pending, its locks held."""
    assert running.task is not None
    in_flight = {t for c in running.worker.consumers for t in c._in_flight.values()}
    running.task.cancel()
    for task in in_flight:
        task.cancel()
    await asyncio.gather(running.task, *in_flight, return_exceptions=True)


async def hang_until_killed(
    redis: RedisClient, settings: BusSettings, name: str, started: list
) -> None:
    """Run a consumer named `name` until its handler has the event, then kill it."""

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        started.append(name)
        await asyncio.Event().wait()
        return []

    running = Running(redis, settings.with_(consumer_name=name), route(handle))
    await running.__aenter__()
    count = len(started)
    await eventually(lambda: len(started) > count)
    await kill(running)


async def test_entry_that_keeps_killing_workers_goes_to_dead_letters(
    redis: RedisClient, settings: BusSettings
) -> None:
    settings = settings.with_(lock_lease_ms=30_000)  # as users run it: lease > claim idle
    await publish(redis, settings, ping(7))
    started: list[str] = []
    for attempt in range(settings.max_deliveries):
        await hang_until_killed(redis, settings, f"dying-{attempt}", started)
    assert len(started) == settings.max_deliveries  # each took over from the one before

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        raise AssertionError("a poison entry must not be handled again")

    async with Running(redis, settings, route(handle)):
        dead = await wait_for_len(redis, settings, "dead-letter", 1)
    assert b"attempts were cut short" in dead[0][1][b"reason"]
    assert int(dead[0][1][b"attempts"]) == settings.max_deliveries


async def test_a_dead_workers_lock_is_taken_over_at_once(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Claim idle 300 ms, lease 30 s: the entry is redone now, not after the lease, and the
    claims that came before do not count as attempts."""
    settings = settings.with_(lock_lease_ms=30_000)
    await publish(redis, settings, ping(1))
    started: list[str] = []
    await hang_until_killed(redis, settings, "dead-worker", started)

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        out = await wait_for_len(redis, settings, "out", 1, timeout=5)
    assert out[0][1][b"body"].count(b'"n":1') == 1
    assert await xlen(redis, settings, "dead-letter") == 0
    assert await pending_count(redis, settings) == 0


async def test_a_handler_is_told_whether_its_event_may_have_been_handled_before(
    redis: RedisClient, settings: BusSettings
) -> None:
    """The delivery a handler is given says so (its memo is read only then): not on a first
    delivery; yes on a retry in the same process, and on an entry claimed from a consumer that
    went silent with it."""
    told: list[tuple[int, bool]] = []

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        told.append((event.n, delivery.redelivered))
        if told == [(1, False)]:
            raise RuntimeError("the first attempt fails")
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await publish(redis, settings, ping(1))
        await wait_for_len(redis, settings, "out", 1)
    assert told == [(1, False), (1, True)]

    told.clear()
    await publish(redis, settings, ping(2))
    await hang_until_killed(redis, settings, "dead-worker", [])
    async with Running(redis, settings, route(handle)):
        await wait_for_len(redis, settings, "out", 2)
    assert told == [(2, True)]


async def test_claims_of_a_busy_entry_spend_no_attempts(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A duplicate entry whose event a live consumer is handling is claimed again and again
    while it waits; none of those claims is an attempt, so it is not dead-lettered."""
    settings = settings.with_(max_deliveries=1)
    slow = Held()

    event = ping(3)
    holder = settings.with_(concurrency=1)  # busy with the first copy, it reads no other
    other = settings.with_(consumer_name=f"{settings.consumer_name}-2")
    async with Running(redis, holder, route(slow)), Running(redis, other, route(slow)):
        await publish(redis, settings, event)
        await eventually(lambda: slow.calls)
        await publish(redis, settings, event)  # the same event again: a duplicate entry
        await asyncio.sleep(2.0)  # about seven claim-idle periods
        slow.release.set()
        await wait_for_len(redis, settings, "out", 1)
        await eventually(lambda: _no_pending(redis, settings))
    assert slow.calls == [3]
    assert await xlen(redis, settings, "dead-letter") == 0
    assert await pending_count(redis, settings) == 0


async def test_a_copy_of_an_event_in_hand_waits_for_it_and_is_not_taken_over(
    redis: RedisClient, settings: BusSettings
) -> None:
    """The consumer handling an event reads a duplicate entry of it: the duplicate stays in
    flight, heartbeated, until the handling ends, so the other consumer never claims it and
    takes the lock over; it is then acked as done. The event is handled once."""
    slow = Held()
    event = ping(4)
    other = settings.with_(consumer_name=f"{settings.consumer_name}-2")
    async with Running(redis, settings, route(slow)) as holder:
        await publish(redis, settings, event)
        await eventually(lambda: slow.calls)
        await publish(redis, settings, event)  # the same event again: a duplicate entry
        await eventually(lambda: holder.in_flight == 2)  # the holder has read the copy
        async with Running(redis, other, route(slow)):
            await asyncio.sleep(1.5)  # five claim-idle periods
            slow.release.set()
            await wait_for_len(redis, settings, "out", 1)
            await eventually(lambda: _no_pending(redis, settings))
    assert slow.calls == [4]
    assert await xlen(redis, settings, "out") == 1
    assert await xlen(redis, settings, "dead-letter") == 0


async def test_slow_handler_is_not_taken_over(redis: RedisClient, settings: BusSettings) -> None:
    """The heartbeat keeps a live consumer's long call from looking like a dead worker's."""
    calls: list[str] = []

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        calls.append(event.event_id)
        await asyncio.sleep(1.5)  # five claim-idle periods
        return pong_of(event)

    second = settings.with_(consumer_name="other")
    async with Running(redis, settings, route(handle)), Running(redis, second, route(handle)):
        await publish(redis, settings, ping(1))
        await wait_for_len(redis, settings, "out", 1)
        await asyncio.sleep(0.5)
    assert len(calls) == 1
    assert await xlen(redis, settings, "out") == 1


async def test_group_recreated_after_redis_loses_the_stream(
    redis: RedisClient, settings: BusSettings
) -> None:
    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await publish(redis, settings, ping(1))
        await wait_for_len(redis, settings, "out", 1)
        for key in keys_of(settings).streams("in"):  # as if Redis restarted empty
            await redis.delete(key)
        await asyncio.sleep(0.3)
        await publish(redis, settings, ping(2))
        await wait_for_len(redis, settings, "out", 2)


async def test_answers_are_published_once_per_correlation_id(
    redis: RedisClient, settings: BusSettings
) -> None:
    async with flushing(redis, settings) as worker:
        keys = keys_of(settings)
        shard = keys.shard_of("run-1")
        source = keys.stream("in", shard)
        await ensure_groups(redis, settings)
        first = Answer(event_id="a1", correlation_id="run-1", text="first")
        second = Answer(event_id="a2", correlation_id="run-1", text="second")
        for answer in (first, second):
            await worker.committer.commit(
                Commit(shard, source, "phase-t", b"0-1", outputs=[answer])
            )
    answers = await entries(redis, settings, "answers")
    assert len(answers) == 1
    assert b"first" in answers[0][1][b"body"]
    stored = await redis.get(keys_of(settings).answer("run-1"))
    assert stored.startswith(PACKED) and b"first" in unpack(stored)
    assert unpack(stored) == answers[0][1][b"body"]
    assert 0 < await redis.ttl(keys_of(settings).answer("run-1")) <= settings.answer_ttl_s


async def test_a_runs_history_expires_with_its_answer(
    redis: RedisClient, settings: BusSettings
) -> None:
    """The answer's commit sets the run's hash to expire with the answer, however long ago
    its last record was written."""
    async with flushing(redis, settings) as worker:
        keys = keys_of(settings)
        history_key = keys.run_records("run-12")
        await redis.hset(history_key, "pass:1", b"kept")
        await redis.expire(history_key, 60)  # written long ago
        shard = keys.shard_of("run-12")
        answer = Answer(event_id="a12", correlation_id="run-12", text="done")
        commit = Commit(shard, keys.stream("in", shard), "phase-t", b"0-1", outputs=[answer])
        await worker.committer.commit(commit)
    assert settings.answer_ttl_s - 60 < await redis.ttl(history_key) <= settings.answer_ttl_s


async def test_an_entry_in_another_shard_than_its_id_picks_keeps_its_run_there(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Its outputs go to the shard it was read from: one commit, one slot (on a cluster a
    commit spanning two would be refused for good and hold up every later one)."""
    settings = settings.with_(shards=3)  # on one server too: shards are key names there
    keys = keys_of(settings)
    stray = next(ping(n) for n in range(100) if keys.shard_of(f"run-{n}") != 0)

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await redis.xadd(keys.stream("in", 0), encode(stray))
        await publish(redis, settings, ping(1000))
        out = await wait_for_len(redis, settings, "out", 2)
    assert len(await redis.xrange(keys.stream("out", 0))) >= 1
    assert {f[b"cid"] for _, f in out} == {stray.correlation_id.encode(), b"run-1000"}


async def test_no_shard_is_starved_when_the_slots_are_few(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Four slots over three shards, and work only in the last shard: the readers of the two
    empty shards, cycling through their blocking reads, once kept every slot between them (a
    reader released its slots and took them back before the waiting shard ran), and the work
    waited for good. Each shard now reads into a share of its own."""
    settings = settings.with_(shards=3, concurrency=4, block_ms=50)
    keys = keys_of(settings)
    last = [ping(n) for n in range(300) if keys.shard_of(f"run-{n}") == 2][:6]

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await asyncio.sleep(0.3)  # the empty shards' readers are cycling
        await publish(redis, settings, *last)
        out = await wait_for_len(redis, settings, "out", len(last))
    assert sorted(f[b"cid"] for _, f in out) == sorted(e.correlation_id.encode() for e in last)


async def test_a_commit_sent_again_publishes_once(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A cluster pipeline whose node failed is sent again whole, commits Redis took included:
    a commit whose lock already says done only acks."""
    async with flushing(redis, settings) as worker:
        keys = keys_of(settings)
        event = ping(5)
        shard = keys.shard_of(event.correlation_id)
        lock = keys.lock(shard, "phase-t", event.event_id)
        for _ in range(2):
            commit = Commit(
                shard, keys.stream("in", shard), "phase-t", b"0-1", pong_of(event), lock
            )
            await worker.committer.commit(commit)
    assert await xlen(redis, settings, "out") == 1


def with_record(event: Ping, value: bytes = b"kept") -> list[RunRecord | Pong]:
    return [RunRecord(event.correlation_id, "pass:1", value), *pong_of(event)]


async def test_a_hop_writes_its_run_records_with_its_events(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A handler's records land in its run's hash, expiring with the answer, readable by
    name; a record that is not there reads as None."""

    async def handle(event: Ping, delivery: Delivery) -> list[RunRecord | Pong]:
        return with_record(event)

    async with Running(redis, settings, route(handle)) as worker:
        await publish(redis, settings, ping(7))
        await wait_for_len(redis, settings, "out", 1)
        assert await RedisRunRecords(worker.redis, worker.keys).read(
            "run-7", ["pass:1", "pass:2"]
        ) == [b"kept", None]
        stored = await redis.hget(keys_of(settings).run_records("run-7"), "pass:1")
        assert stored.startswith(PACKED), "records are stored compressed (bus.compact)"
        await redis.hset(keys_of(settings).run_records("run-7"), "pass:2", b'{"old": 1}')
        assert await RedisRunRecords(worker.redis, worker.keys).read("run-7", ["pass:2"]) == [
            b'{"old": 1}'
        ], "a record an earlier version stored uncompressed reads as it is"
    ttl = await redis.ttl(keys_of(settings).run_records("run-7"))
    assert settings.answer_ttl_s - 60 < ttl <= settings.answer_ttl_s


async def test_a_commit_sent_again_writes_its_records_once(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A commit whose event is done writes nothing, records included."""
    async with flushing(redis, settings) as worker:
        keys = keys_of(settings)
        event = ping(8)
        shard = keys.shard_of(event.correlation_id)
        lock = keys.lock(shard, "phase-t", event.event_id)
        for value in (b"first", b"second"):
            outputs = with_record(event, value)
            commit = Commit(shard, keys.stream("in", shard), "phase-t", b"0-1", outputs, lock)
            await worker.committer.commit(commit)
    assert await RedisRunRecords(worker.redis, worker.keys).read("run-8", ["pass:1"]) == [b"first"]
    assert await xlen(redis, settings, "out") == 1


async def test_a_lock_this_consumer_left_held_is_taken_at_once(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A locking round trip that failed half-way leaves the lock this consumer's: found held,
    its holder is read, and the event is handled now, not after the lease (nor after a
    claim: both are a minute away)."""
    settings = settings.with_(lock_lease_ms=60_000, claim_idle_ms=60_000)
    event = ping(11)
    keys = keys_of(settings)
    lock = keys.lock(keys.shard_of(event.correlation_id), "phase-t", event.event_id)
    await redis.set(lock, settings.consumer_name, px=60_000)

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    async with Running(redis, settings, route(handle)):
        await publish(redis, settings, event)
        await wait_for_len(redis, settings, "out", 1, timeout=5)
    assert await redis.get(lock) == LockState.DONE.value.encode()


async def test_a_lock_round_trip_cut_after_the_first_part_leaves_nothing_in_hand(
    redis: RedisClient, settings: BusSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round trip that reads who holds a lock found taken fails once: the lock taken in
    the first part is let go in hand, so the retry takes it again and the event is handled
    (it was left in hand, unhandled, its lock extended for ever)."""
    settings = settings.with_(lock_lease_ms=60_000, claim_idle_ms=60_000)
    free, held = ping(13), ping(14)
    keys = keys_of(settings)
    other = keys.lock(keys.shard_of(held.correlation_id), "phase-t", held.event_id)
    await redis.set(other, b"another-consumer", px=60_000)
    holders, failed = Locks._holders, []

    async def cut_once(self: Locks, *args: object) -> list:
        if not failed:
            failed.append(True)
            raise RedisConnectionError("connection reset")
        return await holders(self, *args)

    monkeypatch.setattr(Locks, "_holders", cut_once)

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        return pong_of(event)

    await ensure_groups(redis, settings)
    await publish(redis, settings, free, held)  # one batch: a free lock and a held one
    async with Running(redis, settings, route(handle)):
        out = await wait_for_len(redis, settings, "out", 1, timeout=5)
    assert failed and [f[b"cid"] for _, f in out] == [b"run-13"]


async def test_the_records_a_route_names_are_read_with_the_lock(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A handler that needs its run's records finds them read already, in the round trip
    that locked its event; one the route did not name is read when asked."""
    keys = keys_of(settings)
    await redis.hset(keys.run_records("run-10"), mapping={"pass:1": b"one", "pass:2": b"two"})
    seen: list[dict] = []

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        seen.append(dict(delivery.records))
        assert await RedisRunRecords(running.worker.redis, running.worker.keys).read(
            "run-10", ["pass:2"]
        ) == [b"two"]
        return pong_of(event)

    running = Running(redis, settings, route(handle, records=lambda event: ["pass:1"]))
    async with running:
        await publish(redis, settings, ping(10))
        await wait_for_len(redis, settings, "out", 1)
    assert seen == [{("run-10", "pass:1"): b"one"}]


async def test_records_are_found_in_the_shard_an_entry_kept_its_run_in(
    redis: RedisClient, settings: BusSettings
) -> None:
    """An entry put in another shard than its id picks writes its records there (one slot per
    commit), and reading them finds them there."""
    settings = settings.with_(shards=3)
    keys = keys_of(settings)
    stray = next(ping(n) for n in range(100) if keys.shard_of(f"run-{n}") != 0)

    async def handle(event: Ping, delivery: Delivery) -> list[RunRecord | Pong]:
        return with_record(event)

    async with Running(redis, settings, route(handle)) as worker:
        await redis.xadd(keys.stream("in", 0), encode(stray))
        await wait_for_len(redis, settings, "out", 1)
        assert await redis.exists(keys.run_records(stray.correlation_id, 0)) == 1
        assert await RedisRunRecords(worker.redis, worker.keys).read(
            stray.correlation_id, ["pass:1"]
        ) == [b"kept"]


async def test_stop_lets_in_flight_events_finish(redis: RedisClient, settings: BusSettings) -> None:
    started = asyncio.Event()

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        started.set()
        await asyncio.sleep(0.5)
        return pong_of(event)

    running = Running(redis, settings, route(handle))
    await running.__aenter__()
    await publish(redis, settings, ping(1))
    await asyncio.wait_for(started.wait(), 5)
    await running.__aexit__()
    assert await xlen(redis, settings, "out") == 1
    assert await pending_count(redis, settings) == 0


async def test_a_process_with_another_shard_count_is_refused(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Workers and gateways must split streams alike; the first records how (bus.layout)."""
    await BusWorker(redis, settings).start()
    await BusWorker(redis, settings).start()  # the same count: welcome
    other = settings.with_(shards=settings.shards + 1)
    with pytest.raises(SettingsError, match=f"but the deployment .* uses {settings.shards} "):
        await BusWorker(redis, other).start()


async def test_consumer_recover_once_reports_nothing_when_idle(
    redis: RedisClient, settings: BusSettings
) -> None:
    worker = BusWorker(redis, settings)
    consumer = Consumer(
        redis, route(lambda e, delivery: pong_of(e)), settings, worker.committer, worker.keys
    )
    await consumer.ensure_group()
    assert await consumer.recover_once() == 0


@contextlib.asynccontextmanager
async def out_of_memory(redis: RedisClient) -> AsyncIterator[None]:
    """Redis refusing every write as it does past `maxmemory` (with noeviction, never evicting);
    on a cluster, every master."""
    every = {"target_nodes": RedisCluster.PRIMARIES} if is_cluster(redis) else {}
    config = await redis.config_get("maxmemory*", **every)
    if is_cluster(redis):  # one reply per node; the cluster's nodes are configured alike
        config = next(iter(config.values()))
    if config.get("maxmemory-policy") != "noeviction":
        pytest.skip("the test Redis evicts keys; filling it would lose other data")
    await redis.config_set("maxmemory", 1, **every)
    try:
        yield
    finally:
        await redis.config_set("maxmemory", config["maxmemory"], **every)


async def test_work_waits_while_redis_refuses_writes(
    redis: RedisClient, settings: BusSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """Out of memory for seven claim-idle periods: handlers finish and their commits wait,
    new entries are not read or claimed, nothing is dead-lettered or handled twice; the worker
    says once that Redis refuses writes and once that it takes them again."""
    handle = Held()
    await publish(redis, settings, ping(1), ping(2))
    with caplog.at_level(logging.INFO, logger="aeon.bus"):
        async with Running(redis, settings, route(handle)):
            await eventually(lambda: len(handle.calls) == 2)
            async with out_of_memory(redis):
                handle.release.set()
                await asyncio.sleep(2.0)
                assert await xlen(redis, settings, "out") == 0
                assert await xlen(redis, settings, "dead-letter") == 0
            await publish(redis, settings, ping(3))
            await wait_for_len(redis, settings, "out", 3)
    assert sorted(handle.calls) == [1, 2, 3]
    assert await xlen(redis, settings, "dead-letter") == 0
    assert await pending_count(redis, settings) == 0
    said = [r.getMessage() for r in caplog.records]
    assert sum("Redis refuses writes" in line for line in said) == 1, said
    assert sum("accepts writes again" in line for line in said) == 1, said


async def test_an_ack_never_goes_through_without_its_outputs(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Out of memory, Redis refuses XADD and SET but takes XACK. A worker gone while its
    commit waits for memory (no grace to retry in) leaves the entry pending, not acked without
    its outputs; another worker then does the work."""
    settings = settings.with_(shutdown_grace_s=0)
    handle = Held()
    await publish(redis, settings, ping(1))
    running = Running(redis, settings, route(handle))
    await running.__aenter__()
    await eventually(lambda: handle.calls)
    async with out_of_memory(redis):
        handle.release.set()
        await eventually(lambda: not running.worker.committer.gate.is_open)  # it was refused
        await kill(running)
        assert await pending_count(redis, settings) == 1
    assert await xlen(redis, settings, "out") == 0
    other = settings.with_(consumer_name=f"{settings.consumer_name}-2")
    async with Running(redis, other, route(handle)):
        out = await wait_for_len(redis, settings, "out", 1)
    assert out[0][1][b"cid"] == b"run-1"


async def test_no_event_without_its_records_when_redis_refuses_writes(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Out of memory, a worker gone before its retry has written neither the records nor the
    event; the worker that redoes the hop writes both."""
    settings = settings.with_(shutdown_grace_s=0)
    started, release = asyncio.Event(), asyncio.Event()

    async def handle(event: Ping, delivery: Delivery) -> list[RunRecord | Pong]:
        started.set()
        await release.wait()
        return with_record(event)

    await publish(redis, settings, ping(9))
    running = Running(redis, settings, route(handle))
    await running.__aenter__()
    await asyncio.wait_for(started.wait(), 10)
    async with out_of_memory(redis):
        release.set()
        await eventually(lambda: not running.worker.committer.gate.is_open)
        await kill(running)
        assert await xlen(redis, settings, "out") == 0
        assert await RedisRunRecords(running.worker.redis, running.worker.keys).read(
            "run-9", ["pass:1"]
        ) == [None]
    other = settings.with_(consumer_name=f"{settings.consumer_name}-2")
    async with Running(redis, other, route(handle)) as worker:
        await wait_for_len(redis, settings, "out", 1)
        assert await RedisRunRecords(worker.redis, worker.keys).read("run-9", ["pass:1"]) == [
            b"kept"
        ]


async def test_entries_wait_unlocked_while_redis_refuses_writes(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Entries read or claimed while Redis refuses writes cannot be locked: they stay this
    worker's (heartbeat) and wait; none of it counts as an attempt."""
    settings = settings.with_(max_deliveries=1)
    calls: list[int] = []

    async def handle(event: Ping, delivery: Delivery) -> list[Pong]:
        calls.append(event.n)
        return pong_of(event)

    await ensure_groups(redis, settings)
    await publish(redis, settings, ping(1), ping(2))
    # A worker (re)starting now finds its group and waits with the others.
    async with out_of_memory(redis), Running(redis, settings, route(handle)):
        await asyncio.sleep(2.0)  # about seven claim-idle periods
        assert calls == []
    async with Running(redis, settings, route(handle)):
        await wait_for_len(redis, settings, "out", 2)
    assert sorted(calls) == [1, 2]
    assert await xlen(redis, settings, "dead-letter") == 0


async def test_streams_are_trimmed_to_what_a_group_still_needs(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Acknowledged entries older than AEON_STREAM_KEEP_S leave; pending and undelivered ones
    stay, however old; the answers stream, which no group reads, is trimmed by age alone; a
    stream whose group does not exist yet is left whole (bus.retention)."""
    settings = settings.with_(stream_keep_s=1)
    keys = keys_of(settings)
    stream, answers, orphan = keys.stream("in", 0), keys.stream("answers", 0), keys.stream("x", 0)
    ids = [await redis.xadd(stream, {"n": str(n)}) for n in range(300)]
    for n in range(300):
        await redis.xadd(answers, {"n": str(n)})
        await redis.xadd(orphan, {"n": str(n)})
    async with Running(redis, settings, route(pong_of)) as worker:
        worker.stop()  # the group exists; nothing reads it but this test
    await redis.xreadgroup("phase-t", "c1", {stream: ">"}, count=200)
    await redis.xack(stream, "phase-t", *ids[:150])
    await asyncio.sleep(1.1)
    removed = await worker.trim_once()
    left = [entry_id for entry_id, _ in await redis.xrange(stream)]
    assert set(ids[150:]) <= set(left), "a pending or undelivered entry was trimmed"
    assert len(left) <= 200, "acknowledged entries were kept"
    assert await redis.xlen(answers) <= 100, "old answers-stream entries were kept"
    assert removed == (300 - len(left)) + (300 - await redis.xlen(answers))
    seconds, _ = await redis.time()
    assert await trim(redis, orphan, keep_ms=0, now_ms=(seconds + 60) * 1000) == 0
    assert await redis.xlen(orphan) == 300
    summary = await redis.xpending(stream, "phase-t")
    assert summary["pending"] == 50 and summary["min"] == ids[150]
