"""FastStream's envelope in Aeon's decoder: what a FastStream app publishes decodes to the event,
and anything else is a DecodeError with the reason (never another exception, which would hold
its whole batch pending), whatever the bytes."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from faststream.redis.parser import BinaryMessageFormatV1

from aeonloop.bus.codec import (
    FASTSTREAM_FIELD,
    DecodeError,
    correlation_id_of,
    decode,
    trace_context,
)
from aeonloop.phases.events import PassRequested, PlanReady, RequestSubmitted

TYPES = {"RequestSubmitted": RequestSubmitted}


def envelope(body: object, **headers: str) -> dict[bytes, bytes]:
    payload = body if isinstance(body, bytes) else orjson.dumps(body)
    data = asyncio.run(
        BinaryMessageFormatV1.encode(
            message=payload, reply_to=None, headers=headers, correlation_id="cid-1"
        )
    )
    return {FASTSTREAM_FIELD: data}


def request_body(**changes: object) -> dict:
    event = RequestSubmitted.new("Explain tides", timeout=30)
    return {**event.model_dump(mode="json", exclude={"event_id", "correlation_id"}), **changes}


def test_a_request_takes_the_correlation_id_header_and_a_stable_event_id() -> None:
    fields = envelope(request_body())
    first, again = decode(fields, TYPES, 10_000), decode(fields, TYPES, 10_000)
    assert first.correlation_id == "cid-1"
    assert first.event_id == again.event_id  # a redelivery is the same event
    other = decode(envelope(request_body(request="Explain waves")), TYPES, 10_000)
    assert other.event_id != first.event_id  # another message is another event
    assert correlation_id_of(fields) == "cid-1"


def test_the_bodys_own_ids_win() -> None:
    fields = envelope(request_body(correlation_id="mine", event_id="e-1"))
    event = decode(fields, TYPES, 10_000)
    assert (event.correlation_id, event.event_id) == ("mine", "e-1")
    assert correlation_id_of(fields) == "mine"


def test_a_stream_of_several_types_needs_the_type_header() -> None:
    types = {"PlanReady": PlanReady, "PassRequested": PassRequested}
    with pytest.raises(DecodeError, match="needs a 'type' header here"):
        decode(envelope({"x": 1}), types, 10_000)


@pytest.mark.parametrize(
    "data",
    [
        b'{"data": "{}", "headers": null}',
        b'{"data": "{}", "headers": {"type": [1]}}',
        b'{"data": 5}',
        b"\x89BIN\r\n\x1a\n\x00\x01\xff\xff",
        b"",
    ],
)
def test_any_bytes_are_a_decode_error_or_an_event(data: bytes) -> None:
    fields = {FASTSTREAM_FIELD: data}
    with pytest.raises(DecodeError):
        decode(fields, TYPES, 10_000)
    assert isinstance(correlation_id_of(fields), str)


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_trace_context_is_read_from_flat_fields_and_faststream_headers() -> None:
    flat = {b"type": b"X", b"cid": b"c", b"traceparent": TRACEPARENT.encode(), b"body": b"{}"}
    assert trace_context(flat) == {"traceparent": TRACEPARENT}
    assert trace_context({b"type": b"X", b"body": b"{}"}) == {}
    fields = envelope({"a": 1}, traceparent=TRACEPARENT, tracestate="k=v", type="X")
    assert trace_context(fields) == {"traceparent": TRACEPARENT, "tracestate": "k=v"}
    assert trace_context({FASTSTREAM_FIELD: b"not an envelope"}) == {}
