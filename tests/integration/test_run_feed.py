"""The HTTP run feed (gateway.http.run_feed) on a real Redis: what one request can make it read.

Reading a run back from a reader's Last-Event-ID scans the run's shard from the entry the id
names. The id comes from whoever sends the request, so the scan must happen only for a run
that exists, from an entry that is its own: a made-up id costs a few single-entry reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from aeonloop.bus.connection import RedisClient, connect
from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.http.run_feed import STATE_STREAMS, ForeignEventId, RunFeed
from aeonloop.gateway.http.run_steps import EventId
from aeonloop.runs.store import RunStore

pytestmark = pytest.mark.integration

#: Other runs' entries in each stream a scan would read: more than one page of it.
OTHERS = 600


@pytest.fixture
async def redis(settings: BusSettings) -> AsyncIterator[RedisClient]:
    client = await connect(settings, consumers=1)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def entries_read(redis: RedisClient, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many entries each XRANGE of the feed returned, from when the test fills the streams."""
    counts: list[int] = []
    xrange = redis.xrange

    async def counted(*args: Any, **kwargs: Any) -> Any:
        entries = await xrange(*args, **kwargs)
        counts.append(len(entries))
        return entries

    monkeypatch.setattr(redis, "xrange", counted)
    return counts


async def _fill(redis: RedisClient, keys: Keys) -> str:
    """OTHERS entries of another run in each of the run's streams; the id of the last one."""
    last = b""
    for name in STATE_STREAMS:
        pipe = redis.pipeline(transaction=False)
        for _ in range(OTHERS):
            pipe.xadd(keys.stream(name, 0), {"cid": "someone-else", "type": "TaskProfiled"})
        last = (await pipe.execute())[-1]
    return last.decode()


async def test_a_made_up_event_id_on_a_made_up_run_reads_nothing_back(
    redis: RedisClient, settings: BusSettings, entries_read: list[int]
) -> None:
    keys = Keys(settings.prefix, 1)
    await _fill(redis, keys)
    feed = RunFeed(RunStore(redis, keys, settings))
    for made_up in ("profile@0-0", "pass-3@1-0", "exit@1732300000000-0"):
        assert await feed.view("nobody", EventId.parse(made_up)) is None
    assert sum(entries_read) == 0


async def test_another_runs_event_id_is_refused_before_any_scan(
    redis: RedisClient, settings: BusSettings, entries_read: list[int]
) -> None:
    keys = Keys(settings.prefix, 1)
    theirs = await _fill(redis, keys)
    feed = RunFeed(RunStore(redis, keys, settings))
    with pytest.raises(ForeignEventId, match="another run"):
        await feed.view("nobody", EventId.parse(f"plan@{theirs}"))
    assert sum(entries_read) == 1  # the entry named, read once to see whose it is
