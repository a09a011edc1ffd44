"""What stands before the API (`/v1/...`, MCP at `/mcp`, A2A at `/a2a`): a rate limit per
client, then the bearer token.

The rate limit comes first, so guessing tokens is as slow as any other request. Both answer
in the API's JSON (gateway.http.errors), in OpenAI's shape on the paths that speak its API. A
token is compared in constant time and never logged, echoed or kept beyond the request; the
page, health checks, OpenAPI document and A2A agent card are outside the guard (they hold
nothing a token protects).
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import parse_host_header
from starlette.types import ASGIApp, Receive, Scope, Send

from aeonloop.gateway.http.errors import error_response
from aeonloop.gateway.http.settings import HttpSettings

API_PREFIX = "/v1/"
#: Where `aeon serve` answers MCP (gateway.mcp_server.MCP_PATH): behind the same guard.
MCP_PATH = "/mcp"
#: Where `aeon serve` answers A2A's JSON-RPC (gateway.http.a2a_server): behind the same guard.
A2A_PATH = "/a2a"
#: Clients whose buckets are kept before full (idle) ones are dropped.
MAX_CLIENTS = 10_000


class RateLimiter:
    """A token bucket per client address: `per_s` requests a second, sustained, and `burst`
    at once. A bucket that has filled up again is the same as none, so those are dropped
    when there are many."""

    def __init__(
        self, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.per_s = per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def wait_s(self, client: str) -> float:
        """Take one request for `client`: 0 if allowed, else the seconds until one is."""
        now = self._clock()
        tokens, then = self._buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.per_s)
        if tokens < 1:
            self._buckets[client] = (tokens, now)
            return (1 - tokens) / self.per_s
        self._buckets[client] = (tokens - 1, now)
        if len(self._buckets) > MAX_CLIENTS:
            self._forget_idle(now)
        return 0.0

    def _forget_idle(self, now: float) -> None:
        full = [
            client
            for client, (tokens, then) in self._buckets.items()
            if tokens + (now - then) * self.per_s >= self.burst
        ]
        for client in full:
            del self._buckets[client]


class ApiGuard:
    """ASGI middleware: rate limit and bearer tokens on `/v1/...`, `/mcp` and `/a2a`, as
    HttpSettings says."""

    def __init__(self, app: ASGIApp, settings: HttpSettings) -> None:
        self.app = app
        self._tokens = [token.encode() for token in settings.http_tokens]
        self._limiter = (
            RateLimiter(settings.http_rate_per_s, settings.http_rate_burst)
            if settings.http_rate_per_s > 0
            else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _guarded(scope["path"]):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> ASGIApp | None:
        if self._limiter is not None:
            client = scope["client"][0] if scope.get("client") else "unknown"
            wait = self._limiter.wait_s(client)
            if wait:
                return error_response(
                    429,
                    None,
                    f"more than {self._limiter.burst} requests at once or "
                    f"{self._limiter.per_s:g} a second from {client}; try again in "
                    f"{wait:.1f} s",
                    {"Retry-After": str(math.ceil(wait))},
                    scope["path"],
                )
        if self._tokens and not self._authorized(Headers(scope=scope)):
            return error_response(
                401,
                "Authorization",
                "this API needs a bearer token: send `Authorization: Bearer <token>` with one "
                "of the tokens in AEON_HTTP_TOKENS",
                {"WWW-Authenticate": 'Bearer realm="aeon"'},
                scope["path"],
            )
        return None

    def _authorized(self, headers: Headers) -> bool:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        offered = given.strip().encode()
        # Every token is compared, so the time taken says nothing about which one was close.
        return sum(hmac.compare_digest(offered, token) for token in self._tokens) > 0


def _guarded(path: str) -> bool:
    return path.startswith(API_PREFIX) or any(
        path == base or path.startswith(base + "/") for base in (MCP_PATH, A2A_PATH)
    )


class HostGuard:
    """ASGI middleware refusing a request whose Host header is not one the server answers to
    (DNS rebinding: a page whose own name now resolves here may not read the API), with the
    API's JSON error: Starlette's TrustedHostMiddleware answers plain text."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self._allowed = [host.lower() for host in allowed_hosts]
        self._any = "*" in self._allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._any or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        parsed = parse_host_header(Headers(scope=scope).get("host"))
        host = parsed.host.lower() if parsed is not None else None
        if host is not None and any(self._matches(host, pattern) for pattern in self._allowed):
            await self.app(scope, receive, send)
            return
        reason = (
            "this server does not answer to that host name; call it by one it serves "
            "(AEON_HTTP_ALLOWED_HOSTS)"
        )
        await error_response(400, "Host", reason, None, scope["path"])(scope, receive, send)

    @staticmethod
    def _matches(host: str, pattern: str) -> bool:
        return host == pattern or (pattern.startswith("*") and host.endswith(pattern[1:]))
