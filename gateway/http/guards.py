"""What stands before the API (`/v1/...`, MCP at `/mcp`, A2A at `/a2a`): a rate limit per
client, then the bearer token.

The rate limit comes first, so guessing tokens is as slow as any other request. The token
names the tenant the request is made for (AEON_HTTP_TOKENS's `name:token`), which the guard
puts in the request's state (`tenant_of`) for the endpoints that admit runs (aeonloop.tenants);
with no tokens configured, every request is the anonymous tenant's. Both answer
in the API's JSON (gateway.http.errors), in OpenAI's shape on the paths that speak its API. A
token is compared in constant time and never logged, echoed or kept beyond the request; the
page, health checks, OpenAPI document and A2A agent card are outside the guard (they hold
nothing a token protects).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from typing import Any

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import parse_host_header
from starlette.types import ASGIApp, Receive, Scope, Send

from aeonloop.bus.codec import text
from aeonloop.bus.redis_errors import FAILURES, said
from aeonloop.exceptions import ApiError
from aeonloop.gateway.client import DEFAULT_TIMEOUT_S, AeonClient, EntryHandler, answer_due_by
from aeonloop.gateway.http.errors import error_response
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.phases.events import ExecutionResult, FinalAnswerReady, utcnow
from aeonloop.settings import ANONYMOUS
from aeonloop.tenants.ledger import Ledger, QuotaExceeded, UsageReport, charge, today

log = logging.getLogger("aeon.http")

API_PREFIX = "/v1/"
#: Where `aeon serve` answers MCP (gateway.mcp_server.MCP_PATH): behind the same guard.
MCP_PATH = "/mcp"
#: Where `aeon serve` answers A2A's JSON-RPC (gateway.http.a2a_server): behind the same guard.
A2A_PATH = "/a2a"
#: Clients whose buckets are kept before full (idle) ones are dropped.
MAX_CLIENTS = 10_000
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
#: Where the guard leaves the tenant of a request, in its scope's state (`request.state`).
_TENANT = "tenant"


def tenant_of(scope: Scope) -> str:
    """The tenant a request through ApiGuard is made for."""
    return scope.get("state", {}).get(_TENANT, ANONYMOUS)


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
        self._tokens = [(token.encode(), name) for token, name in settings.tenants().items()]
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
        tenant = self._tenant(Headers(scope=scope)) if self._tokens else ANONYMOUS
        if tenant is None:
            return error_response(
                401,
                "Authorization",
                "this API needs a bearer token: send `Authorization: Bearer <token>` with one "
                "of the tokens in AEON_HTTP_TOKENS",
                {"WWW-Authenticate": 'Bearer realm="aeon"'},
                scope["path"],
            )
        scope.setdefault("state", {})[_TENANT] = tenant
        return None

    def _tenant(self, headers: Headers) -> str | None:
        """The tenant of the bearer token sent, or None when it is none of the tokens."""
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return None
        offered = given.strip().encode()
        # Every token is compared, so the time taken says nothing about which one was close.
        found = None
        for token, name in self._tokens:
            if hmac.compare_digest(offered, token):
                found = name
        return found


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


class TenantGate:
    """Runs submitted through the API, held to their tenant's quotas (tenants.ledger): a run is
    admitted before it is published, or refused 429 naming the quota, with Retry-After; its
    slot is settled, and its cost charged, when its answer is read (`settling`). With no
    ledger (an app built for a test), runs are submitted with their tenant and nothing more."""

    def __init__(self, ledger: Ledger | None = None) -> None:
        self.ledger = ledger
        self._settling: set[asyncio.Task[Any]] = set()

    async def submit(self, scope: Scope, client: AeonClient, **run: Any) -> str:
        """`client.submit(**run)` for the tenant of the request `scope` is, once admitted."""
        tenant = tenant_of(scope)
        if self.ledger is None:
            return await client.submit(**run, tenant=tenant)
        correlation_id = uuid.uuid4().hex
        await self._admit(tenant, correlation_id, run.get("timeout", DEFAULT_TIMEOUT_S))
        try:
            return await client.submit(**run, tenant=tenant, correlation_id=correlation_id)
        except BaseException:
            await self.ledger.release(tenant, correlation_id)
            raise

    async def fork(self, scope: Scope, client: AeonClient, parent: str, **change: Any) -> str:
        """`client.fork(parent, **change)` for the tenant of the request `scope` is, its fork
        admitted as a submitted run is, once its id is known (docs/forks.md): a fork that
        makes LLM calls counts against the same quotas."""
        tenant = tenant_of(scope)
        if self.ledger is None:
            return await client.fork(parent, **change, tenant=tenant)
        admitted: list[str] = []

        async def admit(correlation_id: str) -> None:
            await self._admit(tenant, correlation_id, change.get("timeout", DEFAULT_TIMEOUT_S))
            admitted.append(correlation_id)

        try:
            return await client.fork(parent, **change, tenant=tenant, admit=admit)
        except BaseException:
            for correlation_id in admitted:
                await self.ledger.release(tenant, correlation_id)
            raise

    async def _admit(self, tenant: str, correlation_id: str, timeout: float) -> None:
        """A slot of `tenant` for run `correlation_id`, due within `timeout`; ApiError(429)
        naming the quota past which it is refused."""
        assert self.ledger is not None
        due_by = answer_due_by(utcnow() + timedelta(seconds=timeout))
        try:
            await self.ledger.admit(tenant, correlation_id, due_by)
        except QuotaExceeded as past:
            log.info("run refused: %s", past.reason)
            headers = {"Retry-After": str(past.retry_after_s)}
            raise ApiError(429, past.quota, past.reason, headers) from None

    async def usage(self, scope: Scope, day: str | None) -> UsageReport:
        """The ledger's totals of `day` (today, UTC, if None) as the request `scope` may see
        them: its own tenant's, or every tenant's on an open API (no tokens: anyone who can
        reach it can read anything). ApiError(422) for a day that is not a date, 503 where no
        ledger is kept."""
        if day is None:
            day = today()
        elif not _DAY.fullmatch(day) or not _is_date(day):
            raise ApiError(422, "day", f"{day[:40]!r} is not a day: write it YYYY-MM-DD (UTC)")
        if self.ledger is None:
            raise ApiError(503, None, "this server keeps no ledger (it is not `aeon serve`)")
        tenant = tenant_of(scope)
        return await self.ledger.totals(day, None if tenant == ANONYMOUS else tenant)

    def priced(self, answer: ExecutionResult | None) -> ExecutionResult | None:
        """`answer` with its usage's cost by the price table (tenants.ledger.charge)."""
        if answer is None or self.ledger is None:
            return answer
        price = self.ledger.prices.get(self.ledger.model)
        cost = charge(answer.usage, price).total_cost
        return answer.model_copy(update={"usage": answer.usage.model_copy(update={"cost": cost})})

    def settling(self, also: EntryHandler) -> EntryHandler:
        """An entry handler that hands every entry to `also` and settles each answer read."""

        def take(stream: str, entry: bytes, fields: dict[bytes, bytes]) -> None:
            also(stream, entry, fields)
            if self.ledger is not None and text(fields, b"type") == FinalAnswerReady.__name__:
                answer = FinalAnswerReady.model_validate_json(fields[b"body"])
                task = asyncio.ensure_future(self._settle(answer))
                self._settling.add(task)
                task.add_done_callback(self._settling.discard)

        return take

    async def _settle(self, answer: FinalAnswerReady) -> None:
        assert self.ledger is not None
        try:
            await self.ledger.settle(answer.correlation_id, answer.result.usage)
        except FAILURES as error:
            # Its slot comes back when its lease runs out; its tokens go uncharged.
            log.warning("run %s: not settled (%s)", answer.correlation_id, said(error))


def _is_date(day: str) -> bool:
    try:
        date.fromisoformat(day)
    except ValueError:
        return False
    return True
