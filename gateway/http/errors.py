"""How the HTTP API says no: a status and one JSON object naming the field and the reason.

    {"error": "bad_input", "field": "max_ttl", "reason": "max TTL 101 is not a number of ..."}

The reasons are the ones `aeon ask` prints for the same mistakes (gateway.validation), so a
person reads the same words whichever door they came in by.

The endpoints that speak OpenAI's API (`/v1/chat/completions`, `/v1/models`: gateway.http.chat)
say no as OpenAI does, so its clients show the reason and raise the exception they raise for
the status (the guards' refusals on those paths included):

    {"error": {"message": "max_ttl: max TTL 101 is ...", "type": "invalid_request_error",
               "param": "max_ttl", "code": "bad_input"}}

with 400 where the rest of the API says 422 (OpenAI's status for a request it will not take).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response

from aeonloop.bus.redis_errors import refuses_writes, said
from aeonloop.bus.settings import redact
from aeonloop.exceptions import ApiError

#: What a response to a client that closed its connection mid-request is counted as: nginx's
#: "client closed request", so such a client is not counted as a failure of the server.
CLIENT_CLOSED = 499

#: The `error` word of each status the API answers with.
ERROR_WORDS = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "bad_input",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
    504: "no_answer",
    CLIENT_CLOSED: "client_closed_request",
}

#: Where the API speaks OpenAI's API (gateway.http.chat): those paths, and every path under them.
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
OPENAI_PATHS = (CHAT_PATH, MODELS_PATH)
#: OpenAI's error `type` by status (what its clients and docs call each kind of refusal).
_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def refusal(error: ApiError, path: str = "") -> Response:
    """The response an `ApiError` (aeonloop.exceptions) stands for, on `path`."""
    return error_response(error.status, error.field, error.reason, error.headers, path)


def error_response(
    status: int,
    field: str | None,
    reason: str,
    headers: Mapping[str, str] | None = None,
    path: str = "",
) -> Response:
    """The refusal of a request for `path`: in OpenAI's shape where it speaks OpenAI's API."""
    if speaks_openai(path):
        return json_response(openai_error(status, field, reason), openai_status(status), headers)
    body = {"error": ERROR_WORDS.get(status, "error"), "field": field, "reason": reason}
    return json_response(body, status, headers)


def openai_error(status: int, field: str | None, reason: str) -> dict[str, object]:
    """A refusal as OpenAI's API words it: a response's body, or an event of a stream that
    fails after it began (its clients raise it as an APIError)."""
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = ERROR_WORDS.get(status, "error")
    # Clients show the message alone, so it names the field too.
    message = f"{field}: {reason}" if field else reason
    return {"error": {"message": message, "type": kind, "param": field, "code": code}}


def openai_status(status: int) -> int:
    """The status OpenAI's API answers with where the rest of this API answers `status`."""
    return 400 if status == 422 else status


def speaks_openai(path: str) -> bool:
    """Whether `path` is one of the endpoints that speak OpenAI's API (or under one)."""
    return any(path == base or path.startswith(base + "/") for base in OPENAI_PATHS)


def json_response(
    data: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """JSON by orjson: a run's result can be large, and this is its hot path."""
    return Response(orjson.dumps(data), status, headers, media_type="application/json")


def redis_reason(error: BaseException) -> str:
    """What a person is told when Redis fails a request: whether to try again, never its
    credentials."""
    what = redact(said(error))
    if refuses_writes(error):
        return f"Redis refuses writes ({what}): nothing was stored; try again later"
    return f"Redis does not answer ({what}); try again once it is back"
