"""Bus settings, all from the environment (AEON_<FIELD>) so a worker needs no config file.

Every value has a default that suits one host; docs/configuration.md lists them. How long Redis
keeps something is a `*_KEEP_S` variable (AEON_ANSWER_KEEP_S, ...): "TTL" is the run's pass
budget (`max_ttl`), so the former AEON_*_TTL_S names are read only until they go (`renamed`).
Values that cannot work, alone or together, are refused when the settings are read, with the
variable named (aeonloop.settings.SettingsError), before a worker reads or a gateway publishes
anything.
"""

from __future__ import annotations

import os
import socket
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from aeonloop.bus.keys import LockState
from aeonloop.settings import AeonSettings, core, redact, renamed

__all__ = ["BusSettings", "check_redis_url", "redact"]

_SCHEMES = ("redis", "rediss", "unix")

Whole = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def default_consumer_name() -> str:
    """Unique per process, and readable in XINFO CONSUMERS: host-pid."""
    return f"{socket.gethostname()}-{os.getpid()}"


def check_redis_url(url: str) -> str:
    """`url` if redis-py can connect with it as written; ValueError says what is wrong.

    redis-py's own parser lets some mistakes through: a database that is not a number
    (`/abc`) silently becomes database 0, and a bad port fails only at the first command.
    """
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ValueError("must start with redis://, rediss:// (TLS) or unix:// (a socket path)")
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError("a unix:// URL needs the socket's path, e.g. unix:///run/redis.sock")
        return url
    if not parts.hostname:
        raise ValueError("names no host, e.g. redis://localhost:6379/0")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has a port that is not a number from 1 to 65535") from None
    if port == 0:
        raise ValueError("has a port that is not a number from 1 to 65535")
    database = parts.path.strip("/")
    if database and not database.isdigit():
        raise ValueError(f"names database {database!r}; a database is a number, e.g. /0")
    return url


class BusSettings(AeonSettings):
    #: None means "no server configured": `aeon ask` then starts an embedded one.
    redis_url: Annotated[
        str | None,
        core("the Redis server, e.g. redis://localhost:6379/0; unset: ask and serve run their own"),
    ] = None
    #: Whether AEON_REDIS_URL names a node of a Redis Cluster: "auto" asks the server.
    redis_cluster: Literal["auto", "yes", "no"] = "auto"
    prefix: str = Field("aeon", pattern=r"^[A-Za-z0-9_.-]+$")
    #: Shards of every stream (bus.keys): a run lives in one, picked by its correlation id.
    #: Every worker reads every shard; on a cluster, shards spread the load over the masters.
    #: Every process of a deployment must use the same number.
    shards: Annotated[int, Field(ge=1, le=1024)] = 1
    #: Replicas that must hold a request before `submit` returns (Redis WAIT): 0 trusts the
    #: server alone; 1 keeps an accepted request through a failover of its master.
    wait_replicas: Annotated[int, Field(ge=0)] = 0
    wait_timeout_ms: Whole = 1_000
    #: Events one process handles at once per phase; LLM calls are I/O, so this can be large.
    concurrency: Whole = 256
    #: Entries fetched per XREADGROUP: batching is what makes the bus cheap per hop.
    max_records: Whole = 100
    #: How long a read waits for entries; also how soon a stopping worker notices (0 is refused:
    #: Redis would then block forever).
    block_ms: Whole = 500
    #: A pending entry idle this long belongs to a dead or stuck consumer and is claimed.
    claim_idle_ms: Annotated[int, Field(ge=100)] = 15_000
    claim_interval_s: Seconds = 2.0
    #: Attempts at an event (deliveries that started its handler) before it goes to dead letters.
    max_deliveries: Whole = 5
    #: Attempts of a failing handler within one delivery, with exponential backoff.
    handler_attempts: Whole = 3
    retry_backoff_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.2
    #: How long a worker holds an event it is working on before others may take it over.
    lock_lease_ms: Annotated[int, Field(ge=100)] = 30_000
    #: A backstop: entries a stream keeps at most. Streams are trimmed by what their groups
    #: acknowledged (bus.retention) long before this.
    stream_maxlen: Whole = 100_000
    #: Seconds an acknowledged entry (and an answers-stream entry) stays, for gateways that
    #: follow the streams with XREAD, and for the HTTP API, which reads a run in flight back
    #: from its newest event's entry: the default request timeout, so a run that keeps to it
    #: is readable while it runs (bus.retention).
    stream_keep_s: Whole = 300
    #: How often a worker trims its streams (bus.retention).
    trim_interval_s: Seconds = 10.0
    max_event_bytes: Annotated[int, Field(ge=1024)] = 1_000_000
    #: How long a run's answer and history are kept after it (compressed: bus.compact), for a
    #: gateway that comes back for them (`aeon answer`, the HTTP API's runs). A day: what a
    #: client that lost its connection needs, at a seventh of the memory a week held.
    answer_ttl_s: Annotated[Whole, renamed("AEON_ANSWER_KEEP_S", "AEON_ANSWER_TTL_S")] = 24 * 3600
    #: How long a handled event's "done" mark is kept, so a late copy of it is dropped.
    dedupe_ttl_s: Annotated[Whole, renamed("AEON_DEDUPE_KEEP_S", "AEON_DEDUPE_TTL_S")] = 24 * 3600
    #: Entries a run's answer text stream keeps at most (bus.answer_text; kept while the run
    #: goes on, and AEON_STREAM_KEEP_S once its answer is published): one per piece the
    #: model wrote (about a token each from a streaming server), over every candidate answer.
    #: Past it the oldest go, and a reader that missed them gets the whole answer at the end.
    answer_text_maxlen: Whole = 10_000
    #: The longest a memoised LLM reply is kept (each goes with its run's deadline).
    memo_ttl_s: Annotated[Whole, renamed("AEON_MEMO_KEEP_S", "AEON_MEMO_TTL_S")] = 24 * 3600
    #: How long past its run's deadline a memoised reply is also kept, so the run can be forked
    #: without paying again for the calls it made (runs.memo.ForkedMemo). 0 by default: a run
    #: can be forked until its deadline, and its memo costs nothing after (bench's retention
    #: target); an hour keeps about 6 KiB a run that hour longer.
    fork_keep_s: Annotated[int, Field(ge=0)] = 0
    shutdown_grace_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 25.0
    consumer_name: str = Field(default_factory=default_consumer_name, min_length=1)

    @field_validator("redis_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return check_redis_url(url) if url else None

    @field_validator("consumer_name")
    @classmethod
    def _name(cls, name: str) -> str:
        if name == LockState.DONE:
            raise ValueError(f"{name!r} marks a handled event's lock; choose another name")
        return name

    @model_validator(mode="after")
    def _work_together(self) -> BusSettings:
        """Marks and memos must outlive the wait before a dead worker's entry is redelivered,
        or the redelivery would handle again what was done, or call the LLM again."""
        for field in ("dedupe_ttl_s", "memo_ttl_s"):
            if getattr(self, field) * 1000 <= self.claim_idle_ms:
                raise ValueError(
                    f"{self.variable(field)} ({getattr(self, field)} s) must be longer than "
                    f"AEON_CLAIM_IDLE_MS ({self.claim_idle_ms} ms): raise it or lower the other"
                )
        return self

    def __repr__(self) -> str:
        url = redact(self.redis_url) if self.redis_url else None
        return f"BusSettings(redis_url={url!r}, prefix={self.prefix!r}, ...)"

    __str__ = __repr__
