"""Bounds on the connections `aeon serve` keeps: how long a request's head may take to arrive.

uvicorn bounds a connection idle between two requests (its keep-alive timeout, 5 s), but not
one that never finishes sending a request's head: opened and left silent, or stalled
mid-headers. Any client could hold connections so without end. `BoundedH11` closes one whose
request head has not fully arrived `header_timeout_s` after the connection opened, or after
the first byte of its next request; the body's own timeout is the app's (HttpApi._body), and
the number of connections at once is uvicorn's `limit_concurrency` (AEON_HTTP_MAX_CONNECTIONS).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("aeon.http")


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's head."""

    header_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_due: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_head()

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._expect_head()  # the first bytes of a next request: its head is due
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # a request's head arrived whole
            self._head_arrived()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def _expect_head(self) -> None:
        if self._head_due is None:
            self._head_due = self.loop.call_later(self.header_timeout_s, self._head_late)

    def _head_arrived(self) -> None:
        if self._head_due is not None:
            self._head_due.cancel()
            self._head_due = None

    def _head_late(self) -> None:
        self._head_due = None
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request in progress: its head did arrive
        if not self.transport.is_closing():
            log.info(
                "closed a connection from %s whose request head did not arrive within %g s "
                "(AEON_HTTP_HEADER_TIMEOUT_S)",
                _peer(self.client),
                self.header_timeout_s,
            )
            self.transport.close()


@functools.cache
def bounded_h11(header_timeout_s: float) -> type[BoundedH11]:
    """The protocol class uvicorn is given (its Config takes a class, not an instance)."""
    return type("BoundedH11", (BoundedH11,), {"header_timeout_s": header_timeout_s})


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "an unknown peer"
