"""The HTTP API and the run page, as one Starlette app over the client the CLI uses.

    POST /v1/runs                 submit (202), or with ?wait=N the result if it comes in time
    POST /v1/runs/{id}/cancel     cancel (202), 404 for an unknown run, 409 for an answered one
    POST /v1/runs/{id}/fork       fork the run (202, or 200 answered before), 404 if it cannot be
    GET  /v1/runs                 the newest runs, with their answers when stored
    GET  /v1/runs/{id}            the result (200), the newest step while running (202), or 404
    GET  /v1/runs/{id}/events     Server-Sent Events, one per step, ending with the answer
    GET  /v1/usage                a day's tokens and cost per tenant and model (aeonloop.tenants)
    POST /v1/chat/completions     OpenAI's Chat Completions API over runs (gateway.http.chat)
    GET  /v1/models               the one model it serves, `aeon`
    GET  /healthz, /readyz        the process is up; Redis answers
    GET  /openapi.json, /docs     the API described; the run page at /
    /mcp                          MCP over streamable HTTP: the tool `ask` (gateway.mcp_server)
    /a2a                          A2A's JSON-RPC, its agent card at /.well-known/agent-card.json
                                  (gateway.http.a2a_server)

Submitting goes through `AeonClient.submit`, after the same checks `aeon ask` makes (each
refusal names the field), so nothing is published for bad input. Reading goes through the run
feed (gateway.http.run_feed): a run is read back from Redis, and its events follow the bus live.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from aeonloop.bus.redis_errors import FAILURES
from aeonloop.exceptions import AnswerTimeout, ApiError, BadInput, ForeignEventId, ParentGone
from aeonloop.gateway.client import AeonClient, fork_point
from aeonloop.gateway.http.bodies import checked_run, parsed, read_json, status_of
from aeonloop.gateway.http.chat import RUN_ID_HEADER, ChatApi
from aeonloop.gateway.http.errors import (
    CHAT_PATH,
    MODELS_PATH,
    error_response,
    json_response,
    redis_reason,
    refusal,
)
from aeonloop.gateway.http.guards import MCP_PATH, ApiGuard, HostGuard, TenantGate
from aeonloop.gateway.http.models import (
    MAX_RECENT,
    MAX_WAIT_S,
    Approval,
    ForkRequest,
    Lineage,
    Progress,
    RecentRun,
    Run,
    RunRequest,
    StepEvent,
    WebhookOutcome,
    links,
)
from aeonloop.gateway.http.openapi import openapi_document
from aeonloop.gateway.http.run_feed import (
    Recent,
    RunFeed,
    RunView,
    WireStep,
    stream_steps,
    wire_steps,
)
from aeonloop.gateway.http.run_steps import (
    EventId,
    checks_not_held,
    degraded_because,
    webhook_data,
)
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.validation import check_timeout, parse_rules
from aeonloop.limits import MAX_TTL_CAP
from aeonloop.phases import approvals
from aeonloop.phases.events import Fork
from aeonloop.phases.models import Plan
from aeonloop.runs.cancels import CancelOutcome
from aeonloop.telemetry.http import RequestMetrics, scrape

log = logging.getLogger("aeon.http")

STATIC = Path(__file__).with_name("static")
#: A correlation id as Aeon makes them (32 hex digits) or a producer may choose them.
_CORRELATION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: Keep-alive comments on an idle event stream, so proxies do not cut it.
PING_S = 15
#: A watcher whose socket took no bytes for this long is dropped (it may resume by its id).
SEND_TIMEOUT_S = 30.0
#: How long a reader waits between two tries of a dropped event stream (SSE `retry:`).
RETRY_MS = 1_000
_READY_TIMEOUT_S = 2.0
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class HttpApi:
    """The endpoints, bound to one client, one run feed and the HTTP settings."""

    def __init__(
        self,
        client: AeonClient,
        feed: RunFeed,
        settings: HttpSettings,
        tenants: TenantGate | None = None,
    ) -> None:
        self.client = client
        self.feed = feed
        self.settings = settings
        self.tenants = tenants or TenantGate()

    # -- runs ---------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        """`/v1/runs`: GET lists the newest runs, POST submits one."""
        if request.method == "POST":
            return await self.submit(request)
        return await self.recent(request)

    async def submit(self, request: Request) -> Response:
        wait = _number(request.query_params.get("wait", "0"), "wait", 0, MAX_WAIT_S)
        body = checked_run(parsed(RunRequest, await read_json(request, self.settings)), self.client)
        if body["approve_plan"]:
            wait = 0  # it pauses for its plan's approval before any answer: 202 at once
        # Watched only when this request waits for the answer: the client keeps a watched
        # run's answer until someone waits for it, and nobody would.
        try:
            correlation_id = await self.tenants.submit(
                request.scope, self.client, **body, watch=bool(wait)
            )
        except BadInput as error:  # the whole event over AEON_MAX_EVENT_BYTES
            raise ApiError(status_of(error), "body", str(error)) from None
        self.feed.note_submitted(correlation_id)
        headers = {"Location": links(correlation_id).self}
        if wait:
            try:
                result = await self.client.wait(correlation_id, wait)
            except AnswerTimeout:
                pass
            else:
                view = RunView(None, None, self.tenants.priced(result))
                return _run_response(correlation_id, view, headers, body["request"])
        return _accepted(correlation_id, "running", body["request"], headers)

    async def run(self, request: Request) -> Response:
        correlation_id = _correlation_id(request)
        view = await self.feed.view(correlation_id)
        if view is None:
            raise _unknown(correlation_id)
        view = dataclasses.replace(view, answer=self.tenants.priced(view.answer))
        if view.answer is None:
            paused = await self.client.awaiting(correlation_id)
            if paused is not None:
                request = paused.run.request
                return _accepted(correlation_id, "awaiting_approval", request, plan=paused.run.plan)
        cancelling = view.answer is None and await self.client.cancel_requested(correlation_id)
        forked = await self.client.lineage(correlation_id)
        return _run_response(correlation_id, view, cancelling=cancelling, forked=forked)

    async def cancel(self, request: Request) -> Response:
        """202 once the cancel is recorded (again is the same); 409 when the run already has
        its answer, which stays; 404 when it is unknown here."""
        correlation_id = _correlation_id(request)
        if not await self.feed.known(correlation_id):
            raise _unknown(correlation_id)
        view = await self.feed.view(correlation_id)
        if view is None or view.answer is None:
            outcome = await self.client.cancel(correlation_id)
            if outcome is CancelOutcome.REQUESTED:
                return _accepted(correlation_id, "cancelling", view and view.request)
        raise ApiError(
            409, "id", f"run {correlation_id} already has its answer; there is nothing to cancel"
        )

    async def approve(self, request: Request) -> Response:
        """202 once a paused run's plan is approved (with the body's plan in its place, if it
        carries one); 409 when the run is not awaiting approval; 404 when it is unknown."""
        correlation_id = _correlation_id(request)
        plan = None
        if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in (
            request.headers
        ):
            plan = _approval(await read_json(request, self.settings))
        if not await self.feed.known(correlation_id):
            raise _unknown(correlation_id)
        if not await self.client.approve(correlation_id, plan):
            raise ApiError(
                409,
                "id",
                f"run {correlation_id} is not awaiting approval (not yet, or no longer: "
                "approved, cancelled, or past its deadline)",
            )
        view = await self.feed.view(correlation_id)
        return _accepted(correlation_id, "running", view and view.request)

    async def fork(self, request: Request) -> Response:
        """`POST /v1/runs/{id}/fork` (docs/forks.md): 202 with the fork's id; 200 with its
        result when the same fork was answered before (the same change of the same run is one
        run); 404 when the run cannot be forked (unknown, expired, its replies gone); 422
        naming the field that cannot be used."""
        correlation_id = _correlation_id(request)
        body = ForkRequest()
        if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in (
            request.headers
        ):
            data = await read_json(request, self.settings)
            body = parsed(ForkRequest, data, "a fork", '{"from_pass": 2}')
        change = _fork_change(body)
        try:
            fork_id = await self.tenants.fork(
                request.scope, self.client, correlation_id, **change, watch=False
            )
        except ParentGone as error:
            raise ApiError(404, "id", str(error)) from None
        except BadInput as error:  # the parent's request past this gateway's limits
            raise ApiError(status_of(error), "id", str(error)) from None
        self.feed.note_submitted(fork_id)
        headers = {"Location": links(fork_id).self}
        view = await self.feed.view(fork_id)
        if view is not None and view.answer is not None:
            view = dataclasses.replace(view, answer=self.tenants.priced(view.answer))
            return _run_response(fork_id, view, headers)
        return _accepted(fork_id, "running", view and view.request, headers)

    async def recent(self, request: Request) -> Response:
        limit = _whole(request.query_params.get("limit", "20"), "limit", 1, MAX_RECENT)
        rows = [_recent(run) for run in await self.feed.recent(limit)]
        return json_response({"runs": [row.model_dump(mode="json") for row in rows]})

    async def events(self, request: Request) -> Response:
        correlation_id = _correlation_id(request)
        after = _last_event_id(request)
        watch = self.feed.watch(correlation_id)
        try:
            if not await self.feed.load(watch.run, after):
                raise _unknown(correlation_id)
        except ForeignEventId as error:
            watch.release()
            raise ApiError(422, "Last-Event-ID", str(error)) from None
        except BaseException:
            watch.release()
            raise
        if after is not None and after.order >= watch.run.view.last_order:
            watch.release()
            return Response(status_code=204)  # all sent: an EventSource stops reconnecting

        async def frames() -> AsyncIterator[ServerSentEvent]:
            first = True
            async for step in stream_steps(watch, after):
                retry = RETRY_MS if first else None
                first = False
                # A waiting line has no id (""): it marks no place to resume from.
                yield ServerSentEvent(
                    step.data, event=step.kind, id=step.event_id or None, retry=retry
                )

        return EventSourceResponse(
            frames(),
            ping=PING_S,
            send_timeout=SEND_TIMEOUT_S,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            # A stream that never starts (a HEAD, a reader gone at once) lets go here.
            background=BackgroundTask(watch.release),
        )

    # -- the ledger ---------------------------------------------------------------------------

    async def usage(self, request: Request) -> Response:
        """`GET /v1/usage?day=YYYY-MM-DD`: the day's tokens and cost, per tenant and model."""
        report = await self.tenants.usage(request.scope, request.query_params.get("day"))
        return json_response(report.model_dump(mode="json"))

    # -- the process --------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        stats = {**self.feed.stats(), "awaited_runs": self.client.runs_awaited}
        return json_response({"status": "ok", **stats})

    async def readyz(self, request: Request) -> Response:
        """Ready while Redis answers and every background reader reads: a stopped one would
        leave live streams and waits hanging while the process looks well."""
        stopped = self.client.reader_failure
        if stopped:
            return json_response({"status": "unavailable", "reason": stopped}, 503)
        try:
            await asyncio.wait_for(self.client.redis.ping(), _READY_TIMEOUT_S)
        except FAILURES as error:
            return json_response({"status": "unavailable", "reason": redis_reason(error)}, 503)
        return json_response({"status": "ready"})


def _approval(data: Any) -> Plan | None:
    """The plan an approval's body carries, if any; ApiError(422) naming what is wrong."""
    body = parsed(Approval, data, "an approval")
    return approvals.plan_from_output(body.plan) if body.plan is not None else None


def _fork_change(body: ForkRequest) -> dict[str, Any]:
    """`AeonClient.fork`'s arguments from a fork's body, each checked as `aeon fork` checks
    its options; ApiError(422) naming the field at fault."""
    checks: dict[str, Callable[[], Any]] = {
        "rules": lambda: None if body.rules is None else parse_rules(body.rules, "rules"),
        "plan": lambda: None if body.plan is None else approvals.plan_from_output(body.plan),
        "timeout_s": lambda: check_timeout(body.timeout_s),
    }
    if body.from_pass is not None and not 1 <= body.from_pass <= MAX_TTL_CAP:
        raise ApiError(422, "from_pass", f"must be a pass from 1 to {MAX_TTL_CAP}")
    change: dict[str, Any] = {"from_pass": body.from_pass}
    for field, check in checks.items():
        try:
            change[field] = check()
        except (BadInput, ValueError) as error:
            raise ApiError(422, field, str(error)) from None
    try:
        fork_point(body.from_pass, change["plan"])
    except BadInput as error:
        raise ApiError(422, "from_pass", str(error)) from None
    change["timeout"] = change.pop("timeout_s")
    return change


def _number(text: str, field: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # NaN fails every comparison
        raise ApiError(422, field, f"{text[:40]!r} is not a number from {low:g} to {high:g}")
    return value


def _whole(text: str, field: str, low: int, high: int) -> int:
    """A whole number from `low` to `high` (`3.0` is one), else ApiError(422)."""
    value = _number(text, field, low, high)
    if not value.is_integer():
        raise ApiError(422, field, f"{text[:40]!r} is not a whole number from {low} to {high}")
    return int(value)


def _correlation_id(request: Request) -> str:
    correlation_id = request.path_params["correlation_id"]
    if not _CORRELATION_ID.fullmatch(correlation_id):
        raise ApiError(
            422, "id", "not a correlation id: letters, digits, _ . : - only, at most 128"
        )
    return correlation_id


def _last_event_id(request: Request) -> EventId | None:
    """The id a reader continues after; none sent, from the start. One sent empty is refused
    like any id this API never gave (a browser sends none rather than an empty one)."""
    text = request.headers.get("last-event-id")
    if text is None:
        return None
    try:
        return EventId.parse(text)
    except ValueError as error:
        raise ApiError(422, "Last-Event-ID", str(error)) from None


def _unknown(correlation_id: str) -> ApiError:
    return ApiError(
        404,
        "id",
        f"no run {correlation_id}: unknown here, or its answer expired (answers are kept "
        "AEON_ANSWER_TTL_S) and its events are gone",
    )


def _accepted(
    correlation_id: str,
    state: str,
    request: str | None,
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> Response:
    """202 with the run as it stands: accepted, and not answered yet."""
    run = Run(
        correlation_id=correlation_id,
        state=state,
        request=request,
        links=links(correlation_id),
        **fields,
    )
    return json_response(run.model_dump(mode="json"), 202, headers)


def _run_response(
    correlation_id: str,
    view: RunView,
    headers: dict[str, str] | None = None,
    request: str | None = None,
    cancelling: bool = False,
    forked: Fork | None = None,
) -> Response:
    """200 with the result when answered; 202 with the newest step while running (or
    cancelling); 200 with the steps it took once its deadline passed with no answer (it will
    not get one). `forked`: the run it is a fork of, if it is one."""
    give_up_in = view.seconds_to_give_up()
    lost = give_up_in is not None and give_up_in <= 0
    running = "cancelling" if cancelling else "running"
    state = "answered" if view.answer else "no_answer" if lost else running
    run = Run(
        correlation_id=correlation_id,
        state=state,
        request=view.request or request,
        result=view.answer,
        degraded_because=degraded_because(view.answer) if view.answer else [],
        checks_not_held=checks_not_held(view.answer) if view.answer else [],
        progress=None if view.answer else _progress(wire_steps(view)),
        webhook=_webhook(view),
        links=links(correlation_id),
        forked_from=Lineage(parent=forked.parent, from_pass=forked.from_pass) if forked else None,
    )
    status = 202 if state in ("running", "cancelling") else 200
    return json_response(run.model_dump(mode="json"), status, headers)


def _webhook(view: RunView) -> WebhookOutcome | None:
    """The webhook of an answered run that named one: `pending` until the webhooks group is
    done with it, then its outcome."""
    if not (view.answer and view.webhook_named):
        return None
    if view.webhook is None:
        return WebhookOutcome(outcome="pending")
    return WebhookOutcome.model_validate(webhook_data(view.webhook))


def _progress(steps: list[WireStep]) -> Progress:
    latest = steps[-1] if steps else None
    return Progress(
        steps_done=len(steps),
        latest=latest
        and StepEvent(kind=latest.kind, id=latest.event_id, data=orjson.loads(latest.data)),
    )


def _recent(listed: Recent) -> RecentRun:
    run, answer = listed.request, listed.answer
    final = answer.final_answer if answer else None
    return RecentRun(
        correlation_id=run.correlation_id,
        request=run.request[:300],
        submitted_at=run.created_at.isoformat(),
        state=listed.state(),
        status=answer.status if answer else None,
        degraded=answer.degraded if answer else None,
        confidence=final.confidence if final else None,
        total_passes=answer.total_passes if answer else None,
        elapsed_seconds=answer.elapsed_seconds if answer else None,
        links=links(run.correlation_id),
    )


# -- the app ----------------------------------------------------------------------------------


def build_app(
    client: AeonClient, feed: RunFeed, settings: HttpSettings, tenants: TenantGate | None = None
) -> Starlette:
    """The app; `app.state.mcp_sessions` are its MCP sessions, which answer at MCP_PATH while
    their `run()` is entered (`aeon serve` does, around serving); `app.state.a2a` its A2A
    agent, closed when it stops. `tenants` admits the runs submitted (none: no quotas, no
    ledger)."""
    from aeonloop.gateway import mcp_server
    from aeonloop.gateway.http.a2a_server import build_a2a

    tenants = tenants or TenantGate()
    api = HttpApi(client, feed, settings, tenants)
    chat = ChatApi(client, feed, settings, tenants)
    mcp_sessions = mcp_server.http_sessions(
        mcp_server.build_server(client), settings.http_max_body_bytes
    )
    a2a = build_a2a(client, settings)
    openapi = orjson.dumps(openapi_document(client.max_passes))

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_PAGE_HEADERS)

    async def docs(request: Request) -> Response:
        return FileResponse(STATIC / "docs.html", headers=_PAGE_HEADERS)

    async def openapi_json(request: Request) -> Response:
        return Response(openapi, media_type="application/json")

    async def metrics_text(request: Request) -> Response:
        body, media_type = scrape()
        return Response(body, media_type=media_type)

    routes = [
        Route("/", page),
        Route("/docs", docs),
        Route("/openapi.json", openapi_json),
        Route("/metrics", metrics_text),
        Route("/healthz", api.healthz),
        Route("/readyz", api.readyz),
        # One route per path, so a 405 names every method the path serves (Allow).
        Route("/v1/runs", api.runs, methods=["GET", "POST"]),
        Route("/v1/runs/{correlation_id}", api.run, methods=["GET"]),
        Route("/v1/runs/{correlation_id}/events", api.events, methods=["GET"]),
        Route("/v1/runs/{correlation_id}/cancel", api.cancel, methods=["POST"]),
        Route("/v1/runs/{correlation_id}/approve", api.approve, methods=["POST"]),
        Route("/v1/runs/{correlation_id}/fork", api.fork, methods=["POST"]),
        Route("/v1/usage", api.usage, methods=["GET"]),
        # OpenAI's Chat Completions API (gateway.http.chat).
        Route(CHAT_PATH, chat.completions, methods=["POST"]),
        Route(MODELS_PATH, chat.models, methods=["GET"]),
        Route(MODELS_PATH + "/{model}", chat.model_of, methods=["GET"]),
        Mount("/static", _PageFiles(directory=STATIC)),
        Route(MCP_PATH, mcp_server.http_endpoint(mcp_sessions)),
        # A2A: the card at the well-known path, JSON-RPC at A2A_PATH (gateway.http.a2a_server).
        *a2a.routes,
    ]
    middleware = [
        # Outermost: every response is counted, the other guards' refusals included.
        Middleware(RequestMetrics, routes=routes),
        # DNS rebinding: a page whose own name now resolves here may not read the API.
        Middleware(HostGuard, allowed_hosts=settings.allowed_hosts()),
        Middleware(ApiGuard, settings=settings),
    ]
    if settings.http_cors_origins:
        cors = Middleware(
            CORSMiddleware,
            allow_origins=list(settings.http_cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            expose_headers=["Location", RUN_ID_HEADER],
        )
        middleware.insert(1, cors)  # outside the guards: refusals carry CORS headers too
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            # Redis failing (a cluster's too): 503 with Retry-After, not 500.
            **dict.fromkeys(FAILURES, _redis_error),
        },
    )
    app.state.mcp_sessions = mcp_sessions
    app.state.a2a = a2a
    return app


class _PageFiles(StaticFiles):
    """The page's files, each with the page's headers: /static/index.html is the page too, and
    must not be framed or sniffed any more than / is."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(_PAGE_HEADERS)
        return response


async def _api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return refusal(error, request.url.path)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    if error.status_code == 404:
        path = request.url.path
        return error_response(404, "path", f"no such endpoint: {path}", None, path)
    if error.status_code == 405:
        reason = f"{request.method} is not served here"
        return error_response(405, "method", reason, error.headers, request.url.path)
    return error_response(
        error.status_code, None, str(error.detail), error.headers, request.url.path
    )


async def _redis_error(request: Request, error: Exception) -> Response:
    return error_response(503, None, redis_reason(error), {"Retry-After": "1"}, request.url.path)
