"""Traces: one OpenTelemetry trace per run, across every process and host it passes through.

The gateway's submit is the root span. Each hop is a span in the process that handles it, whose
parent is the span of the hop that published its event: the W3C trace context travels beside
the event, in the stream entry's `traceparent` (and `tracestate`) fields, or in the headers of
a FastStream envelope (bus.codec.trace_context). LLM calls are children of the hop that makes
them. docs/observability.md draws the tree.

Configured by the standard variables, read by the OpenTelemetry SDK itself (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_EXPORTER_OTLP_*`, `OTEL_BSP_*`,
`OTEL_PROPAGATORS`). Tracing is on when `OTEL_TRACES_EXPORTER` names exporters (`otlp`,
`console`) or an OTLP endpoint is set, and `OTEL_SDK_DISABLED` is not true. Otherwise nothing
of OpenTelemetry is imported, `on()` is False and callers skip every span: the SDK is an
extra (`pip install "aeon[otel]"`), and a worker without it pays one test per hop.

Prompt and reply text go into LLM spans only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true (the GenAI conventions' switch):
requests may hold what their senders would not want in a tracing backend.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from bus.codec import TRACE_FIELDS
from config import SettingsError

#: OpenTelemetry's name for this instrumentation.
SCOPE = "aeon"

_EXPORTERS = ("otlp", "console", "none")
_tracer: Any = None
_capture_content = False


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() == "true"


def _exporters_asked() -> list[str]:
    """The exporters the environment asks for ([] when tracing is not configured)."""
    if _truthy("OTEL_SDK_DISABLED"):
        return []
    named = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        asked = [name.strip() for name in named.split(",") if name.strip()]
        for name in asked:
            if name not in _EXPORTERS:
                raise SettingsError(
                    f"OTEL_TRACES_EXPORTER={named!r}: {name!r} is not an exporter Aeon has; "
                    "use otlp, console or none"
                )
        return [name for name in asked if name != "none"]
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return ["otlp"] if any(os.environ.get(name, "").strip() for name in endpoints) else []


def setup(service: str) -> None:
    """Turn tracing on if the environment asks for it; `service` names the process in traces
    unless OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) does.

    SettingsError (exit 2 at the CLI) when the environment asks for something Aeon cannot do.
    """
    global _tracer, _capture_content
    asked = _exporters_asked()
    if not asked or _tracer is not None:
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise SettingsError(
            f"tracing is configured (OTEL_TRACES_EXPORTER={','.join(asked)}) but OpenTelemetry "
            'is not installed: pip install "aeon[otel]", or unset OTEL_TRACES_EXPORTER'
        ) from None
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = TracerProvider(resource=resource)  # shut down, so flushed, at exit
    for name in asked:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer(SCOPE)
    _capture_content = _truthy("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # One JSON object per line, on stderr: stdout is the command's own output.
        return ConsoleSpanExporter(
            out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + "\n"
        )
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise SettingsError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                "installed; or use http/protobuf, which aeon[otel] brings"
            ) from None
        return OTLPSpanExporter()
    if protocol not in ("", "http/protobuf"):
        raise SettingsError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use http/protobuf (or grpc with its "
            "exporter installed)"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def on() -> bool:
    return _tracer is not None


def tracer() -> Any:
    """The tracer; only called when `on()`."""
    return _tracer


def capture_content() -> bool:
    return _capture_content


def parent(carrier: Mapping[str, str] | None) -> Any:
    """The context a span continues from: the one `carrier` holds (None: the current one)."""
    if carrier is None:
        return None
    from opentelemetry import propagate

    return propagate.extract(dict(carrier))


def current_fields(context: Any = None) -> dict[str, bytes]:
    """The context's span (the current one by default) as entry fields, for the events
    published under it."""
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return {name: carrier[name].encode() for name in TRACE_FIELDS if name in carrier}


def ns_of_entry(entry_id: bytes) -> int:
    """When an entry was added, in nanoseconds since the epoch (its id's first part)."""
    return int(entry_id.split(b"-", 1)[0]) * 1_000_000


def now_ns() -> int:
    return time.time_ns()


@contextlib.contextmanager
def submitting(correlation_id: str, stream_key: str) -> Iterator[dict[str, bytes]]:
    """The span of a run's submit, current inside; yields the fields its request carries.

    It is the run's root, unless the caller is in a span of its own (an HTTP request, a
    FastStream handler): then the run's trace continues the caller's.
    """
    if _tracer is None:
        yield {}
        return
    from opentelemetry.trace import SpanKind

    attributes = {
        "messaging.system": "redis",
        "messaging.operation.type": "send",
        "messaging.destination.name": stream_key,
        "messaging.message.conversation_id": correlation_id,
    }
    with _tracer.start_as_current_span(
        f"send {stream_key}", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        yield current_fields()


def add_event(name: str, **attributes: Any) -> None:
    """An event on the current span; nothing when tracing is off."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(name, attributes=attributes)
