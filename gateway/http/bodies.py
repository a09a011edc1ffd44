"""A request's JSON body: read within the API's bounds, and checked as `aeon ask` checks its
input.

Two endpoints take a run in their bodies, the runs API (`POST /v1/runs`, gateway.http.api) and
the chat endpoint (`POST /v1/chat/completions`, gateway.http.chat): both read the body here, and
both check the run's fields with the same `request_checks` `aeon ask` uses, so a mistake reads
the same whichever door it came in by and nothing is published for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from aeonloop.exceptions import ApiError, BadInput, TooLarge
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.http.errors import CLIENT_CLOSED
from aeonloop.gateway.http.models import RunRequest
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.validation import parse_rules, request_checks

log = logging.getLogger("aeon.http")
B = TypeVar("B", bound=BaseModel)

#: What pydantic says of a bad field, as `aeon ask` would say it.
_TYPE_WORDS = {
    "missing": "is required",
    "string_type": "must be a string",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a JSON object",
}
#: The body's name of a field the checks name otherwise.
_BODY_FIELDS = {"timeout": "timeout_s"}


async def read_json(request: Request, settings: HttpSettings) -> Any:
    """The body as JSON, refused past AEON_HTTP_MAX_BODY_BYTES before it is all read.
    Only `Content-Type: application/json` is taken: a browser sends that from another
    site's page only after asking (CORS preflight), so no page can submit runs unasked."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(
            415, "Content-Type", "send the body as JSON, with Content-Type: application/json"
        )
    limit = settings.http_max_body_bytes
    too_large = ApiError(
        413, "body", f"the body is over {limit:,} bytes (AEON_HTTP_MAX_BODY_BYTES)"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    wait = settings.http_body_timeout_s
    try:
        async with asyncio.timeout(wait):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        reason = f"the body did not arrive within {wait:g} s (AEON_HTTP_BODY_TIMEOUT_S)"
        # The rest of the body may never come: the connection ends with the answer.
        raise ApiError(408, "body", reason, {"Connection": "close"}) from None
    except ClientDisconnect:  # nobody to answer: a client error, not the server's
        log.info("a client closed its connection after %d bytes of its body", size)
        raise ApiError(
            CLIENT_CLOSED, "body", "the client closed the connection before the whole body"
        ) from None
    try:
        return orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as error:
        raise ApiError(422, "body", f"the body is not JSON: {error}") from None


def parsed(
    model: type[B], data: Any, what: str = "a run", example: str = '{"request": "Explain tides"}'
) -> B:
    """`data` read as the body `model` says; ApiError(422) naming the first field at fault. A
    field the model does not have is named as not one of `what`'s; a body that is no object is
    shown `example`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in problem["loc"]) or "body"
        raise ApiError(422, field, _plain(problem, model, what, example)) from None


def _plain(problem: Any, model: type[BaseModel], what: str, example: str) -> str:
    kind, context = problem["type"], problem.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"is not a field of {what}; the fields are {', '.join(model.model_fields)}"
    if kind == "greater_than_equal":
        return f"must be at least {context['ge']} (got {problem['input']!r})"
    if kind == "less_than_equal":
        return f"must be at most {context['le']} (got {problem['input']!r})"
    if kind == "model_type":
        return f"must be a JSON object, e.g. {example}"
    if kind == "value_error":  # a model's own check, whose message says what to do
        return str(problem["msg"]).removeprefix("Value error, ")
    return _TYPE_WORDS.get(kind, problem["msg"])


def checked_run(
    body: RunRequest, client: AeonClient, fields: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The submit's arguments for a run, checked as `aeon ask` checks its input against the
    client's limits (AEON_MAX_PASSES, the webhooks allowed, the files' and the earlier turns'
    limits); ApiError names the first field at fault, as `fields` rename it for the body it
    came in (the runs API's names otherwise): 413 for one past a limit on bytes, else 422."""
    checks = request_checks(
        client.limits,
        body.request,
        max_ttl=body.max_ttl,
        timeout=body.timeout_s,
        token_budget=body.token_budget,
        webhook_url=body.webhook_url,
        files=body.files,
        tools=body.tools,
        messages=body.messages,
    )

    def rules() -> list:
        return [] if body.rules is None else parse_rules(body.rules, source="rules")

    names = {**_BODY_FIELDS, **(fields or {})}
    checked: dict[str, Any] = {"threshold": body.threshold, "approve_plan": body.approve_plan}
    if body.effort is not None:  # None: the chat endpoint's reasoning_effort, or AEON_EFFORT
        checked["effort"] = body.effort
    for field, check in {"request": checks["request"], "rules": rules, **checks}.items():
        try:
            checked[field] = check()
        except BadInput as error:
            raise ApiError(status_of(error), names.get(field, field), str(error)) from None
    return checked


def status_of(error: BadInput) -> int:
    """413 for input past a limit on bytes (TooLarge), else 422."""
    return 413 if isinstance(error, TooLarge) else 422
