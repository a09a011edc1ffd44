"""What one hop (one event handled by one phase) records: its span and its latencies.

A hop is one span, `process <stream>`, a child of the hop (or submit) that published its event.
It starts when its entry was added (the entry id's time) and ends when its commit is confirmed,
and says where that time went in three attributes, the same three intervals the phase's
histograms count:

    aeon.wait_ms      entry added → handler start: the queue, reading, decoding, locking
                      (aeon_queue_wait_seconds)
    aeon.handle_ms    the phase handler (aeon_handle_seconds); LLM calls are child spans
    aeon.commit_ms    handler end → outputs and ack confirmed by Redis (aeon_commit_seconds)

Attributes rather than child spans: the OpenTelemetry SDK costs about 50 µs of CPU per span
exported (measured: create, end, batch and OTLP-encode), which three more spans per hop would
have tripled. With tracing and metrics both off, `Hop.start` returns `NO_HOP`, whose steps do
nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from aeonloop.telemetry import tracing
from aeonloop.telemetry.metrics import PhaseMetrics

log = logging.getLogger("aeon.tracing")


class Hop:
    """One hop's recording. Nothing here may keep an entry from being handled, committed or
    dead-lettered: a tracing failure is logged and the hop goes on untraced."""

    __slots__ = ("_metrics", "_span")

    def __init__(self, phase_metrics: PhaseMetrics | None, span: Any) -> None:
        self._metrics = phase_metrics
        self._span = span

    @classmethod
    def start(
        cls,
        phase_metrics: PhaseMetrics | None,
        *,
        stream_key: str,
        group: str,
        entry_id: bytes,
        carrier: Mapping[str, str] | None,
        event: Any,
        deliveries: int,
    ) -> Hop:
        """The hop of a locked event about to be handled (NO_HOP when nothing records)."""
        if phase_metrics is None and not tracing.on():
            return NO_HOP
        now, added = time.time_ns(), added_ns(entry_id)
        waited_ms = max(0, now - added) / 1e6
        if phase_metrics is not None:
            phase_metrics.queue_wait_s.observe(waited_ms / 1000)
        if not tracing.on():
            return cls(phase_metrics, None)
        try:
            span = _hop_span(stream_key, carrier, min(added, now))
            if span.is_recording():  # sampled; else the hop only passes the context on
                span.set_attributes(
                    {
                        "messaging.system": "redis",
                        "messaging.operation.type": "process",
                        "messaging.destination.name": stream_key,
                        "messaging.consumer.group.name": group,
                        "messaging.message.id": entry_id.decode(),
                        "messaging.message.conversation_id": event.correlation_id,
                        "aeon.event.type": type(event).__name__,
                        "aeon.event_id": event.event_id,
                        "aeon.delivery": deliveries,
                        "aeon.wait_ms": round(waited_ms, 3),
                    }
                )
        except Exception as error:  # a tracing bug must not hold the event
            log.warning("tracing the hop of %s failed: %s", event.event_id, error)
            span = None
        return cls(phase_metrics, span)

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """Around the handler: the hop's span is current inside, so LLM calls are its
        children."""
        started = time.perf_counter()
        if self._span is None:
            yield
        else:
            from opentelemetry import trace

            with trace.use_span(self._span, end_on_exit=False):
                yield
        seconds = time.perf_counter() - started
        self._took("aeon.handle_ms", seconds, self._metrics.handle_s if self._metrics else None)

    @contextlib.contextmanager
    def committing(self) -> Iterator[dict[str, bytes]]:
        """Around the commit; yields the trace fields the outputs carry (the hop's context)."""
        started = time.perf_counter()
        yield self._fields()
        seconds = time.perf_counter() - started
        self._took("aeon.commit_ms", seconds, self._metrics.commit_s if self._metrics else None)

    def _fields(self) -> dict[str, bytes]:
        if self._span is None:
            return {}
        from opentelemetry import trace

        try:
            return tracing.current_fields(trace.set_span_in_context(self._span))
        except Exception as error:  # the outputs then start traces of their own
            log.warning("the hop's trace context could not be written: %s", error)
            return {}

    def _took(self, attribute: str, seconds: float, histogram: Any) -> None:
        """Record one step's time: on its phase histogram (None: metrics off), on the span."""
        if histogram is not None:
            histogram.observe(seconds)
        if self._span is not None and self._span.is_recording():
            self._span.set_attribute(attribute, round(seconds * 1000, 3))

    def end(self, failure: str = "") -> None:
        """End the hop's span; a `failure` (a dead letter's reason, or what stopped the hop)
        marks it as an error."""
        if self._span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        if failure:
            self._span.set_status(Status(StatusCode.ERROR, failure[:_DESCRIPTION_CHARS]))
        self._span.end()


def added_ns(entry_id: bytes) -> int:
    """When Redis added an entry, in nanoseconds since the epoch: its id's first part, which
    is Redis's clock in milliseconds."""
    return int(entry_id.split(b"-", 1)[0]) * 1_000_000


#: A failed hop's status description: enough to name the reason (which may quote the input).
_DESCRIPTION_CHARS = 300


def _hop_span(stream_key: str, carrier: Mapping[str, str] | None, start_ns: int) -> Any:
    from opentelemetry.trace import SpanKind

    return tracing.tracer().start_span(
        f"process {stream_key}",
        context=tracing.parent(carrier),
        kind=SpanKind.CONSUMER,
        start_time=start_ns,
    )


class _NoHop(Hop):
    """Nothing records: each step is a shared do-nothing context."""

    def __init__(self) -> None:
        super().__init__(None, None)

    def handling(self) -> contextlib.nullcontext[None]:  # type: ignore[override]
        return _NOTHING

    def committing(self) -> contextlib.nullcontext[dict[str, bytes]]:  # type: ignore[override]
        return _NO_FIELDS


_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()
#: Never written to: a commit copies the fields it is given.
_NO_FIELDS: contextlib.nullcontext[dict[str, bytes]] = contextlib.nullcontext({})
NO_HOP = _NoHop()
