"""The run store (runs/store.py): a run's state found with one read. The commit script sets a
run's head with each progress event it adds (bus/commit.py), so a reader that never saw the run
gets its head, its answer and its webhook's outcome in one round trip, and its newest event in
one more: no scan of the shard's streams. On one server and on a 3-master cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel
from redis.exceptions import ResponseError

from aeonloop.bus.codec import encode
from aeonloop.bus.commit import Commit
from aeonloop.bus.connection import RedisClient, connect
from aeonloop.bus.keys import WEBHOOK_OUTCOMES, Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker
from aeonloop.gateway.client import AeonClient, listing
from aeonloop.gateway.http.run_feed import RunFeed
from aeonloop.phases.events import LoopExited, RequestSubmitted
from aeonloop.phases.models import ExitReason
from aeonloop.runs.store import RunHead, RunStore
from aeonloop.testing import AeonTestStack

#: Entries of other runs added beside the run read back.
OTHERS = 300


class Stepped(BaseModel):
    """A progress event: it moves its run's head."""

    STREAM: ClassVar[str] = "stepped"
    event_id: str
    correlation_id: str


class Told(Stepped):
    """An event beside the run's state (a webhook's outcome): it leaves the head where it is."""

    STREAM: ClassVar[str] = WEBHOOK_OUTCOMES


@pytest.fixture(params=["server", "cluster"])
def settings(request: pytest.FixtureRequest, settings: BusSettings) -> BusSettings:
    if request.param == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        settings = settings.with_(redis_url=cluster.url, shards=3)
    return settings


@pytest.fixture
async def redis(settings: BusSettings) -> AsyncIterator[RedisClient]:
    client = await connect(settings, consumers=4)
    yield client
    await client.aclose()


async def _commit(redis: RedisClient, settings: BusSettings, *outputs: BaseModel) -> None:
    """Commit `outputs` of one run as a worker's hop does (bus.commit)."""
    worker = BusWorker(redis, settings)
    keys = worker.keys
    shard = keys.shard_of(outputs[0].correlation_id)  # type: ignore[attr-defined]
    source = keys.stream("in", shard)
    with contextlib.suppress(ResponseError):  # made by an earlier commit (BUSYGROUP)
        await redis.xgroup_create(source, "phase-t", id="0", mkstream=True)
    flusher = asyncio.create_task(worker.committer.run())
    try:
        await worker.committer.commit(Commit(shard, source, "phase-t", b"0-1", list(outputs)))
    finally:
        worker.committer.close()
        await flusher


async def test_each_progress_event_moves_its_runs_head_and_nothing_else_does(
    redis: RedisClient, settings: BusSettings
) -> None:
    keys = Keys(settings.prefix, settings.shards)
    store = RunStore(redis, keys, settings)
    assert (await store.get("run-1")).head is None  # nothing committed yet

    await _commit(redis, settings, Stepped(event_id="e1", correlation_id="run-1"))
    first = (await store.get("run-1")).head
    assert first is not None and (first.kind, first.stream) == ("Stepped", Stepped.STREAM)
    entry = await store.at_head("run-1", first)
    assert entry is not None and entry[0].decode() == first.entry_id
    assert entry[1][b"cid"] == b"run-1" and entry[1][b"type"] == b"Stepped"

    await _commit(redis, settings, Told(event_id="e2", correlation_id="run-1"))
    assert (await store.get("run-1")).head == first

    await _commit(redis, settings, Stepped(event_id="e3", correlation_id="run-1"))
    newer = (await store.get("run-1")).head
    assert newer is not None and newer != first and newer.kind == "Stepped"
    # Kept as long as the run's answer and records, under the run's hash tag.
    assert 0 < await redis.ttl(keys.run_records("run-1")) <= settings.answer_ttl_s


async def test_a_submitted_request_is_its_runs_head_until_a_hop_moves_it(
    redis: RedisClient, settings: BusSettings
) -> None:
    """The client adds a request and sets its run's head in one script (no worker runs here),
    and a request sent again (after a failover) never moves back a head a hop has moved."""
    keys = Keys(settings.prefix, settings.shards)
    store = RunStore(redis, keys, settings)
    async with AeonClient(settings=settings, redis=redis) as client:
        cid = await client.submit("Explain tides", timeout=60)
    head = (await store.get(cid)).head
    assert head is not None and head.kind == RequestSubmitted.__name__
    entry = await store.at_head(cid, head)
    assert entry is not None and entry[1][b"cid"] == cid.encode()

    await _commit(redis, settings, Stepped(event_id="e1", correlation_id=cid))
    moved = (await store.get(cid)).head
    fields = {"cid": cid.encode(), "type": b"RequestSubmitted", "body": b"{}"}
    await redis.execute_command(
        *store.submission(cid, RequestSubmitted.__name__, RequestSubmitted.STREAM, fields)
    )
    assert moved is not None and moved.kind == "Stepped"
    assert (await store.get(cid)).head == moved


def test_a_head_this_version_cannot_read_is_none() -> None:
    assert RunHead.parse(b"LoopExited loop-exited 1-0") == RunHead(
        "LoopExited", "loop-exited", "1-0"
    )
    assert RunHead.parse(b"garbled") is None
    assert RunHead.parse(None) is None


class _Counted:
    """Counts the round trips made through a Redis client (a command, or a pipeline's whole
    batch, is one) and the stream entries its commands read."""

    def __init__(self, redis: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips = 0
        self.entries = 0
        command, pipeline = redis.execute_command, redis.pipeline

        async def counted_command(*args: Any, **kwargs: Any) -> Any:
            self.trips += 1
            reply = await command(*args, **kwargs)
            if args[0] in ("XRANGE", "XREVRANGE"):
                self.entries += len(reply)
            return reply

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = pipeline(*args, **kwargs)
            execute = pipe.execute

            async def counted_execute(*a: Any, **k: Any) -> Any:
                self.trips += 1
                return await execute(*a, **k)

            pipe.execute = counted_execute
            return pipe

        monkeypatch.setattr(redis, "execute_command", counted_command)
        monkeypatch.setattr(redis, "pipeline", counted_pipeline)


async def test_a_gateway_that_never_saw_a_run_reads_it_back_in_three_round_trips(
    redis: RedisClient, settings: BusSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GET /v1/runs/{id}` on a gateway that never saw the run (RunFeed.view): the head, the
    answer and the webhook's outcome (one pipeline), the newest event (one XRANGE of one
    entry), and its passes' history (one HMGET), however many other runs' entries its shard's
    streams hold at the same moment (a scan by the answer's time read up to 1,000 of them)."""
    async with AeonTestStack(settings=settings) as stack:
        cid = await stack.client.submit("Explain tides", timeout=60)
        await stack.client.wait(cid, 60)
        keys = Keys(stack.settings.prefix, stack.settings.shards)
    store = RunStore(redis, keys, settings)
    head = (await store.get(cid)).head
    assert head is not None and head.kind == LoopExited.__name__
    pipe = redis.pipeline(transaction=False)
    for _ in range(OTHERS):  # other runs ending at the same moment, in the same stream
        fields = {"cid": "someone-else", "type": LoopExited.__name__, "body": "{}"}
        pipe.xadd(keys.stream_of(LoopExited.STREAM, cid), fields)
    await pipe.execute()

    counted = _Counted(redis, monkeypatch)
    view = await RunFeed(RunStore(redis, keys, settings)).view(cid)
    assert view is not None and isinstance(view.state, LoopExited)
    assert view.answer is not None and view.answer.status == view.state.reason
    assert view.state_at == head.entry_id
    assert counted.trips <= 3, f"{counted.trips} round trips to read one run back"
    assert counted.entries == 1, f"{counted.entries} stream entries read to find one"


async def test_the_run_list_keeps_a_run_as_long_as_its_answer(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Issue 41, finding 8: five minutes after a run, `GET /v1/runs` listed nothing while the
    run's answer was still served: the list read the requests streams, which a worker trims
    AEON_STREAM_KEEP_S after a run. The run list keeps a run with its records, as long as its
    answer (here AEON_ANSWER_KEEP_S of 2 s), and no longer."""
    settings = settings.with_(answer_ttl_s=2)
    keys = Keys(settings.prefix, settings.shards)
    feed = RunFeed(RunStore(redis, keys, settings))
    async with AeonClient(settings=settings, redis=redis) as client:
        cid = await client.submit("Explain tides " + "at length " * 50, timeout=60)
    await _commit(redis, settings, Stepped(event_id="e1", correlation_id=cid))
    for key in keys.streams(RequestSubmitted.STREAM):  # trimmed, as a worker trims it
        await redis.xtrim(key, maxlen=0)
    listed = await feed.recent(20)
    assert [run.request.correlation_id for run in listed] == [cid]
    assert listed[0].request.request.startswith("Explain tides at length")
    assert len(listed[0].request.request) == 300  # what a list shows, not the whole request
    await asyncio.sleep(2.5)
    assert await feed.recent(20) == []


async def test_a_run_phase_e_has_past_its_deadline_is_not_given_up_on(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Issue 41, finding 3: at 313 s of a 300 s deadline, `GET /v1/runs/{id}` said `no_answer`
    of runs whose Phase E was still checking their answer, and answered them by 434 s.
    `no_answer` is final: a run whose loop has ended is Phase E's, which answers every one it
    is given, so neither the run nor the run list gives it up; a run stuck before Phase E past
    its deadline and grace still is."""
    keys = Keys(settings.prefix, settings.shards)
    feed = RunFeed(RunStore(redis, keys, settings))
    past = datetime.now(UTC) - timedelta(minutes=5)
    first = RequestSubmitted(correlation_id="in-phase-e", request="Explain tides", deadline=past)
    requests = [first]
    requests.append(requests[0].model_copy(update={"correlation_id": "stuck-before-e"}))
    for request in requests:
        command = feed.runs.submission(
            request.correlation_id,
            RequestSubmitted.__name__,
            RequestSubmitted.STREAM,
            encode(request),
            listing(request),
        )
        await redis.execute_command(*command)
    in_e, stuck = requests
    await _commit(redis, settings, in_e.child(LoopExited, reason=ExitReason.DEADLINE_EXCEEDED))

    view = await feed.view(in_e.correlation_id)
    assert view is not None and isinstance(view.state, LoopExited)
    assert view.seconds_to_give_up() is None
    stuck_view = await feed.view(stuck.correlation_id)
    assert stuck_view is not None and (stuck_view.seconds_to_give_up() or 0) < 0
    states = {run.request.correlation_id: run.state() for run in await feed.recent(20)}
    assert states == {in_e.correlation_id: "running", stuck.correlation_id: "no_answer"}
