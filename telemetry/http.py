"""What an HTTP gateway records: requests by route and status, their latency, open streams.

An ASGI middleware rather than code in each endpoint: it sees every response, refusals by the
guards and errors included, and names each by the route that matched (`/v1/runs/{correlation_id}`,
not the path, so a label never holds a run id).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.routing import Match

from aeonloop.telemetry import metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The route label of a request no route matched (a 404 on an unknown path).
UNMATCHED = "unmatched"


class RequestMetrics:
    """Counts each HTTP response by method, route and status, and times it to its first byte.

    `routes` are the app's (Starlette `BaseRoute`s): a request refused before routing (by a
    guard) is still named by the route it asked for.
    """

    def __init__(self, app: ASGIApp, routes: Sequence[Any]) -> None:
        self.app = app
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not metrics.enabled():
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers if the app fails before it responds

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                seconds = time.perf_counter() - started
                route = self._route(scope)
                metrics.HTTP_SECONDS.labels(scope["method"], route).observe(seconds)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            metrics.HTTP_REQUESTS.labels(scope["method"], self._route(scope), str(status)).inc()

    def _route(self, scope: Scope) -> str:
        """The path template of the route that matched (Starlette sets `scope["route"]`), or
        of the one that would have, for a request refused before routing."""
        matched = scope.get("route")
        if matched is None:
            matched = next((r for r in self._routes if r.matches(scope)[0] != Match.NONE), None)
        return getattr(matched, "path", None) or UNMATCHED


def scrape() -> tuple[bytes, str]:
    """The /metrics body and its content type."""
    return generate_latest(), CONTENT_TYPE_LATEST
