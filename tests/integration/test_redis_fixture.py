"""The Redis test fixtures work, and servers.embedded.RedisServer starts, restarts and fails
clearly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from aeonloop.servers.embedded import RedisServer, RedisServerError

_SEEN_PREFIXES = pytest.StashKey[set]()

# --------------------------------------------------------------------------- the shared fixture


async def test_stream_round_trip_with_consumer_group(redis_url: str, redis_prefix: str) -> None:
    stream, group = f"{redis_prefix}:requests", "phase-a"
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
        event_id = await client.xadd(stream, {"body": b'{"text":"hello"}'})

        got = await client.xreadgroup(group, "worker-1", {stream: ">"}, count=10, block=1000)
        assert len(got) == 1
        name, entries = got[0]
        assert name == stream.encode()
        assert entries == [(event_id, {b"body": b'{"text":"hello"}'})]

        pending = await client.xpending(stream, group)
        assert pending["pending"] == 1
        assert await client.xack(stream, group, event_id) == 1
        pending = await client.xpending(stream, group)
        assert pending["pending"] == 0
    finally:
        await client.aclose()


def test_source_is_reported(redis_source: str, redis_url: str) -> None:
    assert redis_source in {"testcontainers", "env", "embedded"}
    assert redis_url.startswith(("redis://", "rediss://"))
    with redis.Redis.from_url(redis_url) as client:
        assert client.ping() is True


def test_prefix_is_unique_per_test(redis_prefix: str, request: pytest.FixtureRequest) -> None:
    assert redis_prefix.startswith("t") and len(redis_prefix) == 9
    # every test gets its own: remember ours and compare with the next test's
    seen = request.config.stash.setdefault(_SEEN_PREFIXES, set())
    assert redis_prefix not in seen
    seen.add(redis_prefix)


def test_prefix_is_unique_per_test_again(redis_prefix: str, request: pytest.FixtureRequest) -> None:
    seen = request.config.stash.setdefault(_SEEN_PREFIXES, set())
    assert redis_prefix not in seen
    seen.add(redis_prefix)


def test_redis_tests_are_marked_integration(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("integration") is not None


# --------------------------------------------------------------------------- RedisServer


async def test_appendonly_data_survives_restart(redis_server_factory) -> None:
    server = redis_server_factory(appendonly=True)
    url_before = server.url
    client = aioredis.Redis.from_url(server.url)
    try:
        await client.set("key", "value")
        await client.xgroup_create("stream", "group", id="0", mkstream=True)
        await client.xadd("stream", {"n": "1"})
        await client.xadd("stream", {"n": "2"})
        await client.xreadgroup("group", "c1", {"stream": ">"}, count=1)
        await client.aclose()

        server.restart(keep_data=True)

        assert server.url == url_before  # same port: clients reconnect to the same URL
        client = aioredis.Redis.from_url(server.url)
        assert await client.get("key") == b"value"
        assert await client.xlen("stream") == 2
        # the consumer group and its pending entry survive too (crash recovery relies on this)
        pending = await client.xpending("stream", "group")
        assert pending["pending"] == 1
    finally:
        await client.aclose()


def test_restart_without_keep_data_starts_empty(redis_server_factory) -> None:
    server = redis_server_factory(appendonly=True)
    with redis.Redis.from_url(server.url) as client:
        client.set("key", "value")
        client.xadd("stream", {"n": "1"})
    server.restart(keep_data=False)
    with redis.Redis.from_url(server.url) as client:
        assert client.get("key") is None
        assert client.exists("stream") == 0


def test_without_appendonly_nothing_survives_restart(redis_server_factory) -> None:
    """`save ""` means no RDB: persistence is the AOF or nothing."""
    server = redis_server_factory(appendonly=False)
    with redis.Redis.from_url(server.url) as client:
        client.set("key", "value")
    server.restart(keep_data=True)
    with redis.Redis.from_url(server.url) as client:
        assert client.get("key") is None


def test_acknowledged_writes_survive_a_crash(redis_server_factory) -> None:
    server = redis_server_factory(appendonly=True)
    with redis.Redis.from_url(server.url) as client:
        client.xadd("stream", {"n": "1"})
    server.kill()  # SIGKILL: no shutdown, no final fsync
    server.start()
    with redis.Redis.from_url(server.url) as client:
        assert client.xlen("stream") == 1


def test_server_config(redis_server_factory) -> None:
    server = redis_server_factory(appendonly=True)
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        assert client.config_get("save")["save"] == ""
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.config_get("appendfsync")["appendfsync"] == "everysec"
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        assert client.config_get("bind")["bind"] == "127.0.0.1"
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    assert server.log_path.is_file()


def test_password_is_required_and_carried_by_url(redis_server_factory) -> None:
    server = redis_server_factory(password='s3cret "quoted" p@ss')
    assert server.url.startswith("redis://:s3cret%20%22quoted%22%20p%40ss@127.0.0.1:")
    with redis.Redis.from_url(server.url) as client:
        assert client.ping() is True
    with (
        redis.Redis(host="127.0.0.1", port=server.port) as anonymous,
        pytest.raises(redis.AuthenticationError),
    ):
        anonymous.ping()
    # not on the command line, where `ps` would show it
    cmdline = Path(f"/proc/{server.pid}/cmdline")
    if cmdline.exists():
        assert b"s3cret" not in cmdline.read_bytes()


def test_start_failure_gives_a_clear_error(redis_server_factory) -> None:
    server = redis_server_factory(start=False, extra_config={"no-such-option": "yes"})
    with pytest.raises(RedisServerError) as info:
        server.start()
    message = str(info.value)
    assert "exited with code" in message
    assert "no-such-option" in message  # the log tail says what is wrong
    assert not server.running


def test_port_in_use_gives_a_clear_error(redis_server_factory) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = redis_server_factory(start=False, port=port)
        with pytest.raises(RedisServerError, match="Address already in use"):
            server.start()


def test_port_taken_before_redis_binds_it_is_retried(redis_server_factory, monkeypatch) -> None:
    """A port taken between picking and binding it: retried on another port, not an error."""
    from aeonloop.servers import embedded

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        real_free_port = embedded._free_port
        picks = iter([taken])
        monkeypatch.setattr(embedded, "_free_port", lambda: next(picks, None) or real_free_port())
        server = redis_server_factory()
        assert server.running and server.port != taken
        assert "Address already in use" in server.log_path.read_text()


def test_missing_binary_gives_a_clear_error(redis_server_factory, tmp_path: Path) -> None:
    server = redis_server_factory(start=False, executable=str(tmp_path / "no-redis-server"))
    with pytest.raises(RedisServerError, match="cannot run redis-server"):
        server.start()


def test_close_removes_owned_dir_but_keeps_a_given_one(tmp_path: Path) -> None:
    with RedisServer(appendonly=True) as owned:
        owned_dir = owned.dir
        assert owned_dir.is_dir()
    assert not owned_dir.exists()
    assert not owned.running

    given = tmp_path / "data"
    with RedisServer(appendonly=True, dir=given) as server, redis.Redis.from_url(server.url) as c:
        c.set("key", "value")
    assert given.is_dir()
    # a new server on the same directory finds the data: the `dir` option is for restarts
    with RedisServer(appendonly=True, dir=given) as again, redis.Redis.from_url(again.url) as c:
        assert c.get("key") == b"value"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_server_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A CLI run killed with SIGKILL must not leave an orphan redis-server behind."""
    code = (
        "import sys, time\n"
        "from servers.embedded import RedisServer\n"
        "s = RedisServer(dir=sys.argv[1]).start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert parent.stdout is not None
        redis_pid = int(parent.stdout.readline())
        assert _alive(redis_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(redis_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(redis_pid)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by init counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    try:
        for line in status.read_text().splitlines():
            if line.startswith("State:"):
                return "Z" not in line.split()[1]
    except OSError:
        return False
    return True
