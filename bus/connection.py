"""One Redis client per process, shared by every consumer, the committer and the memo.

A bounded, blocking pool: a thousand runs in flight must not mean a thousand sockets. The URL
may be redis://, rediss:// (TLS) or unix://, with a password; it is never logged unredacted.
"""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis

from bus.settings import BusSettings

#: Blocking reads hold a connection each (one per consumer); the rest serve commands.
_SPARE_CONNECTIONS = 32


def connect(settings: BusSettings, url: str | None = None, consumers: int = 0) -> Redis:
    """A client for `url` (default: the settings' URL) sized for `consumers` blocking readers."""
    target = url or settings.redis_url
    if not target:
        raise ValueError("no Redis URL: set AEON_REDIS_URL (or let `aeon ask` embed one)")
    pool = BlockingConnectionPool.from_url(
        target,
        max_connections=2 * consumers + _SPARE_CONNECTIONS,
        timeout=None,
        socket_keepalive=True,
        health_check_interval=30,
        # A blocking XREADGROUP may legitimately wait block_ms; give the socket room for it.
        socket_timeout=max(10.0, settings.block_ms / 1000 + 5.0),
        socket_connect_timeout=5.0,
    )
    return Redis(connection_pool=pool)
