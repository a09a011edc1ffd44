"""How the HTTP app answers when Redis fails in ways a test server cannot easily make: a
cluster with a slot uncovered, a node unreachable, a socket error. Each must be the API's
`503` with Retry-After (try again), never a bare `500`. And how the endpoints that speak
OpenAI's API say no, the guards' refusals included: in OpenAI's shape, where the rest of the
API keeps its own. Driven through the app's ASGI interface, without a server."""

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


async def _get(
    app: Any, path: str, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, dict[str, str], Any]:
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
        "headers": headers or [(b"host", b"127.0.0.1")],
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


def _openai_error(body: Any, param: str | None, kind: str) -> str:
    """The message of an error in OpenAI's shape, after checking its other fields."""
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["type"]) == (param, kind)
    return error["message"]


async def test_the_openai_endpoints_refuse_in_openais_shape_and_the_rest_in_aeons() -> None:
    settings = HttpSettings(http_tokens=("t" * 20,), http_rate_per_s=1, http_rate_burst=2)
    app = build_app(_Client(OSError()), _Feed(OSError()), settings)  # type: ignore[arg-type]
    status, headers, body = await _get(app, "/v1/models")
    assert status == 401 and headers["www-authenticate"] == 'Bearer realm="aeon"'
    message = _openai_error(body, "Authorization", "authentication_error")
    assert message.startswith("Authorization: this API needs a bearer token")
    status, _, body = await _get(app, "/v1/runs")
    assert status == 401 and body["error"] == "unauthorized" and body["field"] == "Authorization"
    status, headers, body = await _get(app, "/v1/chat/completions")  # the burst is spent
    assert status == 429 and int(headers["retry-after"]) >= 1
    _openai_error(body, None, "rate_limit_error")


async def test_a_bad_host_and_a_wrong_method_on_the_chat_endpoint_in_openais_shape() -> None:
    app = build_app(_Client(OSError()), _Feed(OSError()), HttpSettings())  # type: ignore[arg-type]
    status, _, body = await _get(app, "/v1/chat/completions", [(b"host", b"evil.example")])
    assert status == 400
    assert "AEON_HTTP_ALLOWED_HOSTS" in _openai_error(body, "Host", "invalid_request_error")
    status, headers, body = await _get(app, "/v1/chat/completions")
    assert status == 405 and headers["allow"] == "POST"
    _openai_error(body, "method", "invalid_request_error")
    status, _, body = await _get(app, "/v1/models/gpt-4o")
    assert status == 404
    assert "'aeon'" in _openai_error(body, "model", "not_found_error")
    status, _, body = await _get(app, "/v1/models")
    assert status == 200 and [model["id"] for model in body["data"]] == ["aeon"]
