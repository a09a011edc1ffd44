"""Connecting to a cluster, and a gateway's reads and writes on one (tests/integration/test_bus.py
runs every bus operation there too).

- `connect` finds out by itself whether the URL names a cluster node.
- `submit` with AEON_WAIT_REPLICAS waits for replicas on the connection that wrote the request:
  with the replica stopped it says the request is not yet safe; running, it says nothing.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis, RedisCluster
from redis.crc import key_slot

from aeonloop.bus.connection import connect
from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient
from aeonloop.phases.events import RequestSubmitted
from aeonloop.settings import SettingsError


async def test_connect_finds_out_whether_the_url_names_a_cluster(
    redis_url: str, redis_cluster: Any
) -> None:
    on_server = await connect(BusSettings(redis_url=redis_url))
    on_cluster = await connect(BusSettings(redis_url=redis_cluster.url))
    try:
        assert isinstance(on_server, Redis)
        assert isinstance(on_cluster, RedisCluster)
        assert len(on_cluster.get_primaries()) == 3  # it learnt the nodes it was not told of
    finally:
        await on_server.aclose()
        await on_cluster.aclose()


async def test_a_cluster_url_naming_a_database_is_refused(redis_cluster: Any) -> None:
    url = redis_cluster.url.removesuffix("/0") + "/2"
    with pytest.raises(SettingsError, match="only database 0"):
        await connect(BusSettings(redis_url=url))


async def test_the_client_follows_answers_of_every_shard_on_a_cluster(
    redis_cluster: Any, redis_prefix: str
) -> None:
    """One reader per shard (an XREAD may not span slots); each sees its shard's entries."""
    settings = BusSettings(redis_url=redis_cluster.url, prefix=redis_prefix, shards=3)
    async with AeonClient(settings=settings) as client:
        assert len(client._reads()) == 3  # one XREAD per shard
        keys = Keys(redis_prefix, 3)
        cids: list[str] = []
        # Random ids pick shards at random: submit until every shard has a run (12 at once
        # missed one in about 40 runs).
        while {keys.shard_of(cid) for cid in cids} != {0, 1, 2} and len(cids) < 100:
            cids.append(await client.submit(f"Explain tides (#{len(cids)})", timeout=30))
        assert {keys.shard_of(cid) for cid in cids} == {0, 1, 2}
        for cid in cids:
            key = keys.stream_of(RequestSubmitted.STREAM, cid)
            assert key_slot(key.encode()) == key_slot(keys.answer(cid).encode())
            assert len(await client.redis.xrange(key)) >= 1


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Pids stopped by the test (SIGSTOP), continued at teardown whatever happens."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


async def test_submit_waits_for_a_replica_on_the_connection_that_wrote_the_request(
    cluster_factory: Any,
    redis_prefix: str,
    stopped: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = cluster_factory(masters=3, replicas=1)
    settings = BusSettings(
        redis_url=cluster.url, prefix=redis_prefix, wait_replicas=1, wait_timeout_ms=300
    )
    keys = Keys(redis_prefix)
    master = cluster.master_of_slot(key_slot(keys.stream(RequestSubmitted.STREAM, 0).encode()))
    replica = cluster.replicas_of(master)[0]
    async with AeonClient(settings=settings) as client:
        with caplog.at_level(logging.WARNING, logger="aeon.gateway"):
            await client.submit("Explain tides", timeout=30)
        assert not caplog.records, "a running replica confirms the request"

        assert replica.pid is not None
        os.kill(replica.pid, signal.SIGSTOP)
        stopped.append(replica.pid)
        with caplog.at_level(logging.WARNING, logger="aeon.gateway"):
            cid = await client.submit("Explain tides again", timeout=30)
    (record,) = caplog.records
    assert f"request {cid} is stored but only 0 of 1 replicas confirmed it" in record.getMessage()


async def test_submit_on_a_server_without_replicas_says_the_request_is_not_safe(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = BusSettings(
        redis_url=redis_url, prefix=redis_prefix, wait_replicas=1, wait_timeout_ms=100
    )
    async with AeonClient(settings=settings) as client:
        with caplog.at_level(logging.WARNING, logger="aeon.gateway"):
            cid = await client.submit("Explain tides", timeout=30)
        stored = await client.redis.xrange(Keys(redis_prefix).stream_of("requests", cid))
    assert [fields[b"cid"].decode() for _, fields in stored] == [cid]
    assert "only 0 of 1 replicas confirmed it" in caplog.text
