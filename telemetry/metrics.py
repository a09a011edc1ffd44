"""Prometheus metrics of a worker process, served on `/metrics` when a port is set.

`aeon worker --metrics-port N` (or AEON_METRICS_PORT) calls `serve`; until then nothing is
recorded: `for_phase` and `for_llm` return None, and the hot paths test for that, so a worker
without a port pays one comparison per event. Each worker process serves its own registry on
its own port (prometheus-client's default registry, with its process and GC collectors): a
process is the unit Prometheus scrapes, so the multiprocess mode, which is for a pool of
processes behind one port, is not needed.

What is recorded per event and per LLM call is cheap (a counter or a histogram observation on
a label set bound once). What needs Redis (lag, pending, dead letters) is sampled every
AEON_METRICS_SAMPLE_S by `sample_status`, never per event. The names are the contract of the
Grafana dashboard in `deploy/grafana/`; docs/observability.md, "Metrics", lists them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from pydantic import Field, field_validator

from aeonloop.exceptions import SettingsError
from aeonloop.settings import AeonSettings

log = logging.getLogger("aeon.metrics")

#: Seconds: from a fast hop (1 ms) to a slow LLM chain (a minute).
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: How late the event loop runs a timer: 0.1 ms (idle) to a second (starved).
_LAG_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
#: How often the loop-lag probe wakes.
_LAG_PROBE_S = 0.1

EVENTS_HANDLED = Counter("aeon_events_handled", "Events handled and committed", ["phase"])
EVENTS_FAILED = Counter("aeon_events_failed", "Handler attempts that raised", ["phase"])
EVENTS_RETRIED = Counter("aeon_events_retried", "Handler attempts that were retries", ["phase"])
EVENTS_DEAD = Counter("aeon_events_dead_lettered", "Entries sent to dead letters", ["phase"])
EVENTS_CLAIMED = Counter(
    "aeon_events_claimed",
    "Idle entries claimed: from a consumer that stopped, or back after a failed attempt",
    ["phase"],
)
EVENTS_DUPLICATE = Counter(
    "aeon_events_duplicate", "Entries acked unhandled: their event was handled before", ["phase"]
)
HANDLE_SECONDS = Histogram(
    "aeon_handle_seconds", "Handler time per event", ["phase"], buckets=_LATENCY_BUCKETS
)
QUEUE_WAIT_SECONDS = Histogram(
    "aeon_queue_wait_seconds",
    "From publish (the entry id's time) to the handler's start",
    ["phase"],
    buckets=_LATENCY_BUCKETS,
)
COMMIT_SECONDS = Histogram(
    "aeon_commit_seconds",
    "From the handler's end to its commit confirmed by Redis",
    ["phase"],
    buckets=_LATENCY_BUCKETS,
)
IN_FLIGHT = Gauge("aeon_in_flight", "Entries this process holds, read and not yet acked", ["phase"])
LOOP_LAG_SECONDS = Histogram(
    "aeon_event_loop_lag_seconds",
    "How late the event loop ran a timer: time every ready task waited for the CPU",
    buckets=_LAG_BUCKETS,
)

LLM_CALLS = Counter("aeon_llm_calls", "LLM calls answered", ["prompt_id", "model"])
LLM_ERRORS = Counter(
    "aeon_llm_errors",
    "LLM calls that failed after the adapter's retries (a prompt refused as too long and sent "
    "again shorter counts once)",
    ["prompt_id", "model"],
)
LLM_RETRIES = Counter("aeon_llm_retries", "LLM attempts retried by the adapter", ["model"])
LLM_TOKENS = Counter("aeon_llm_tokens", "Tokens of LLM calls", ["prompt_id", "model", "type"])
LLM_MEMO_HITS = Counter(
    "aeon_llm_memo_hits", "Replies taken from the memo instead of a call", ["prompt_id"]
)
LLM_SECONDS = Histogram(
    "aeon_llm_call_seconds",
    "LLM call time, the adapter's retries included",
    ["prompt_id", "model"],
    buckets=_LATENCY_BUCKETS,
)

TOOL_CALLS = Counter(
    "aeon_tool_calls",
    "Tool calls to MCP servers, by outcome: ok, error (the tool answered isError), timeout, "
    "failed (no answer: the server could not be reached or refused the call), cancelled",
    ["tool", "outcome"],
)
TOOL_SECONDS = Histogram(
    "aeon_tool_call_seconds",
    "Tool call time, whatever its outcome",
    ["tool"],
    buckets=_LATENCY_BUCKETS,
)

#: What the cost ledger (aeonloop.tenants) charged each tenant, by model and kind (input,
#: cached_input, output), counted by the `aeon serve` that settled each run. The per-call
#: `aeon_llm_tokens` above (by prompt id, in workers) already holds that name.
TENANT_TOKENS = Counter(
    "aeon_llm_tenant_tokens", "Tokens of answered runs, by tenant", ["model", "tenant", "kind"]
)
LLM_COST = Counter(
    "aeon_llm_cost", "Cost of answered runs, by the price table", ["model", "tenant", "kind"]
)
HTTP_REQUESTS = Counter(
    "aeon_http_requests", "HTTP requests answered by `aeon serve`", ["method", "route", "status"]
)
HTTP_SECONDS = Histogram(
    "aeon_http_request_seconds",
    "From a request's start to its response's first byte (an event stream's: its headers)",
    ["method", "route"],
    buckets=_LATENCY_BUCKETS,
)
HTTP_EVENT_STREAMS = Gauge("aeon_http_event_streams", "Server-Sent Event streams open")

STREAM_LAG = Gauge("aeon_stream_lag", "Entries not yet delivered to the phase's group", ["phase"])
STREAM_PENDING = Gauge("aeon_stream_pending", "Entries delivered and not yet acked", ["phase"])
OLDEST_PENDING = Gauge(
    "aeon_oldest_pending_seconds", "Idle time of the phase's oldest pending entry", ["phase"]
)
CONSUMERS = Gauge("aeon_consumers", "Consumers in the phase's group", ["phase"])
DEAD_LETTERS = Gauge("aeon_dead_letters", "Entries in the dead-letter streams")
ANSWERS_STORED = Gauge("aeon_answers_stored", "Answers kept in the answer store")
ATTENTION = Gauge("aeon_attention", "Things `aeon status` says to look at")

_enabled = False


class MetricsSettings(AeonSettings):
    #: Serve /metrics on this port (`aeon worker --metrics-port`); unset, nothing is recorded.
    metrics_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    #: The address to listen on: all interfaces, as Prometheus exporters do.
    metrics_host: str = "0.0.0.0"
    #: Seconds between two readings of lag, pending and dead letters from Redis; 0: none (one
    #: worker sampling is enough: the values are the deployment's, not the process's).
    metrics_sample_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 15.0

    @field_validator("metrics_sample_s")
    @classmethod
    def _sample_s(cls, seconds: float) -> float:
        if 0 < seconds < 1:
            raise ValueError("must be 0 (no sampling) or at least 1")
        return seconds


def serve(settings: MetricsSettings) -> None:
    """Start recording, and serve /metrics from a thread; SettingsError if the port is taken."""
    global _enabled
    if settings.metrics_port is None:
        return
    disable_created_metrics()  # a `_created` series per counter says nothing a dashboard uses
    try:
        start_http_server(settings.metrics_port, settings.metrics_host)
    except OSError as error:
        where = f"{settings.metrics_host}:{settings.metrics_port}"
        raise SettingsError(
            f"AEON_METRICS_PORT={settings.metrics_port}: cannot listen on {where} "
            f"({error.strerror or error}); choose a free port"
        ) from None
    _enabled = True
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)


def record() -> None:
    """Start recording without serving: for a process that serves /metrics itself
    (`aeon serve`, on its own port)."""
    global _enabled
    disable_created_metrics()
    _enabled = True


def enabled() -> bool:
    return _enabled


@dataclass(frozen=True, slots=True)
class PhaseMetrics:
    """One phase's series, bound once so recording is a plain add."""

    handled: Any
    failed: Any
    retried: Any
    dead: Any
    claimed: Any
    duplicate: Any
    handle_s: Any
    queue_wait_s: Any
    commit_s: Any


def for_phase(phase: str, in_flight: Callable[[], int]) -> PhaseMetrics | None:
    """The phase's series (None when metrics are off); `in_flight` is read at each scrape."""
    if not _enabled:
        return None
    IN_FLIGHT.labels(phase).set_function(in_flight)
    return PhaseMetrics(
        *(
            metric.labels(phase)
            for metric in (
                EVENTS_HANDLED,
                EVENTS_FAILED,
                EVENTS_RETRIED,
                EVENTS_DEAD,
                EVENTS_CLAIMED,
                EVENTS_DUPLICATE,
                HANDLE_SECONDS,
                QUEUE_WAIT_SECONDS,
                COMMIT_SECONDS,
            )
        )
    )


@dataclass(frozen=True, slots=True)
class _LLMSeries:
    calls: Any
    errors: Any
    seconds: Any
    input_tokens: Any
    output_tokens: Any


#: Bound series per (prompt id, model): `.labels()` costs more than the add it labels.
_llm_series: dict[tuple[str, str], _LLMSeries] = {}


def _llm(prompt_id: str, model: str) -> _LLMSeries:
    series = _llm_series.get((prompt_id, model))
    if series is None:
        series = _llm_series[prompt_id, model] = _LLMSeries(
            LLM_CALLS.labels(prompt_id, model),
            LLM_ERRORS.labels(prompt_id, model),
            LLM_SECONDS.labels(prompt_id, model),
            LLM_TOKENS.labels(prompt_id, model, "input"),
            LLM_TOKENS.labels(prompt_id, model, "output"),
        )
    return series


def llm_call(prompt_id: str, model: str, seconds: float, prompt: int, completion: int) -> None:
    if not _enabled:
        return
    series = _llm(prompt_id, model)
    series.calls.inc()
    series.seconds.observe(seconds)
    series.input_tokens.inc(prompt)
    series.output_tokens.inc(completion)


def llm_error(prompt_id: str, model: str, seconds: float) -> None:
    if _enabled:
        series = _llm(prompt_id, model)
        series.errors.inc()
        series.seconds.observe(seconds)


def llm_retry(model: str) -> None:
    if _enabled:
        LLM_RETRIES.labels(model).inc()


def llm_memo_hit(prompt_id: str) -> None:
    if _enabled:
        LLM_MEMO_HITS.labels(prompt_id).inc()


def tenant_charge(
    model: str, tenant: str, tokens: dict[str, int], cost: dict[str, float] | None
) -> None:
    """One run charged to `tenant`: its `tokens` by kind, and their `cost` by kind (None: the
    model has no price)."""
    if not _enabled:
        return
    for kind, count in tokens.items():
        TENANT_TOKENS.labels(model, tenant, kind).inc(count)
    for kind, amount in (cost or {}).items():
        LLM_COST.labels(model, tenant, kind).inc(amount)


def tool_call(tool: str, outcome: str, seconds: float) -> None:
    if _enabled:
        TOOL_CALLS.labels(tool, outcome).inc()
        TOOL_SECONDS.labels(tool).observe(seconds)


async def watch_loop_lag() -> None:
    """Observe how late the loop wakes a timer, until cancelled: the CPU wait every hop
    shares, which no per-phase histogram shows on its own."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time()
        await asyncio.sleep(_LAG_PROBE_S)
        LOOP_LAG_SECONDS.observe(max(0.0, loop.time() - asked - _LAG_PROBE_S))


async def sample_status(read: Callable[[], Awaitable[dict[str, Any]]], interval_s: float) -> None:
    """Set the Redis-side gauges from `read` (gateway.cli.status.read_status) every `interval_s`,
    until cancelled; a failed reading is logged and the gauges keep their last values."""
    while True:
        try:
            record_status(await read())
        except Exception as error:  # Redis away: the next reading will tell
            log.warning("metrics: reading the deployment's state failed: %s", error)
        await asyncio.sleep(interval_s)


def record_status(report: dict[str, Any]) -> None:
    """Set the Redis-side gauges from one `aeon status --json` report."""
    for group in report["groups"]:
        phase = group["phase"]
        STREAM_LAG.labels(phase).set(group["lag"] or 0)
        STREAM_PENDING.labels(phase).set(group["pending"])
        OLDEST_PENDING.labels(phase).set((group["oldest_pending_idle_ms"] or 0) / 1000)
        CONSUMERS.labels(phase).set(len(group["consumers"]))
    DEAD_LETTERS.set(report["dead_letters"]["count"])
    ANSWERS_STORED.set(report["answers"]["stored"])
    ATTENTION.set(len(report["attention"]))
