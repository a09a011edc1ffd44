"""A real FastStream app and Aeon's real workers on one real Redis.

- A request published by FastStream (its own envelope) is answered; a FastStream subscriber on
  the answers stream receives the typed FinalAnswerReady with the request's correlation id in
  FastStream's message context. Through `AeonStreams.submit`, and through a bare
  `broker.publish(...)` with nothing of Aeon's but the stream name. A request's files are kept
  as the run's record; a binary one is refused by `submit` before anything is published.
- A malformed FastStream message is dead-lettered at once with a clear reason, like any poison,
  and its run (named by FastStream's correlation id) is answered, degraded.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import pytest
from faststream import Context
from faststream.redis import RedisBroker
from redis.asyncio import Redis

from aeonloop.bus.compact import unpack
from aeonloop.bus.consumer import Route
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import FILES_RECORD, Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker
from aeonloop.contracts import AttachedFile
from aeonloop.exceptions import BadInput
from aeonloop.gateway.cli.dlq import replay
from aeonloop.gateway.faststream_interop import AeonStreams
from aeonloop.llm.offline import OfflineLLM
from aeonloop.phases.events import FinalAnswerReady, PlanReady, RequestSubmitted
from aeonloop.phases.worker import make_worker


@asynccontextmanager
async def aeon_workers(settings: BusSettings) -> AsyncIterator[Redis]:
    redis = Redis.from_url(settings.redis_url)
    worker = make_worker(redis, settings, OfflineLLM())
    await worker.start()
    running = asyncio.create_task(worker.run())
    try:
        yield redis
    finally:
        worker.stop()
        await asyncio.wait_for(running, 15)
        await redis.aclose()


@asynccontextmanager
async def faststream_app(
    settings: BusSettings,
) -> AsyncIterator[tuple[AeonStreams, dict[str, FinalAnswerReady]]]:
    """A FastStream broker with a typed subscriber on Aeon's answers; what it received."""
    broker = RedisBroker(settings.redis_url)
    aeon = AeonStreams(broker, settings)
    received: dict[str, FinalAnswerReady] = {}

    @aeon.subscriber(FinalAnswerReady)
    async def on_answer(
        event: FinalAnswerReady, correlation_id: str = Context("message.correlation_id")
    ) -> None:
        assert isinstance(event, FinalAnswerReady)
        received[correlation_id] = event

    async with broker:
        await broker.start()
        yield aeon, received


async def until(check, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"still not true after {timeout:g} s")


async def test_a_request_submitted_through_faststream_is_answered_to_a_faststream_subscriber(
    settings: BusSettings,
) -> None:
    async with aeon_workers(settings), faststream_app(settings) as (aeon, received):
        request = RequestSubmitted.new("Explain tides, then summarise them for a child", timeout=30)
        cid = await aeon.submit(request)
        await until(lambda: cid in received)
    answer = received[cid]
    assert answer.correlation_id == cid
    assert answer.result.status == "converged"
    assert "offline model" in answer.result.final_answer.answer_text


async def test_a_request_with_a_file_through_faststream_is_answered_with_the_file_kept(
    settings: BusSettings,
) -> None:
    files = [AttachedFile(path="tides.md", content="High water < 06:12 & low at noon")]
    async with aeon_workers(settings) as redis, faststream_app(settings) as (aeon, received):
        cid = await aeon.submit(RequestSubmitted.new("Explain this table", timeout=30, files=files))
        await until(lambda: cid in received)
        kept = await redis.hget(Keys(settings.prefix).run_records(cid), FILES_RECORD)
    assert received[cid].result.status == "converged"
    assert orjson.loads(unpack(kept)) == [file.model_dump() for file in files]


async def test_a_binary_file_is_refused_by_submit_before_anything_is_published(
    settings: BusSettings,
) -> None:
    files = [AttachedFile(path="logo.png", content="\x89PNG\r\n\x1a\n\x00")]
    request = RequestSubmitted.new("What is in this image?", timeout=30, files=files)
    async with faststream_app(settings) as (aeon, _):
        with pytest.raises(BadInput, match=r"file logo\.png is not text"):
            await aeon.submit(request)
    redis = Redis.from_url(settings.redis_url)
    try:
        assert await redis.xlen(Keys(settings.prefix).stream(RequestSubmitted.STREAM, 0)) == 0
    finally:
        await redis.aclose()


async def test_a_bare_faststream_publish_is_answered_too(settings: BusSettings) -> None:
    """Nothing of Aeon's but the stream name: no type header (the requests stream has one
    type), the correlation id from FastStream's own `correlation_id`."""
    request = RequestSubmitted.new("Explain how a rainbow forms", timeout=30)
    body = request.model_dump(mode="json", exclude={"correlation_id", "event_id"})
    stream = Keys(settings.prefix).stream(RequestSubmitted.STREAM, 0)
    async with aeon_workers(settings), faststream_app(settings) as (aeon, received):
        await aeon.broker.publish(body, stream=stream, correlation_id="from-faststream-1")
        await until(lambda: "from-faststream-1" in received)
    assert received["from-faststream-1"].result.status == "converged"


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        ("not json at all", {}, "the FastStream message's body is not JSON"),
        ({"request": "no deadline"}, {}, "RequestSubmitted does not validate: deadline"),
        ([1, 2], {}, "the FastStream message's body is not a RequestSubmitted object"),
        ({"request": "x"}, {"type": "Unknown"}, "event type 'Unknown' is not one this consumer"),
    ],
)
async def test_a_malformed_faststream_message_is_dead_lettered_with_the_reason(
    settings: BusSettings, body: object, headers: dict[str, str], reason: str
) -> None:
    keys = Keys(settings.prefix)
    async with aeon_workers(settings) as redis, faststream_app(settings) as (aeon, received):
        await aeon.broker.publish(
            body,
            stream=keys.stream(RequestSubmitted.STREAM, 0),
            headers=headers,
            correlation_id="malformed-1",
        )
        await until(lambda: "malformed-1" in received)
        dead = await redis.xrange(keys.dead_letter(0))
    assert received["malformed-1"].result.degraded
    (entry,) = dead
    fields = entry[1]
    assert reason in fields[b"reason"].decode()
    assert fields[b"group"] == b"phase-a"
    assert fields[b"attempts"] == b"1"


async def test_a_subscriber_gets_only_the_types_it_names(settings: BusSettings) -> None:
    """The passes stream carries PlanReady and PassRequested, alike in shape; a subscriber of
    PlanReady gets only PlanReady."""
    broker = RedisBroker(settings.redis_url)
    aeon = AeonStreams(broker, settings)
    seen: list[str] = []

    @aeon.subscriber(PlanReady)
    async def on_plan(event: PlanReady, kind: str = Context("message.headers.type")) -> None:
        seen.append(kind)

    app = faststream_app(settings)
    async with aeon_workers(settings) as redis, app as (client, received), broker:
        await broker.start()
        # The offline model refines once, so the run has a PassRequested as well.
        request = RequestSubmitted.new("Explain tides, then for a child", timeout=30)
        cid = await client.submit(request)
        await until(lambda: cid in received)
        passes = await redis.xlen(Keys(settings.prefix).stream("passes", 0))
    assert received[cid].result.total_passes == 2 and passes >= 2
    assert seen == ["PlanReady"]


async def test_a_faststream_dead_letter_is_replayed_as_published(settings: BusSettings) -> None:
    """Its handler failed: the dead letter keeps the envelope and the event id, so replay
    clears the dedupe mark and the phase handles it again."""
    settings = settings.with_(handler_attempts=1)
    keys = Keys(settings.prefix)
    calls: list[str] = []

    async def handle(event: RequestSubmitted, delivery: Delivery) -> list:
        calls.append(event.correlation_id)
        if len(calls) == 1:
            raise RuntimeError("the first time only")
        return []

    route = Route(
        stream=RequestSubmitted.STREAM,
        group="t",
        types={"RequestSubmitted": RequestSubmitted},
        handle=handle,
        give_up=lambda dead, delivery: [],
    )
    redis = Redis.from_url(settings.redis_url)
    worker = BusWorker(redis, settings)
    worker.add([route])
    await worker.start()
    running = asyncio.create_task(worker.run())
    broker = RedisBroker(settings.redis_url)
    try:
        async with broker:
            await broker.start()
            await AeonStreams(broker, settings).submit(RequestSubmitted.new("x", timeout=30))
            await until(lambda: calls)
            for _ in range(100):
                dead = await redis.xrange(keys.dead_letter(0))
                if dead:
                    break
                await asyncio.sleep(0.05)
            dead_id = dead[0][0].decode()
            args = argparse.Namespace(settings=settings, entry_id=dead_id, shard=None)
            assert await replay(args) == 0
            await until(lambda: len(calls) == 2)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 15)
        await redis.aclose()
    assert calls[0] == calls[1]
