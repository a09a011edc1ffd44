"""What a Redis error means, decided in one place.

redis-py raises a class of its own for some of Redis's replies (OutOfMemoryError, ReadOnlyError,
NoScriptError, ...) and a plain ResponseError carrying Redis's words for the others; inside a
pipeline it rewords them ("Command # N (...) of pipeline caused error: ..."), and Redis 6 wraps
a script's refused write in its own words ("Error running script ... -OOM ..."). So some
errors are known by their class and some only by what Redis said. Every module asks here, so
each kind is recognised one way, however it arrived:

- `TRANSIENT`: Redis is away, or a cluster is settling after a failover: wait and try again
  (`FAILING_OVER` adds a demoted master's READONLY, for a writer on a cluster);
- `refuses_writes`: out of memory, a read-only replica, failed persistence (bus.writes);
- `retry_later`: what a commit sends again (any of the above, or a master new to the script:
  `script_missing`);
- `group_exists`, `group_missing`, `no_such_key`: replies the consumer and `aeon status` expect;
- `unblocked`: a blocking read ended by a failover (the gateway's reader reads again);
- `not_redis`: the server at the URL speaks another protocol (an HTTP server, say), or none
  (`NoGreeting`);
- `cluster_unusable`, `cluster_not_enabled`, `unreachable`, `timed_out`: how the CLI words
  an error;
- `said`: what Redis said, in one line, for logs and messages.
"""

from __future__ import annotations

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    InvalidResponse,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class NoGreeting(RedisTimeoutError):
    """A server accepted the connection and did not answer its greeting within the connect
    timeout (bus.connection): another kind of server, most likely, that waits for a request
    of its own. A redis-py TimeoutError (transient, to a worker already running), kept here
    with the other refinements of redis-py's errors rather than in aeonloop.exceptions, which
    imports nothing from redis."""


#: Errors that pass once Redis is back, or once a cluster has settled after a failover (a slot
#: without a master, a redirection redis-py gave up following): wait and try again.
#: RedisClusterException: no node answered while the client relearnt the cluster; ClusterError:
#: redirections went round until redis-py gave up.
TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    ClusterDownError,
    ClusterError,
    TryAgainError,
    AskError,
    SlotNotCoveredError,
    RedisClusterException,
)

#: What a write meets while a cluster fails over: its master is away, or is a replica now
#: (READONLY, a demoted master), until the client learns the new one.
FAILING_OVER: tuple[type[BaseException], ...] = (*TRANSIENT, ReadOnlyError)

#: Whatever a Redis command can raise: Redis's replies, the cluster client's own, the socket's.
FAILURES: tuple[type[BaseException], ...] = (RedisError, RedisClusterException, OSError)

#: How Redis words a refused write, wherever redis-py puts it: a reply of its own (`OOM ...`,
#: `READONLY ...`), inside a pipeline's "Command # N ... caused error", or inside a script's
#: error on Redis 6 ("Error running script ... -OOM ...").
_REFUSALS = ("when used memory > 'maxmemory'", "READONLY", "read only replica", "MISCONF")


def refuses_writes(error: BaseException) -> bool:
    """Whether `error` is Redis refusing a write it would take once its trouble is over."""
    if isinstance(error, (OutOfMemoryError, ReadOnlyError)):
        return True
    return _says(error, *_REFUSALS)


def retry_later(error: BaseException) -> bool:
    """Whether Redis would take the same command later: it is away or failing over, it refuses
    writes for now, or it is a master that has not seen the script yet (a new one, after a
    failover or a restart)."""
    return isinstance(error, TRANSIENT) or script_missing(error) or refuses_writes(error)


def script_missing(error: BaseException) -> bool:
    """EVALSHA of a script this server has not loaded (NOSCRIPT): a new master after a
    failover, or one restarted."""
    return isinstance(error, NoScriptError)


def group_exists(error: BaseException) -> bool:
    """XGROUP CREATE of a group that is there already (BUSYGROUP)."""
    return _says(error, "BUSYGROUP")


def group_missing(error: BaseException) -> bool:
    """A command on a group (or stream) Redis does not have (NOGROUP): it lost its data."""
    return _says(error, "NOGROUP")


def unblocked(error: BaseException) -> bool:
    """A blocking read Redis ended because its server changed role (UNBLOCKED: a master made a
    replica by a failover): read again once the client has learnt the new master."""
    return _says(error, "UNBLOCKED")


def no_such_key(error: BaseException) -> bool:
    """A command on a key that does not exist, where Redis says so (XINFO of a stream)."""
    return isinstance(error, ResponseError) and "no such key" in str(error).lower()


def not_redis(error: BaseException) -> bool:
    """Whether the server did not answer as a Redis server: its reply is not Redis's protocol
    (an HTTP server's page, say), or it gave none to the greeting (`NoGreeting`). A cluster
    client that tried it says so in its cause."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, (InvalidResponse, NoGreeting)):
            return True
        cause = cause.__cause__
    return False


def cluster_unusable(error: BaseException) -> bool:
    """The cluster client could not use the cluster: no node answered while it learnt the
    cluster, some slots have no master, or the server is no cluster at all."""
    return isinstance(error, RedisClusterException)


def cluster_not_enabled(error: BaseException) -> bool:
    """A cluster client pointed at a server that is not part of a cluster."""
    return cluster_unusable(error) and "not enabled" in str(error)


def unreachable(error: BaseException) -> bool:
    """No answer at all: the connection failed, was lost, or timed out."""
    return isinstance(error, (RedisConnectionError, RedisTimeoutError, OSError))


def timed_out(error: BaseException) -> bool:
    return isinstance(error, RedisTimeoutError)


def said(error: BaseException) -> str:
    """What Redis said, without redis-py's pipeline preamble (which quotes whole scripts)."""
    text = str(error).split("caused error: ")[-1].strip("()'\" ")
    return text.splitlines()[0] if text else type(error).__name__


def _says(error: BaseException, *words: str) -> bool:
    """Whether Redis's reply, wherever redis-py put it, holds any of `words`."""
    return isinstance(error, ResponseError) and any(word in str(error) for word in words)
