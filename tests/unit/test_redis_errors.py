"""bus.redis_errors: what a Redis error means is decided there, by class or by Redis's words,
however redis-py delivered it (alone, in a pipeline, as a cluster client's cause). Refused
writes have their own cases in test_writes.py."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    ConnectionError,
    InvalidResponse,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TimeoutError,
)

from aeonloop.bus import redis_errors

PIPELINE = "Command # 1 (XACK aeon:{s0}:requests phase-a 1-0) of pipeline caused error: "


def test_a_group_that_exists_already() -> None:
    assert redis_errors.group_exists(ResponseError("BUSYGROUP Consumer Group name already exists"))
    assert not redis_errors.group_exists(ResponseError("NOGROUP No such key 'x'"))


@pytest.mark.parametrize(
    "error",
    [
        ResponseError("NOGROUP No such key 'aeon:{s0}:requests' or consumer group 'phase-a'"),
        ResponseError(f"{PIPELINE}NOGROUP No such key or consumer group"),
    ],
    ids=["alone", "in a pipeline"],
)
def test_a_group_redis_lost(error: Exception) -> None:
    assert redis_errors.group_missing(error)


def test_no_such_key_whatever_its_case() -> None:
    assert redis_errors.no_such_key(ResponseError("ERR no such key"))
    assert redis_errors.no_such_key(ResponseError("no such key"))
    assert not redis_errors.no_such_key(ResponseError("WRONGTYPE Operation against a key"))
    assert not redis_errors.no_such_key(ConnectionError("no such key"))  # not Redis's reply


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (ConnectionError("Connection refused"), True),
        (NoScriptError("NOSCRIPT No matching script"), True),
        (ReadOnlyError("READONLY You can't write against a read only replica."), True),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind"), False),
        (ResponseError("NOPERM this user has no permissions to run the 'evalsha' command"), False),
    ],
)
def test_what_a_commit_sends_again(error: Exception, later: bool) -> None:
    assert redis_errors.retry_later(error) is later


def test_a_server_that_does_not_speak_redis() -> None:
    """hiredis's words and redis-py's own parser's; a cluster client gives it as its cause."""
    hiredis = InvalidResponse('Protocol error, got "<" as reply type byte')
    assert redis_errors.not_redis(hiredis)
    assert redis_errors.not_redis(InvalidResponse("Protocol Error: b'HTTP/1.0 400 Bad'"))
    try:
        try:
            raise hiredis
        except InvalidResponse as cause:
            raise RedisClusterException("Redis Cluster cannot be connected.") from cause
    except RedisClusterException as error:
        assert redis_errors.not_redis(error)
    assert not redis_errors.not_redis(ConnectionError("Connection refused"))
    assert not redis_errors.not_redis(ResponseError("ERR unknown command 'HELLO'"))


def test_what_the_cli_tells_apart() -> None:
    single = RedisClusterException("Cluster mode is not enabled on this node")
    assert redis_errors.cluster_unusable(single) and redis_errors.cluster_not_enabled(single)
    assert not redis_errors.cluster_not_enabled(RedisClusterException("All slots are not covered"))
    assert redis_errors.unreachable(TimeoutError("Timeout connecting to server"))
    assert redis_errors.timed_out(TimeoutError("Timeout connecting to server"))
    assert not redis_errors.unreachable(ResponseError("ERR"))


def test_every_kind_of_failure_is_caught_as_one() -> None:
    """What the CLI and the HTTP API catch as 'Redis failed' (not a bug of theirs)."""
    for error in (ResponseError("ERR"), RedisClusterException("x"), OSError("x")):
        assert isinstance(error, redis_errors.FAILURES)
    assert not isinstance(ValueError("x"), redis_errors.FAILURES)


def test_a_blocking_read_a_failover_ended() -> None:
    """The gateway's reader reads again after it (gateway.client): it had stopped the reader in
    a cluster failover (tests/e2e/test_cluster.py)."""
    failover = "UNBLOCKED force unblock from blocking operation, instance state changed"
    assert redis_errors.unblocked(ResponseError(f"{failover} (master -> replica?)"))
    assert not redis_errors.unblocked(ResponseError("NOGROUP No such key"))
    assert not redis_errors.unblocked(ConnectionError("UNBLOCKED"))  # not Redis's reply
