"""Telemetry's logic: when tracing is on, what a hop costs
when nothing records, and the gauges set from an `aeon status` report."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from aeonloop.bus.deadletter import DeadLetter, original_fields
from aeonloop.settings import SettingsError
from aeonloop.telemetry import metrics, tracing
from aeonloop.telemetry.hop import NO_HOP, Hop
from aeonloop.telemetry.metrics import MetricsSettings
from aeonloop.telemetry.tracing import TracingSettings


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in map(TracingSettings.variable, TracingSettings.model_fields):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("variables", "exporters"),
    [
        ({}, ()),
        ({"OTEL_TRACES_EXPORTER": "none"}, ()),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "otlp, Console"}, ("otlp", "console")),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, ()),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ()),
    ],
)
def test_tracing_is_on_only_when_the_otel_variables_ask(
    otel_env: pytest.MonkeyPatch, variables: dict[str, str], exporters: tuple[str, ...]
) -> None:
    for name, value in variables.items():
        otel_env.setenv(name, value)
    assert TracingSettings.from_env().exporters == exporters


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "otlp,jaeger"},
            "OTEL_TRACES_EXPORTER='otlp,jaeger': 'jaeger' is not an exporter Aeon has",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json': use http/protobuf",
        ),
        ({"OTEL_PROPAGATORS": "b3"}, "OTEL_PROPAGATORS='b3': must include tracecontext"),
        ({"OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED='maybe': must be 1, 0, true"),
    ],
)
def test_otel_variables_aeon_cannot_use_are_named(
    otel_env: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    for name, value in variables.items():
        otel_env.setenv(name, value)
    with pytest.raises(SettingsError) as raised:
        TracingSettings.from_env()
    assert str(raised.value).startswith(message), raised.value


def test_setup_without_exporters_leaves_tracing_off() -> None:
    tracing.setup(TracingSettings(), "aeon-test")
    assert not tracing.on()


def test_metrics_sampling_is_off_or_at_least_a_second() -> None:
    assert MetricsSettings(metrics_sample_s=0).metrics_sample_s == 0
    with pytest.raises(SettingsError, match=r"AEON_METRICS_SAMPLE_S=0\.5: must be 0"):
        MetricsSettings().with_(metrics_sample_s=0.5)


def test_a_hop_records_nothing_when_tracing_and_metrics_are_off() -> None:
    assert not tracing.on() and not metrics.enabled()
    hop = Hop.start(
        None,
        stream_key="aeon:{s0}:requests",
        group="phase-a",
        entry_id=b"1-0",
        carrier=None,
        event=None,
        deliveries=1,
    )
    assert hop is NO_HOP
    with hop.handling(), hop.committing() as fields:
        assert fields == {}
    hop.end("a reason")


def test_the_gauges_follow_a_status_report() -> None:
    group = {"phase": "c", "lag": None, "pending": 3, "oldest_pending_idle_ms": 2500}
    report = {
        "groups": [{**group, "consumers": [{"name": "w1"}, {"name": "w2"}]}],
        "dead_letters": {"count": 4},
        "answers": {"stored": 7},
        "attention": ["a group has no consumer"],
    }
    metrics.record_status(report)

    def value(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, labels)

    assert value("aeon_stream_lag", phase="c") == 0  # unknown lag reads as none
    assert value("aeon_stream_pending", phase="c") == 3
    assert value("aeon_oldest_pending_seconds", phase="c") == 2.5
    assert value("aeon_consumers", phase="c") == 2
    assert value("aeon_dead_letters") == 4
    assert value("aeon_answers_stored") == 7
    assert value("aeon_attention") == 1


def test_a_dead_letter_keeps_the_trace_context_and_a_replay_puts_it_back() -> None:
    fields = {
        b"traceparent": b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"type": b"RequestSubmitted",
        b"cid": b"c1",
        b"body": b"{",
    }
    dead = DeadLetter("requests", "phase-a", "1-0", fields, "undecodable", attempts=1)
    stored = {name.encode(): value for name, value in dead.to_fields().items()}
    stored = {
        name: value if isinstance(value, bytes) else value.encode()
        for name, value in stored.items()
    }
    replayed = original_fields(stored)
    assert replayed == fields
    assert list(replayed)[-1] == b"body"  # the body stays the last field


def test_telemetry_depends_on_nothing_of_aeon_but_config() -> None:
    """bus, llm, phases and gateway record through telemetry: it must not import them back."""
    root = Path(__file__).resolve().parents[2] / "telemetry"
    for module in root.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                top = node.module.split(".")[0]
                assert top not in {"bus", "llm", "phases", "gateway", "prompts"}, module.name
            elif isinstance(node, ast.Import):
                tops = {alias.name.split(".")[0] for alias in node.names}
                assert not tops & {"bus", "llm", "phases", "gateway", "prompts"}, module.name
