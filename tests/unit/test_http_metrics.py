"""The HTTP gateway's request metrics: named by route template (never a run id), every
response counted (a guard's refusal before routing included), nothing when metrics are off."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from aeonloop.telemetry import metrics
from aeonloop.telemetry.http import UNMATCHED, RequestMetrics


async def run(request: Request) -> Response:
    return JSONResponse({"id": request.path_params["correlation_id"]})


class RefuseUnlessToken:
    """A guard that answers before routing, as the gateway's ApiGuard does."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and b"authorization" not in headers:
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


ROUTES = [Route("/v1/runs/{correlation_id}", run)]


def _app() -> Starlette:
    return Starlette(
        routes=ROUTES,
        middleware=[Middleware(RequestMetrics, routes=ROUTES), Middleware(RefuseUnlessToken)],
    )


def count(route: str, status: str) -> float:
    labels = {"method": "GET", "route": route, "status": status}
    return REGISTRY.get_sample_value("aeon_http_requests_total", labels) or 0.0


def test_requests_are_counted_by_route_template_and_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "_enabled", True)
    template = "/v1/runs/{correlation_id}"
    before = {
        key: count(*key) for key in ((template, "200"), (template, "401"), (UNMATCHED, "404"))
    }
    client = TestClient(_app())
    assert client.get("/v1/runs/abc", headers={"Authorization": "Bearer t"}).status_code == 200
    assert client.get("/v1/runs/def").status_code == 401  # refused before routing
    assert client.get("/elsewhere", headers={"Authorization": "Bearer t"}).status_code == 404
    assert count(template, "200") == before[template, "200"] + 1
    assert count(template, "401") == before[template, "401"] + 1
    assert count(UNMATCHED, "404") == before[UNMATCHED, "404"] + 1
    seconds = REGISTRY.get_sample_value(
        "aeon_http_request_seconds_count", {"method": "GET", "route": template}
    )
    assert seconds and seconds >= 2
    labels = [
        sample.labels
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name.startswith("aeon_http_")
    ]
    assert not any("abc" in value for found in labels for value in found.values())


def test_nothing_is_recorded_when_metrics_are_off() -> None:
    assert not metrics.enabled()
    before = count("/v1/runs/{correlation_id}", "200")
    client = TestClient(_app())
    assert client.get("/v1/runs/abc", headers={"Authorization": "Bearer t"}).status_code == 200
    assert count("/v1/runs/{correlation_id}", "200") == before
