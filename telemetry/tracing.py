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
extra (`pip install "aeonloop[otel]"`), and a worker without it pays one test per hop.

Prompt and reply text go into LLM spans only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true (the GenAI conventions' switch):
requests may hold what their senders would not want in a tracing backend.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import Field, field_validator

from aeonloop.exceptions import SettingsError
from aeonloop.settings import AeonSettings

#: The W3C Trace Context an entry may carry beside its event: fields of a flat entry (before
#: `type`, `cid`, `body`: bus.codec), or headers of a FastStream envelope.
TRACE_FIELDS = ("traceparent", "tracestate")
#: OpenTelemetry's name for this instrumentation.
SCOPE = "aeon"
#: How long a process leaving waits for its last spans to be exported.
FLUSH_AT_EXIT_MS = 2_000

log = logging.getLogger("aeon.tracing")

_EXPORTERS = ("otlp", "console", "none")
_PROTOCOLS = ("http/protobuf", "grpc")
_tracer: Any = None
_provider: Any = None
_capture_content = False


class TracingSettings(AeonSettings):
    """The standard OpenTelemetry variables Aeon reads itself (the SDK reads the rest:
    OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_*
    endpoints, headers and timeouts, OTEL_BSP_*)."""

    #: Exporters, comma-separated: otlp, console, none. Unset: otlp if an endpoint is set.
    traces_exporter: str = Field("", validation_alias="OTEL_TRACES_EXPORTER")
    otlp_endpoint: str = Field("", validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    otlp_traces_endpoint: str = Field("", validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    otlp_protocol: str = Field("", validation_alias="OTEL_EXPORTER_OTLP_PROTOCOL")
    otlp_traces_protocol: str = Field("", validation_alias="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    #: Must include tracecontext: the W3C context is what rides beside each event.
    propagators: str = Field("tracecontext,baggage", validation_alias="OTEL_PROPAGATORS")
    sdk_disabled: bool = Field(False, validation_alias="OTEL_SDK_DISABLED")
    #: Prompt and reply text in LLM spans (the GenAI conventions' switch).
    capture_content: bool = Field(
        False, validation_alias="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    )

    @field_validator("traces_exporter")
    @classmethod
    def _known_exporters(cls, value: str) -> str:
        for name in _names(value):
            if name not in _EXPORTERS:
                raise ValueError(f"{name!r} is not an exporter Aeon has; use otlp, console or none")
        return value

    @field_validator("otlp_protocol", "otlp_traces_protocol")
    @classmethod
    def _known_protocol(cls, protocol: str) -> str:
        if protocol and protocol not in _PROTOCOLS:
            raise ValueError("use http/protobuf (or grpc with its exporter installed)")
        return protocol

    @field_validator("propagators")
    @classmethod
    def _carries_the_w3c_context(cls, value: str) -> str:
        if "tracecontext" not in _names(value):
            raise ValueError(
                "must include tracecontext: Aeon carries a run's trace in W3C traceparent fields"
            )
        return value

    @property
    def protocol(self) -> str:
        """The OTLP protocol for traces: the traces' own variable, else the general one."""
        return self.otlp_traces_protocol or self.otlp_protocol or "http/protobuf"

    @property
    def exporters(self) -> tuple[str, ...]:
        """The exporters asked for; () when tracing is off."""
        if self.sdk_disabled:
            return ()
        if self.traces_exporter:
            return tuple(name for name in _names(self.traces_exporter) if name != "none")
        return ("otlp",) if (self.otlp_endpoint or self.otlp_traces_endpoint) else ()


def _names(value: str) -> list[str]:
    """A comma-separated list of names, as the OTEL_* variables write them."""
    return [name.strip().lower() for name in value.split(",") if name.strip()]


def setup(settings: TracingSettings, service: str) -> None:
    """Turn tracing on if `settings` ask for it; `service` names the process in traces unless
    OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) does.

    SettingsError (exit 2 at the CLI) when they ask for something that cannot work. Everything
    that can fail is tried here, before any event is read: a propagator that cannot be loaded
    would otherwise fail inside the first hop.
    """
    global _tracer, _provider, _capture_content
    if not settings.exporters or _tracer is not None:
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise SettingsError(
            f"tracing is configured (OTEL_TRACES_EXPORTER={','.join(settings.exporters)}) but "
            'OpenTelemetry is not installed: pip install "aeonloop[otel]", or unset '
            "OTEL_TRACES_EXPORTER"
        ) from None
    _check_propagators(settings)
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    # Flushed by `flush_at_exit`, bounded: the SDK's own exit hook waits as long as an export
    # to an unreachable collector takes (seconds), after the command's work is done.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for name in settings.exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, settings)))
    trace.set_tracer_provider(provider)
    _provider = provider
    _tracer = trace.get_tracer(SCOPE)
    _capture_content = settings.capture_content


def _check_propagators(settings: TracingSettings) -> None:
    """Load OTEL_PROPAGATORS now (OpenTelemetry loads them at its first import of `propagate`,
    and raises there for a name it cannot load)."""
    try:
        from opentelemetry import propagate

        propagate.inject({})
    except Exception as error:
        raise SettingsError(
            f"OTEL_PROPAGATORS={settings.propagators!r}: cannot be loaded ({error}); "
            "use tracecontext,baggage"
        ) from None


def flush_at_exit() -> None:
    """Export what is left, waiting at most FLUSH_AT_EXIT_MS (the exporter's thread is a
    daemon: what is not exported by then goes with the process)."""
    if _provider is not None and not _provider.force_flush(FLUSH_AT_EXIT_MS):
        log.warning("some spans were not exported within %d ms of exiting", FLUSH_AT_EXIT_MS)


def _exporter(name: str, settings: TracingSettings) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # One JSON object per line, on stderr: stdout is the command's own output.
        return ConsoleSpanExporter(
            out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + "\n"
        )
    if settings.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise SettingsError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                "installed; or use http/protobuf, which aeonloop[otel] brings"
            ) from None
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def on() -> bool:
    """Whether spans are made: callers test this before any work meant only for traces."""
    return _tracer is not None


def tracer() -> Any:
    """The tracer; only called when `on()`."""
    return _tracer


def capture_content() -> bool:
    """Whether LLM spans may hold prompt and reply text (the operator opted in)."""
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


def relayed(carrier: Mapping[str, str]) -> dict[str, bytes]:
    """The trace context an entry carried, as fields for events published on its behalf:
    read and written by the propagator, so only a valid context passes ({} otherwise)."""
    try:
        return current_fields(parent(carrier))
    except Exception as error:  # the events then start traces of their own
        log.warning("an entry's trace context could not be passed on: %s", error)
        return {}


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
