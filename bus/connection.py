"""One Redis client per process, shared by every consumer, the committer and the memo.

A bounded, blocking pool: a thousand runs in flight must not mean a thousand sockets. The URL
may be redis://, rediss:// (TLS) or unix://, with a password; it is never logged unredacted.
"""

from __future__ import annotations

import socket

from redis.asyncio import BlockingConnectionPool, Redis

from bus.settings import BusSettings

#: Blocking reads hold a connection each (one per consumer); the rest serve commands.
_SPARE_CONNECTIONS = 32
#: A silent peer is declared dead after about 25 s (10 s idle, then 3 probes 5 s apart).
_KEEPALIVE = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
}


def connect(settings: BusSettings, url: str | None = None, consumers: int = 0) -> Redis:
    """A client for `url` (default: the settings' URL) sized for `consumers` blocking readers."""
    target = url or settings.redis_url
    if not target:
        raise ValueError("no Redis URL: set AEON_REDIS_URL (or let `aeon ask` embed one)")
    pool = BlockingConnectionPool.from_url(
        target,
        max_connections=2 * consumers + _SPARE_CONNECTIONS,
        timeout=None,
        # No socket_timeout: redis-py then wraps every read in asyncio.timeout and every send in
        # wait_for (a Task per command, ~15% of a worker's CPU, and on 3.11 a wait_for that can
        # swallow a cancellation). A dead peer is detected by TCP keepalive instead.
        socket_keepalive=True,
        socket_keepalive_options=_KEEPALIVE,
        health_check_interval=30,
        socket_connect_timeout=5.0,
    )
    return Redis(connection_pool=pool)
