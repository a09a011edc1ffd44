"""How the HTTP API says no: a status and one JSON object naming the field and the reason.

    {"error": "bad_input", "field": "max_ttl", "reason": "max TTL 101 is not a number of ..."}

The reasons are the ones `aeon ask` prints for the same mistakes (gateway.validation), so a
person reads the same words whichever door they came in by.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response

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
    CLIENT_CLOSED: "client_closed_request",
}


def refusal(error: ApiError) -> Response:
    """The response an `ApiError` (aeonloop.exceptions) stands for."""
    return error_response(error.status, error.field, error.reason, error.headers)


def error_response(
    status: int, field: str | None, reason: str, headers: Mapping[str, str] | None = None
) -> Response:
    body = {"error": ERROR_WORDS.get(status, "error"), "field": field, "reason": reason}
    return json_response(body, status, headers)


def json_response(
    data: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """JSON by orjson: a run's result can be large, and this is its hot path."""
    return Response(orjson.dumps(data), status, headers, media_type="application/json")
