"""Telemetry's logic: when tracing is on, what a hop costs
when nothing records, and the gauges set from an `aeon status` report."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from config import SettingsError
from telemetry import metrics, tracing
from telemetry.hop import NO_HOP, Hop


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("variables", "asked"),
    [
        ({}, []),
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, []),
    ],
)
def test_tracing_is_on_only_when_the_otel_variables_ask(
    otel_env: pytest.MonkeyPatch, variables: dict[str, str], asked: list[str]
) -> None:
    for name, value in variables.items():
        otel_env.setenv(name, value)
    assert tracing._exporters_asked() == asked


def test_an_unknown_exporter_is_named(otel_env: pytest.MonkeyPatch) -> None:
    otel_env.setenv("OTEL_TRACES_EXPORTER", "otlp,jaeger")
    with pytest.raises(SettingsError, match="'jaeger' is not an exporter Aeon has"):
        tracing._exporters_asked()


def test_setup_without_variables_leaves_tracing_off(otel_env: pytest.MonkeyPatch) -> None:
    tracing.setup("aeon-test")
    assert not tracing.on()


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
