"""One Redis client per process, shared by every consumer, the committer and the memo.

The URL may be redis://, rediss:// (TLS) or unix://, with a password; it is never logged
unredacted. It may name one server or any node of a Redis Cluster: `AEON_REDIS_CLUSTER=auto`
asks the server (`INFO cluster`) and builds redis-py's cluster client when it is one, which
learns the other nodes and routes each command, and each pipeline's commands, to the node
owning their keys' slot (bus.keys keeps every multi-key command in one slot).

On one server: a bounded, blocking pool, so a thousand runs in flight do not mean a thousand
sockets. On a cluster, redis-py keeps a pool per node that opens a connection per concurrent
command; what bounds it is what bounds commands: the consumers' concurrency.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import hiredis
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    DataError,
    NoPermissionError,
)

from aeonloop.bus.redis_errors import NoGreeting
from aeonloop.bus.settings import BusSettings, redact
from aeonloop.exceptions import SettingsError

#: A client for one server or for a cluster: the commands Aeon sends are the same on both.
RedisClient = Redis | RedisCluster

#: Blocking reads hold a connection each (one per consumer); the rest serve commands.
_SPARE_CONNECTIONS = 32
#: A silent peer is declared dead after about 25 s (10 s idle, then 3 probes 5 s apart).
_KEEPALIVE = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
}


class _HiredisPacking:
    """Pack commands with hiredis's C packer, as redis-py's sync client does.

    redis-py 5's asyncio connections pack in Python: about 19 µs for a hop's commit (XADD of a
    3 KB event, done mark, XACK) against 4 µs here, for the same bytes on the wire.

    Also: a write to a transport that is already closed is a ConnectionError, as on asyncio's
    own loop. uvloop raises RuntimeError for it, which redis-py passes on; it happens when
    redis-py's cluster client, after one command failed, closes every node's connections,
    including those other commands are using at that moment.
    """

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except RuntimeError as error:
            if "closed" not in str(error):
                raise
            raise RedisConnectionError(
                f"the connection was closed under this command ({error})"
            ) from error

    def pack_command(self, *args: Any) -> list[bytes]:
        return [_pack(args)]

    def pack_commands(self, commands: Any) -> list[bytes]:
        return [b"".join(_pack(tuple(command)) for command in commands)]


def _pack(args: tuple[Any, ...]) -> bytes:
    # A command name may hold literal arguments ("CLIENT SETNAME"); Redis wants them apart.
    # hiredis encodes a str name itself, so the common one-word name is passed as it is.
    name = args[0]
    if (" " if isinstance(name, str) else b" ") in name:
        args = (*name.split(), *args[1:])
    try:
        return hiredis.pack_command(args)
    except TypeError as error:  # the error redis-py's own packer gives for such a value
        raise DataError(str(error)) from error


class _BoundedGreeting:
    """A new connection's greeting (redis-py's AUTH or HELLO, SELECT, CLIENT SETINFO, then a
    PING) must be answered within the connect timeout.

    Aeon sets no socket_timeout (see `_options`), so without this a server that accepts the
    connection and never answers (an HTTP server waiting for a request line) would hold every
    command, and `aeon ask` or `aeon status` with it, forever. Not redis-py's socket_timeout
    for the greeting either: it bounds each send with wait_for, which on Python 3.11 can
    swallow a cancellation (a reader stopped while its first connection was greeted went on
    reading), so the greeting is bounded by asyncio.timeout. The PING makes the bound hold
    whatever redis-py's greeting sends. A server that stays silent is `NoGreeting`: a
    RedisTimeoutError, so a worker reconnecting to a Redis under load waits and tries again
    as for any timeout, and the CLI says the URL points at another kind of server
    (bus.redis_errors.not_redis)."""

    async def on_connect(self) -> None:
        bound = self.socket_timeout or self.socket_connect_timeout  # type: ignore[attr-defined]
        # The PING is the greeting's health check: redis-py's own would be retried (by the
        # cluster client's Retry) from inside this greeting, one nested greeting per try.
        interval = self.health_check_interval  # type: ignore[attr-defined]
        self.next_health_check = asyncio.get_running_loop().time() + interval
        try:
            async with asyncio.timeout(bound):
                await super().on_connect()  # type: ignore[misc]
                await self.send_command("PING", check_health=False)  # type: ignore[attr-defined]
                await self.read_response()  # type: ignore[attr-defined]
        except TimeoutError as error:
            raise NoGreeting(
                f"no reply to a Redis greeting within {bound:g} s of connecting"
            ) from error


class _TcpConnection(_HiredisPacking, _BoundedGreeting, Connection):
    pass


class _TlsConnection(_HiredisPacking, _BoundedGreeting, SSLConnection):
    pass


class _UnixConnection(_HiredisPacking, _BoundedGreeting, UnixDomainSocketConnection):
    pass


_FAST: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _TcpConnection,
    SSLConnection: _TlsConnection,
    UnixDomainSocketConnection: _UnixConnection,
}


async def connect(settings: BusSettings, url: str | None = None, consumers: int = 0) -> RedisClient:
    """A client for `url` (default: the settings' URL) sized for `consumers` blocking readers:
    a cluster client when the server is part of a cluster (or AEON_REDIS_CLUSTER says so)."""
    target = url or settings.redis_url
    if not target:
        raise ValueError("no Redis URL: set AEON_REDIS_URL (or let `aeon ask` embed one)")
    options = _options(target)
    socket_file = options.get("connection_class") is UnixDomainSocketConnection
    if socket_file or settings.redis_cluster == "no":  # a cluster is reached over TCP only
        return _standalone(options, consumers)
    if settings.redis_cluster == "auto" and not await _is_cluster_node(options):
        return _standalone(options, consumers)
    if options.get("db"):
        raise SettingsError(
            f"AEON_REDIS_URL={redact(target)!r}: names a node of a Redis Cluster, which has only "
            "database 0; drop the /N"
        )
    return await _cluster(options)


async def _is_cluster_node(options: dict[str, Any]) -> bool:
    """Ask the server (on database 0: a cluster node refuses to SELECT another)."""
    probe = _standalone({**options, "db": 0}, 0)
    try:
        return bool((await probe.info("cluster")).get("cluster_enabled"))
    except NoPermissionError:
        raise SettingsError(
            "AEON_REDIS_CLUSTER=auto asks the server with INFO, which this user may not run: "
            "set AEON_REDIS_CLUSTER=yes (a cluster) or no (one server)"
        ) from None
    finally:
        await probe.aclose()


def _options(url: str) -> dict[str, Any]:
    options: dict[str, Any] = {"health_check_interval": 30, "socket_connect_timeout": 5.0}
    options.update(parse_url(url))  # as BlockingConnectionPool.from_url: the URL's win
    if options.get("connection_class") is not UnixDomainSocketConnection:
        # No socket_timeout: redis-py then wraps every read in asyncio.timeout and every send
        # in wait_for (a Task per command, ~15% of a worker's CPU, and on 3.11 a wait_for that
        # can swallow a cancellation). A dead peer is detected by TCP keepalive instead.
        # A socket file has no TCP options.
        options.setdefault("socket_keepalive", True)
        options.setdefault("socket_keepalive_options", _KEEPALIVE)
    return options


def _standalone(options: dict[str, Any], consumers: int) -> Redis:
    options = dict(options)
    scheme_class = options.pop("connection_class", Connection)
    pool = BlockingConnectionPool(
        connection_class=_FAST.get(scheme_class, scheme_class),
        max_connections=2 * consumers + _SPARE_CONNECTIONS,
        timeout=None,
        **options,
    )
    return Redis(connection_pool=pool)


async def _cluster(options: dict[str, Any]) -> RedisCluster:
    options = dict(options)
    scheme_class = options.pop("connection_class", Connection)
    options.pop("db", None)
    if scheme_class is SSLConnection:
        options["ssl"] = True
    client = RedisCluster(**options)
    # RedisCluster takes no connection class of its own; its nodes read this one from its
    # connection settings, so every node's connections pack with hiredis too.
    client.connection_kwargs["connection_class"] = _FAST[scheme_class]
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = _FAST[scheme_class]
    try:
        await client.initialize()
    except BaseException:
        await client.aclose()
        raise
    return client


def is_cluster(redis: RedisClient) -> bool:
    return isinstance(redis, RedisCluster)
