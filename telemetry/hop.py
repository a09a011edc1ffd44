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
import time
from collections.abc import Iterator, Mapping
from typing import Any

from telemetry import metrics, tracing
from telemetry.metrics import PhaseMetrics


class Hop:
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
        waited = metrics.queue_wait_s(entry_id)
        if phase_metrics is not None:
            phase_metrics.queue_wait_s.observe(waited)
        if not tracing.on():
            return cls(phase_metrics, None)
        from opentelemetry.trace import SpanKind

        span = tracing.tracer().start_span(
            f"process {stream_key}",
            context=tracing.parent(carrier),
            kind=SpanKind.CONSUMER,
            start_time=min(tracing.ns_of_entry(entry_id), tracing.now_ns()),
        )
        if not span.is_recording():  # not sampled: the hop only passes the context on
            return cls(phase_metrics, span)
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
                "aeon.wait_ms": round(waited * 1000, 3),
            }
        )
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
        self._took("aeon.handle_ms", time.perf_counter() - started, "handle_s")

    @contextlib.contextmanager
    def committing(self) -> Iterator[dict[str, bytes]]:
        """Around the commit; yields the trace fields the outputs carry (the hop's context)."""
        started = time.perf_counter()
        if self._span is None:
            yield {}
        else:
            from opentelemetry import trace

            yield tracing.current_fields(trace.set_span_in_context(self._span))
        self._took("aeon.commit_ms", time.perf_counter() - started, "commit_s")

    def _took(self, attribute: str, seconds: float, histogram: str) -> None:
        if self._metrics is not None:
            getattr(self._metrics, histogram).observe(seconds)
        if self._span is not None and self._span.is_recording():
            self._span.set_attribute(attribute, round(seconds * 1000, 3))

    def end(self, failure: str = "") -> None:
        """End the hop's span; a `failure` (a dead letter's reason) marks it as an error."""
        if self._span is None:
            return
        if failure:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, failure))
        self._span.end()


class _NoHop(Hop):
    """Nothing records: every step is a bare yield."""

    def __init__(self) -> None:
        super().__init__(None, None)

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def committing(self) -> Iterator[dict[str, bytes]]:
        yield {}


NO_HOP = _NoHop()
