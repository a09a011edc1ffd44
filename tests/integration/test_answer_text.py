"""A run's answer text stream against a real Redis (runs.answer_text): the settlement invariant.

Once a run's answer is published, the deltas after the stream's last reset, joined, are the
FinalAnswer's text, whatever was written before: the published text extending the streamed
one, replacing it, a stream trimmed short, a call cut and made again. Each runs on one server
and on a 3-master cluster with 3 shards (the commit's script and the writes in the run's slot).
Whole runs with the offline model, which writes its answer in chunks, close the file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar

import pytest
from pydantic import BaseModel

from aeonloop.bus.commit import Commit
from aeonloop.bus.connection import RedisClient, connect
from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker
from aeonloop.gateway.http.run_feed import RunFeed, WatchedRun, _text_steps
from aeonloop.gateway.http.run_steps import ANSWERED
from aeonloop.llm.offline import OfflineLLM
from aeonloop.runs import answer_text
from aeonloop.runs.answer_text import (
    DELTA,
    RESET,
    SETTLED,
    RedisAnswerText,
    ResetWhy,
    TextEntry,
    TextPoller,
    since_reset,
)
from aeonloop.runs.store import RunStore
from aeonloop.testing import AeonTestStack


class Answer(BaseModel):
    STREAM: ClassVar[str] = "answers"
    event_id: str
    correlation_id: str
    text: str

    @property
    def published_text(self) -> str:
        return self.text


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


def stream_of(redis: RedisClient, settings: BusSettings, maxlen: int = 10_000) -> RedisAnswerText:
    keys = Keys(settings.prefix, settings.shards)
    # Each piece its own entry (no gathering), so the entries say what each write did;
    # `test_a_sink_gathers_the_pieces_that_come_within_its_window` holds the gathering.
    return RedisAnswerText(redis, keys, maxlen, settings.answer_ttl_s, gather_s=0)


async def publish(redis: RedisClient, settings: BusSettings, cid: str, text: str) -> None:
    """Publish run `cid`'s answer as a worker's commit does (bus.commit)."""
    worker = BusWorker(redis, settings)
    keys = worker.keys
    shard = keys.shard_of(cid)
    source = keys.stream("in", shard)
    await redis.xgroup_create(source, "phase-t", id="0", mkstream=True)
    flusher = asyncio.create_task(worker.committer.run())
    try:
        answer = Answer(event_id=f"{cid}/answer", correlation_id=cid, text=text)
        await worker.committer.commit(Commit(shard, source, "phase-t", b"0-1", outputs=[answer]))
    finally:
        worker.committer.close()
        await flusher


async def entries(redis: RedisClient, settings: BusSettings, cid: str) -> list[TextEntry]:
    return await answer_text.read(redis, Keys(settings.prefix, settings.shards), cid)


async def test_the_published_text_extends_what_was_streamed(
    redis: RedisClient, settings: BusSettings
) -> None:
    sink = stream_of(redis, settings).sink("run-1", "answer", provisional=False)
    for piece in ("The answer ", "is ", "forty"):
        await sink.write(piece)
    await publish(redis, settings, "run-1", "The answer is forty-two.")
    found = await entries(redis, settings, "run-1")
    assert [e.kind for e in found] == [DELTA, DELTA, DELTA, DELTA, SETTLED]
    assert [e.number for e in found] == [1, 2, 3, 4, 5]
    assert found[3].text == "-two." and found[3].candidate == answer_text.PUBLISHED
    assert not found[3].provisional
    assert since_reset(found) == "The answer is forty-two."
    # Kept for the readers that follow it live, as long as the run's progress entries.
    keys = Keys(settings.prefix, settings.shards)
    assert 0 < await redis.ttl(keys.answer_text("run-1")) <= settings.stream_keep_s


async def test_a_published_text_that_differs_resets_and_comes_whole(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A caveat before the model's words (or another candidate chosen): the streamed text is
    not a prefix of the published one, so a reset and the whole text follow."""
    sink = stream_of(redis, settings).sink("run-2", "answer", provisional=True)
    await sink.write("Paris is the capital.")
    published = "Degraded answer: the loop did not converge.\n\nParis is the capital."
    await publish(redis, settings, "run-2", published)
    found = await entries(redis, settings, "run-2")
    assert [e.kind for e in found] == [DELTA, RESET, DELTA, SETTLED]
    assert found[1].why == ResetWhy.PUBLISHED
    assert since_reset(found) == published


async def test_an_answer_with_nothing_streamed_is_written_whole(
    redis: RedisClient, settings: BusSettings
) -> None:
    await publish(redis, settings, "run-3", "Made by the host.")
    found = await entries(redis, settings, "run-3")
    assert [e.kind for e in found] == [DELTA, SETTLED]
    assert since_reset(found) == "Made by the host."


async def test_a_calls_first_write_resets_an_attempt_cut_before_it(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A worker killed mid-answer leaves a partial attempt; the call made again (a new sink:
    a new delivery) resets it on its first write, so the text is never written twice."""
    stream = stream_of(redis, settings)
    cut = stream.sink("run-4", "answer", provisional=True)
    await cut.write("Half an ans")
    again = stream.sink("run-4", "answer", provisional=True)
    await again.write("A whole ")
    await again.write("answer.")
    other = stream.sink("run-4", "refinement:1", provisional=True)
    await other.write("A refined answer.")
    found = await entries(redis, settings, "run-4")
    assert [(e.kind, e.why) for e in found] == [
        (DELTA, ""),
        (RESET, ResetWhy.RETRIED),
        (DELTA, ""),
        (DELTA, ""),
        (RESET, ResetWhy.REPLACED),
        (DELTA, ""),
    ]
    assert since_reset(found) == "A refined answer."


async def test_set_aside_resets_only_after_text(redis: RedisClient, settings: BusSettings) -> None:
    stream = stream_of(redis, settings)
    await stream.reset("run-5", ResetWhy.SET_ASIDE)  # nothing written yet: nothing to reset
    assert await entries(redis, settings, "run-5") == []
    await stream.sink("run-5", "draft", provisional=True).write("A draft.")
    await stream.reset("run-5", ResetWhy.SET_ASIDE)
    await stream.reset("run-5", ResetWhy.SET_ASIDE)  # twice (a redelivery): one reset
    found = await entries(redis, settings, "run-5")
    assert [(e.kind, e.why) for e in found] == [(DELTA, ""), (RESET, ResetWhy.SET_ASIDE)]


async def test_writes_after_the_answer_are_refused(
    redis: RedisClient, settings: BusSettings
) -> None:
    """A losing candidate still being written (a duplicate Phase E) cannot add to a settled
    stream: the invariant holds after settlement too."""
    stream = stream_of(redis, settings)
    await publish(redis, settings, "run-6", "The answer.")
    late = stream.sink("run-6", "answer", provisional=True)
    await late.write("Something else")
    await stream.reset("run-6", ResetWhy.SET_ASIDE)
    found = await entries(redis, settings, "run-6")
    assert [e.kind for e in found] == [DELTA, SETTLED]
    assert since_reset(found) == "The answer."


async def test_a_trimmed_stream_settles_with_the_whole_text(
    redis: RedisClient, settings: BusSettings
) -> None:
    """Past AEON_ANSWER_TEXT_MAXLEN the oldest entries go: the settlement cannot know what the
    stream held before them, so it resets and writes the whole text."""
    settings = settings.with_(answer_text_maxlen=10)
    sink = stream_of(redis, settings, maxlen=10).sink("run-7", "answer", provisional=False)
    for n in range(300):
        await sink.write(f"{n} ")
    published = "".join(f"{n} " for n in range(300))
    await publish(redis, settings, "run-7", published)
    found = await entries(redis, settings, "run-7")
    assert found[0].number > 1  # trimmed
    assert [e.kind for e in found[-3:]] == [RESET, DELTA, SETTLED]
    assert since_reset(found) == published


async def test_the_poller_reads_each_watched_run_until_settled(
    redis: RedisClient, settings: BusSettings
) -> None:
    """One poller reads every watched run in one round trip (a gateway's event streams and
    chat completions), each as it is written, and stops reading a run once it is settled."""
    keys = Keys(settings.prefix, settings.shards)
    stream = stream_of(redis, settings)
    poller = TextPoller(redis, keys, interval_s=0.02)
    first, second = poller.watch("run-8"), poller.watch("run-9")
    try:
        await stream.sink("run-8", "answer", provisional=False).write("Streamed ")
        await stream.sink("run-9", "draft", provisional=True).write("Other")
        await asyncio.wait_for(first.more_than(0), 5)
        await asyncio.wait_for(second.more_than(0), 5)
        assert [e.text for e in first.entries] == ["Streamed "]  # read while it is written
        await publish(redis, settings, "run-8", "Streamed and done.")
        await asyncio.wait_for(first.more_than(1), 5)
        while not first.settled:
            await asyncio.wait_for(first.more_than(len(first.entries)), 5)
        assert since_reset(first.entries) == "Streamed and done."
        assert [e.text for e in second.entries] == ["Other"]
    finally:
        poller.release(first)
        poller.release(second)
        await poller.aclose()


async def test_reads_that_overlap_add_each_entry_once(
    redis: RedisClient, settings: BusSettings
) -> None:
    """The poller's round and a reader's read up to the settlement (RunFeed.text_to_settled)
    can be in flight at once, both from the same last entry: Redis slow, or back from a
    restart, with a reader waking on the answer. Both replies hold the same entries; the watch
    keeps each once, so every reader of the run sends each delta once (issue 41, finding 4:
    the published delta came twice with one id). The reads are started together, so they
    overlap whatever the machine's load."""
    keys = Keys(settings.prefix, settings.shards)
    stream = stream_of(redis, settings)
    await stream.sink("run-10", "answer", provisional=False).write("The end of ")
    await publish(redis, settings, "run-10", "The end of the answer.")
    poller = TextPoller(redis, keys, interval_s=3600)
    watch = poller.watch("run-10")
    feed = RunFeed(RunStore(redis, keys, settings))
    run = WatchedRun("run-10", watch)
    try:
        await asyncio.gather(poller.poll(), feed.text_to_settled(run), poller.poll())
        ids = [entry.entry_id for entry in watch.entries]
        assert len(ids) == len(set(ids)) == 3, ids
        assert since_reset(watch.entries) == "The end of the answer."
        sent = [step.wire.event_id for step in _text_steps(watch.entries, None, ANSWERED, "x")]
        assert len(sent) == len(set(sent)) == 2
    finally:
        poller.release(watch)
        await poller.aclose()


async def test_whole_runs_stream_their_answer_and_settle_on_it(settings: BusSettings) -> None:
    """The offline model writes the draft and the answer in chunks; each run's stream ends
    settled on its FinalAnswer's text: a short ask (ended at Phase A on its draft) and one the
    loop plans and passes over (its draft set aside, its synthesis streamed)."""
    requests = [
        "What is the capital of France?",
        "Compare three sorting algorithms in depth, then pick one",
    ]
    async with AeonTestStack(OfflineLLM(), settings=settings) as stack:
        client = stack.client
        results = {}
        for request in requests:
            cid = await client.submit(request, timeout=60)
            results[cid] = await client.wait(cid, 60)
        keys = Keys(settings.prefix, settings.shards)
        for cid, result in results.items():
            found = await answer_text.read(client.redis, keys, cid)
            assert found[-1].kind == SETTLED
            assert since_reset(found) == result.final_answer.answer_text
            # Written as it came, before it was published; a simple ask's one call (phases.
            # spend) may end within one flush, its rest then published at once.
            deltas = [e for e in found if e.kind == DELTA]
            assert deltas[0].candidate != "published", "the answer is written as it comes"
            assert len(deltas) > 1, "the offline model writes its answer in chunks"
    deep = list(results.values())[1]
    assert deep.total_passes > 0
