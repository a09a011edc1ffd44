"""How the HTTP app answers when Redis fails in ways a test server cannot easily make: a
cluster with a slot uncovered, a node unreachable, a socket error. Each must be the API's
`503` with Retry-After (try again), never a bare `500`. Driven through the app's ASGI
interface, without a server."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from redis.exceptions import RedisClusterException, SlotNotCoveredError

from aeonloop.gateway.http.api import build_app
from aeonloop.gateway.http.settings import HttpSettings

FAILURES = [
    SlotNotCoveredError("slot 12 is not covered"),
    RedisClusterException("no node answered"),
    ConnectionResetError(104, "reset by peer"),
]


class _Redis:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def ping(self) -> bool:
        raise self.error


class _Client:
    def __init__(self, error: BaseException, reader_failure: str | None = None) -> None:
        self.redis = _Redis(error)
        self.reader_failure = reader_failure
        self.runs_awaited = 0
        self.max_passes = 8  # AEON_MAX_PASSES, which the OpenAPI document gives


class _Feed:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def recent(self, limit: int) -> Any:
        raise self.error


async def _get(app: Any, path: str) -> tuple[int, dict[str, str], Any]:
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], headers, orjson.loads(body)


@pytest.mark.parametrize("error", FAILURES, ids=lambda e: type(e).__name__)
async def test_redis_failing_is_503_with_retry_after(error: BaseException) -> None:
    app = build_app(_Client(error), _Feed(error), HttpSettings())  # type: ignore[arg-type]
    status, headers, body = await _get(app, "/v1/runs?limit=1")
    assert status == 503, body
    assert headers["retry-after"] == "1" and body["error"] == "unavailable"
    ready, _, said = await _get(app, "/readyz")
    assert ready == 503 and said["status"] == "unavailable"


async def test_readiness_names_a_reader_that_stopped() -> None:
    stopped = "the reader of the bus stopped (ResponseError: WRONGTYPE)"
    app = build_app(_Client(OSError(), stopped), _Feed(OSError()), HttpSettings())  # type: ignore[arg-type]
    status, _, body = await _get(app, "/readyz")
    assert status == 503 and body == {"status": "unavailable", "reason": stopped}
