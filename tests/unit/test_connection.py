"""The bus packs commands with hiredis: the bytes must be exactly redis-py's own."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import (
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import DataError

from aeonloop.bus.connection import connect
from aeonloop.bus.settings import BusSettings

#: Named a single server, so connecting asks nothing of it (no server runs in unit tests).
STANDALONE = BusSettings(redis_cluster="no")
URL = "redis://localhost:6379/0"
COMMANDS = [
    ("XADD", "aeon:passes", "MAXLEN", "~", 100_000, "*", "type", b"PassCompleted", "body", b"{}"),
    ("SET", "aeon:lock:phase-c:ab12", b"done", "PX", 30_000, "NX"),
    ("XACK", "aeon:profiled", "phase-b", b"1700000000000-0"),
    ("CLIENT SETNAME", "worker-1"),
    (b"CONFIG GET", "port"),
    ("SET", "k", "ünïcödé ✓ 🌍", "EX", 1.5),
    ("SET", "k", b"x" * 20_000),
]


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("redis://localhost:6379/0", Connection),
        ("rediss://:pw@localhost:6380/0?ssl_check_hostname=true", SSLConnection),
        ("unix:///tmp/redis.sock?db=0", UnixDomainSocketConnection),
    ],
)
async def test_every_scheme_keeps_its_connection_kind_and_the_urls_options(
    url: str, base: type
) -> None:
    pool = (await connect(STANDALONE, url, consumers=2)).connection_pool
    assert issubclass(pool.connection_class, base)
    assert pool.max_connections >= 4
    if "ssl_check_hostname" in url:
        assert pool.connection_kwargs["ssl_check_hostname"] is True


async def test_packed_bytes_equal_redis_pys_own() -> None:
    fast = (await connect(STANDALONE, URL)).connection_pool.connection_class()
    plain = Connection()
    for command in COMMANDS:
        assert b"".join(fast.pack_command(*command)) == b"".join(plain.pack_command(*command))
    assert b"".join(fast.pack_commands(COMMANDS)) == b"".join(plain.pack_commands(COMMANDS))


@pytest.mark.parametrize("value", [None, True, {"a": 1}, [1]])
async def test_a_value_redis_cannot_store_is_a_data_error_as_before(value: object) -> None:
    fast = (await connect(STANDALONE, URL)).connection_pool.connection_class()
    with pytest.raises(DataError):
        fast.pack_command("SET", "k", value)
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", value)
