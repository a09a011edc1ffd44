"""How an event sits in a stream entry: three flat fields, readable with redis-cli.

    type  the event's class name, so a consumer picks the model without parsing the body
    cid   the correlation id, so a gateway filters entries without decoding them
    body  the event as JSON, always the last field

and, when tracing is on, `traceparent` (and `tracestate`) before them: the W3C trace context of
the span that published the event (telemetry.tracing).

Encoding and decoding use Pydantic's compiled JSON path (model_dump_json / model_validate_json):
one pass in Rust each way, no intermediate dict, which measured cheaper than orjson over
model_dump. orjson serves the bus's own records (dead letters), which are plain dicts.

Consumers also take what a FastStream app publishes with `broker.publish(event, stream=...)`:
one `__data__` field holding FastStream's envelope (its headers, then the body), parsed with
FastStream's own parser. The event's type is the `type` header, or the stream's only type; a
body without a correlation id takes FastStream's `correlation_id` header, and one without an
event id gets one derived from the envelope's bytes (so a redelivery, or the same message
published twice, decodes the same id, and two different messages never share one). Aeon
itself keeps writing the flat fields: a gateway reads `cid` without parsing anything, and
decoding a flat entry measured cheaper (docs/events.md, "FastStream's wire form").
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import orjson
from pydantic import BaseModel, ValidationError

from aeonloop.exceptions import DecodeError
from aeonloop.telemetry.tracing import TRACE_FIELDS

Fields = dict[bytes, bytes]
#: The one field of a FastStream stream entry: its envelope.
FASTSTREAM_FIELD = b"__data__"


class Routable(Protocol):
    """What the bus needs of an event: its stream, ids and JSON; phases.events.Event fits."""

    STREAM: str
    event_id: str
    correlation_id: str

    def model_dump_json(self) -> str: ...


@runtime_checkable
class Published(Routable, Protocol):
    """An event of the answers stream: the commit that publishes it settles the run's answer
    text stream on its text (runs.answer_text); phases.events.FinalAnswerReady fits."""

    @property
    def published_text(self) -> str: ...


def encode(event: Routable) -> dict[str, bytes]:
    return {
        "type": type(event).__name__.encode(),
        "cid": event.correlation_id.encode(),
        "body": event.model_dump_json().encode(),
    }


def derived_id(parent_id: str, kind: str) -> str:
    """The id of the `kind` event made from `parent_id`: same inputs, same id, on any worker."""
    return hashlib.blake2b(f"{parent_id}/{kind}".encode(), digest_size=16).hexdigest()


def decode(fields: Fields, types: Mapping[str, type[BaseModel]], max_bytes: int) -> Any:
    """The event in `fields`, or DecodeError saying exactly what is wrong with it."""
    if FASTSTREAM_FIELD in fields:
        return _decode_faststream(fields[FASTSTREAM_FIELD], types, max_bytes)
    kind = fields.get(b"type", b"").decode("utf-8", "replace")
    model = _model(kind, types)
    body = fields.get(b"body")
    if body is None:
        raise DecodeError("entry has no 'body' field")
    _check_size(body, max_bytes)
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise DecodeError(f"{kind} does not validate: {_errors(error)}") from None


def _model(kind: str, types: Mapping[str, type[BaseModel]]) -> type[BaseModel]:
    model = types.get(kind)
    if model is None:
        accepted = ", ".join(sorted(types))
        raise DecodeError(f"event type {kind!r} is not one this consumer accepts ({accepted})")
    return model


def _check_size(body: bytes, max_bytes: int) -> None:
    if len(body) > max_bytes:
        raise DecodeError(f"event body of {len(body)} bytes exceeds the limit of {max_bytes}")


def _envelope(data: bytes) -> tuple[bytes, dict[str, str]]:
    """A FastStream envelope's body and its headers with text values (FastStream imported here:
    only such entries need it). Whatever the bytes, DecodeError or an answer, never a crash."""
    from faststream.redis.parser import BinaryMessageFormatV1

    try:
        body, headers = BinaryMessageFormatV1.parse(data)
    except Exception as error:  # its parser trusts what it reads
        raise DecodeError(f"not a FastStream message: {error}") from None
    if not isinstance(headers, dict):
        headers = {}
    return bytes(body), {k: v for k, v in headers.items() if isinstance(v, str)}


def _decode_faststream(data: bytes, types: Mapping[str, type[BaseModel]], max_bytes: int) -> Any:
    """The event in a FastStream envelope."""
    _check_size(data, max_bytes)
    body, headers = _envelope(data)
    kind = headers.get("type") or (next(iter(types)) if len(types) == 1 else "")
    if not kind:
        accepted = ", ".join(sorted(types))
        raise DecodeError(f"a FastStream message needs a 'type' header here (one of {accepted})")
    model = _model(kind, types)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise DecodeError(f"the FastStream message's body is not JSON: {body[:60]!r}") from None
    if not isinstance(document, dict):
        raise DecodeError(f"the FastStream message's body is not a {kind} object")
    if "correlation_id" not in document and "correlation_id" in headers:
        document["correlation_id"] = headers["correlation_id"]
    document.setdefault("event_id", derived_id(hashlib.blake2b(data).hexdigest(), kind))
    try:
        return model.model_validate(document)
    except ValidationError as error:
        raise DecodeError(f"{kind} does not validate: {_errors(error)}") from None


def _errors(error: ValidationError, limit: int = 5) -> str:
    parts = []
    for item in error.errors()[:limit]:
        where = ".".join(str(p) for p in item["loc"]) or "body"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def correlation_id_of(fields: Fields) -> str:
    """The run an entry belongs to, even when it is not an event: its `cid` field, or the
    `correlation_id` header of a FastStream envelope ("" when neither says)."""
    if FASTSTREAM_FIELD in fields:
        try:
            body, headers = _envelope(fields[FASTSTREAM_FIELD])
        except DecodeError:
            return ""
        with contextlib.suppress(orjson.JSONDecodeError):
            named = orjson.loads(body)
            if isinstance(named, dict) and isinstance(named.get("correlation_id"), str):
                return named["correlation_id"]  # as the event would have said
        return headers.get("correlation_id", "")
    return text(fields, b"cid")


def trace_context(fields: Fields) -> dict[str, str]:
    """The trace context an entry carries ({} when none): its own fields, or the headers of
    its FastStream envelope (which FastStream's telemetry middleware writes)."""
    if FASTSTREAM_FIELD in fields:
        try:
            _, headers = _envelope(fields[FASTSTREAM_FIELD])
        except DecodeError:
            return {}
        return {name: headers[name] for name in TRACE_FIELDS if name in headers}
    return {name: text(fields, name.encode()) for name in TRACE_FIELDS if name.encode() in fields}


def text(fields: Fields, name: bytes) -> str:
    return fields.get(name, b"").decode("utf-8", "replace")


def entry_rank(entry_id: bytes) -> tuple[int, int]:
    """A stream entry id as numbers, to order ids of different streams."""
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)
