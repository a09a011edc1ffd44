"""Bus settings, all from the environment so a worker needs no config file.

Every value has a default that suits one host; the README's Configuration table lists them.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

_CREDENTIALS = re.compile(r"(?<=://)[^@/]*@")
_QUERY_SECRET = re.compile(r"(?i)((?:password|username)=)[^&]*")


def redact(url: str) -> str:
    """The URL with any user:password part or ?password= masked, for logs and error messages."""
    return _QUERY_SECRET.sub(r"\1***", _CREDENTIALS.sub("***@", url))


def default_consumer_name() -> str:
    """Unique per process, and readable in XINFO CONSUMERS: host-pid."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class BusSettings:
    #: None means "no server configured": `aeon ask` then starts an embedded one.
    redis_url: str | None = None
    prefix: str = "aeon"
    #: Events one process handles at once per phase; LLM calls are I/O, so this can be large.
    concurrency: int = 256
    #: Entries fetched per XREADGROUP: batching is what makes the bus cheap per hop.
    max_records: int = 100
    block_ms: int = 500
    #: A pending entry idle this long belongs to a dead or stuck consumer and is claimed.
    claim_idle_ms: int = 15_000
    claim_interval_s: float = 2.0
    #: An event delivered this many times (crashes included) goes to dead letters.
    max_deliveries: int = 5
    #: Attempts of a failing handler within one delivery, with exponential backoff.
    handler_attempts: int = 3
    retry_backoff_s: float = 0.2
    #: How long a worker holds an event it is working on before others may take it over.
    lock_lease_ms: int = 30_000
    stream_maxlen: int = 100_000
    max_event_bytes: int = 1_000_000
    answer_ttl_s: int = 7 * 24 * 3600
    dedupe_ttl_s: int = 24 * 3600
    memo_ttl_s: int = 24 * 3600
    shutdown_grace_s: float = 25.0
    consumer_name: str = field(default_factory=default_consumer_name)

    def __post_init__(self) -> None:
        positive = ("concurrency", "max_records", "max_deliveries", "handler_attempts")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.prefix):
            raise ValueError(
                f"stream prefix may use letters, digits, '_', '.', '-': {self.prefix!r}"
            )

    def __repr__(self) -> str:
        url = redact(self.redis_url) if self.redis_url else None
        return f"BusSettings(redis_url={url!r}, prefix={self.prefix!r}, ...)"

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> BusSettings:
        """Read AEON_<FIELD> for every field (AEON_REDIS_URL, AEON_CONCURRENCY, ...)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"AEON_{f.name.upper()}")
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, raw, type(getattr(_DEFAULTS, f.name)))
        return cls(**values)

    def with_(self, **changes: Any) -> BusSettings:
        return replace(self, **changes)


def _parse(name: str, raw: str, kind: type) -> Any:
    if kind is type(None) or kind is str:
        return raw
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"AEON_{name.upper()} must be a {kind.__name__}, not {raw!r}") from None


_DEFAULTS = BusSettings(consumer_name="defaults")
