"""What one hop (one event handled by one phase) records: its spans and its latencies.

A hop's span starts when its entry was published (the entry id's time) and has three
children, so a trace shows where each hop's time went:

    process <stream>          the hop, a child of the hop (or submit) that published its event
      wait                    publish → handler start: the queue, reading, decoding, locking
      handle                  the phase handler; LLM calls are its children
      commit                  handler end → Redis confirmed outputs and ack

The same three intervals feed the phase's histograms (aeon_queue_wait_seconds,
aeon_handle_seconds, aeon_commit_seconds). With tracing and metrics both off, `Hop.start`
returns `NO_HOP`, whose steps do nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from telemetry import metrics, tracing
from telemetry.metrics import PhaseMetrics


class Hop:
    __slots__ = ("_context", "_metrics", "_span")

    def __init__(self, phase_metrics: PhaseMetrics | None, span: Any) -> None:
        self._metrics = phase_metrics
        self._span = span
        self._context: Any = None
        if span is not None:
            from opentelemetry import trace

            self._context = trace.set_span_in_context(span)

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
        if phase_metrics is not None:
            phase_metrics.queue_wait_s.observe(metrics.queue_wait_s(entry_id))
        if not tracing.on():
            return cls(phase_metrics, None)
        from opentelemetry.trace import SpanKind

        published = tracing.ns_of_entry(entry_id)
        span = tracing.tracer().start_span(
            f"process {stream_key}",
            context=tracing.parent(carrier),
            kind=SpanKind.CONSUMER,
            start_time=min(published, tracing.now_ns()),
            attributes={
                "messaging.system": "redis",
                "messaging.operation.type": "process",
                "messaging.destination.name": stream_key,
                "messaging.consumer.group.name": group,
                "messaging.message.id": entry_id.decode(),
                "messaging.message.conversation_id": event.correlation_id,
                "aeon.event.type": type(event).__name__,
                "aeon.event_id": event.event_id,
                "aeon.delivery": deliveries,
            },
        )
        hop = cls(phase_metrics, span)
        tracing.tracer().start_span("wait", context=hop._context, start_time=span.start_time).end()
        return hop

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """Around the handler: its span is current inside, so LLM calls become its children."""
        started = time.perf_counter()
        if self._span is None:
            yield
        else:
            with tracing.tracer().start_as_current_span("handle", context=self._context):
                yield
        if self._metrics is not None:
            self._metrics.handle_s.observe(time.perf_counter() - started)

    @contextlib.contextmanager
    def committing(self) -> Iterator[dict[str, bytes]]:
        """Around the commit; yields the trace fields the outputs carry (the hop's context)."""
        started = time.perf_counter()
        if self._span is None:
            yield {}
        else:
            with tracing.tracer().start_as_current_span("commit", context=self._context):
                yield tracing.current_fields(self._context)
        if self._metrics is not None:
            self._metrics.commit_s.observe(time.perf_counter() - started)

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
