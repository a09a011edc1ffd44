"""Issue 15's proofs of traces and metrics, on real `aeon worker` processes and real Redis.

Traces: two workers split the phases (a, c, e in one; b, d in the other), so a run crosses
processes at every hop. Every process exports its spans with OpenTelemetry's console exporter
(one JSON object per line on stderr). Read back, one run's spans form one trace: the gateway's
submit is its root, each hop's parent is the hop (or submit) that published its event, every
phase A–E is there in the process that runs it, each hop says how long it waited, was handled
and committed, and every LLM call is a child of its hop.

Metrics: one worker serving /metrics; what the test makes happen (runs, a claimed entry, a
handler that always raises, an entry that is not JSON) is what the counters say.
"""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from e2e_support import Bus, Processes, child_env, wait_until
from http_support import Server

from aeonloop.bus.codec import encode
from aeonloop.phases.events import RequestSubmitted

pytestmark = pytest.mark.e2e

#: A producer's span, as a W3C traceparent (version, trace id, span id, sampled).
PRODUCER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#: The phase that consumes each logical stream.
PHASE_OF_STREAM = {
    "requests": "a",
    "profiled": "b",
    "passes": "c",
    "pass-completed": "d",
    "loop-exited": "e",
}


def _spans(text: str) -> list[dict[str, Any]]:
    """The console exporter's spans among a process's stderr lines."""
    found = []
    for line in text.splitlines():
        if line.startswith('{"name"'):
            found.append(json.loads(line))
    return found


def _nanoseconds(stamp: str) -> int:
    """A console span's ISO time (`2026-11-24T01:09:09.142831Z`) in ns since the epoch."""
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return int(moment.timestamp() * 1e9)


def _phase(span: dict[str, Any]) -> str:
    """The phase of a `process <prefix>:{shard}:<stream>` span."""
    stream = span["name"].removeprefix("process ").rsplit(":", 1)[1]
    return PHASE_OF_STREAM[stream]


@pytest.mark.timeout(120)
def test_one_run_is_one_trace_across_two_worker_processes(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    # Effort high: the loop runs even for this one short ask (phases.spend), so the trace
    # crosses both workers through every phase.
    traced = {
        **env,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "AEON_EFFORT": "high",
    }
    first = procs.worker(
        {**traced, "OTEL_SERVICE_NAME": "worker-ace"},
        "--phase",
        "a",
        "--phase",
        "c",
        "--phase",
        "e",
    )
    second = procs.worker(
        {**traced, "OTEL_SERVICE_NAME": "worker-bd"}, "--phase", "b", "--phase", "d"
    )
    asked = procs.run_aeon(traced, "ask", "Explain how tides work", "--json", timeout=60)
    assert asked.returncode == 0, asked.tail()
    result = json.loads(asked.stdout)
    # An entry that is not an event, published under a span of its producer's: the answer of
    # its run (made in E from the dead letter) continues that producer's trace.
    poisoned = uuid.uuid4().hex
    bus.redis.xadd(
        bus.stream("requests", poisoned),
        {"traceparent": PRODUCER, "type": "RequestSubmitted", "cid": poisoned, "body": b"{"},
    )
    wait_until(lambda: bus.stored_answer(poisoned), 30, "the poisoned run's answer")
    assert first.stop() == 0 and second.stop() == 0  # spans are flushed at exit

    spans = [
        (service, span)
        for service, proc in (("aeon-ask", asked), ("worker-ace", first), ("worker-bd", second))
        for span in _spans(proc.stderr)
    ]
    roots = [s for _, s in spans if s["parent_id"] is None and s["name"].startswith("send ")]
    assert len(roots) == 1, [s["name"] for _, s in spans]
    root = roots[0]
    trace_id = root["context"]["trace_id"]
    run = [(service, s) for service, s in spans if s["context"]["trace_id"] == trace_id]
    by_id = {s["context"]["span_id"]: s for _, s in run}
    service_of = {s["context"]["span_id"]: service for service, s in run}
    assert service_of[root["context"]["span_id"]] == "aeon-ask"
    assert root["kind"] == "SpanKind.PRODUCER"
    assert root["attributes"]["messaging.message.conversation_id"] == result["correlation_id"]

    # Every span but the root has its parent in this trace: nothing dangles.
    for _, span in run:
        if span is not root:
            assert span["parent_id"] in by_id, f"{span['name']}: parent not in the trace"

    hops = [s for _, s in run if s["name"].startswith("process ")]
    phases = Counter(_phase(s) for s in hops)
    passes = result["total_passes"]
    # A pass ends in D (another pass, or out of budget) or, converged, straight in E.
    assert phases["a"] == phases["b"] == phases["e"] == 1 and phases["c"] == passes, phases
    assert phases["d"] in (passes - 1, passes), phases
    for hop in hops:
        where = service_of[hop["context"]["span_id"]]
        assert where == ("worker-ace" if _phase(hop) in "ace" else "worker-bd"), hop["name"]
        assert hop["kind"] == "SpanKind.CONSUMER"
        assert hop["attributes"]["messaging.message.conversation_id"] == result["correlation_id"]
        parent = by_id[hop["parent_id"]]
        assert parent is root or parent["name"].startswith("process "), parent["name"]
        for took in ("aeon.wait_ms", "aeon.handle_ms", "aeon.commit_ms"):
            assert hop["attributes"][took] >= 0, (hop["name"], took)
        assert (
            _nanoseconds(hop["end_time"]) - _nanoseconds(hop["start_time"])
            >= 1e6 * (hop["attributes"]["aeon.handle_ms"])
        )

    # The hops chain from the root to Phase E, in pipeline order.
    chain, span = [], next(s for s in hops if _phase(s) == "e")
    while span is not root:
        chain.append(_phase(span))
        span = by_id[span["parent_id"]]
    loop = ["c", "d"] * passes
    assert chain[::-1] == ["a", "b", *loop[: phases["c"] + phases["d"]], "e"], chain

    calls = [s for _, s in run if s["name"].startswith("chat ")]
    assert len(calls) == result["usage"]["calls"]
    for call in calls:
        assert by_id[call["parent_id"]] in hops
        assert call["kind"] == "SpanKind.CLIENT"
        attributes = call["attributes"]
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "offline"
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
        assert "gen_ai.input.messages" not in attributes  # prompt text only when opted in
    tokens = sum(c["attributes"]["gen_ai.usage.output_tokens"] for c in calls)
    assert tokens == result["usage"]["completion_tokens"]

    lost = [
        s
        for _, s in spans
        if s["name"].startswith("process ")
        and s["attributes"]["messaging.message.conversation_id"] == poisoned
    ]
    assert [_phase(s) for s in lost] == ["e"], [s["name"] for s in lost]
    assert lost[0]["context"]["trace_id"] == "0x" + PRODUCER.split("-")[1]
    assert lost[0]["parent_id"] == "0x" + PRODUCER.split("-")[2]


def test_without_otel_variables_nothing_is_traced(procs: Processes, env: dict[str, str]) -> None:
    worker = procs.worker(env)
    asked = procs.run_aeon(env, "ask", "Explain how tides work", "--json", timeout=60)
    assert asked.returncode == 0, asked.tail()
    assert worker.stop() == 0
    assert not _spans(worker.stderr) and not _spans(asked.stderr)


# -- metrics ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    """Every sample of a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return _samples(response.read().decode())


def _samples(text: str) -> dict[str, float]:
    """Every sample of a /metrics page as {'name{labels}': value}."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def _sum(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    return sum(
        value
        for sample, value in samples.items()
        if sample.split("{", 1)[0] == name and all(label in sample for label in wanted)
    )


def _naive_deadline_request(cid: str) -> bytes:
    """A request that validates, and whose every deadline check raises TypeError (no time
    zone): its handler fails on every attempt (tests/e2e/test_poison.py says why)."""
    naive = (datetime.now(UTC) + timedelta(minutes=5)).replace(tzinfo=None).isoformat()
    body = {"event_id": uuid.uuid4().hex, "correlation_id": cid, "deadline": naive}
    return json.dumps({**body, "request": "Explain tides"}).encode()


@pytest.mark.timeout(120)
def test_metrics_count_what_happened(procs: Processes, bus: Bus, env: dict[str, str]) -> None:
    requests = bus.stream("requests")
    # An entry read by a consumer that then vanished: the worker must claim it.
    bus.redis.xgroup_create(requests, "phase-a", id="0", mkstream=True)
    orphan = RequestSubmitted.new("Explain how rainbows form", timeout=120)
    bus.redis.xadd(requests, encode(orphan))
    assert bus.redis.xreadgroup("phase-a", "ghost", {requests: ">"}, count=1)
    # One that is not JSON, and one whose handler always raises.
    bus.redis.xadd(requests, {"type": "RequestSubmitted", "cid": "not-json", "body": b"{oops"})
    raises = uuid.uuid4().hex
    bus.redis.xadd(
        requests,
        {"type": "RequestSubmitted", "cid": raises, "body": _naive_deadline_request(raises)},
    )

    port = _free_port()
    # Effort high: every run goes through the loop (a short ask would end on its draft).
    worker = procs.worker(
        {**env, "AEON_HANDLER_ATTEMPTS": "2", "AEON_METRICS_SAMPLE_S": "1", "AEON_EFFORT": "high"},
        "--metrics-port",
        str(port),
    )
    asked = [
        procs.run_aeon(env, "ask", f"Explain topic {n}", "--json", timeout=60) for n in range(2)
    ]
    assert all(a.returncode == 0 for a in asked), [a.tail() for a in asked]
    cids = [json.loads(a.stdout)["correlation_id"] for a in asked]
    runs = [*cids, orphan.correlation_id, raises, "not-json"]
    wait_until(lambda: all(bus.stored_answer(cid) for cid in runs), 30, "every run's answer")
    samples = wait_until(
        lambda: (s := _scrape(port))["aeon_answers_stored"] == len(runs) and s,
        10,
        "the sampled gauges",
    )

    def count(name: str, phase: str) -> float:
        return _sum(samples, f"aeon_events_{name}_total", phase=phase)

    # Handled: the two asks and the claimed orphan run through A-E; the two poisoned runs
    # reach E only through a dead letter, and E's handler raises on the naive deadline too.
    assert count("handled", "a") == count("handled", "b") == 3
    assert count("handled", "e") == 4  # the 3 runs, and the not-JSON entry's lost-run exit
    assert count("claimed", "a") == 1
    assert count("dead_lettered", "a") == 2 and count("dead_lettered", "e") == 1
    assert count("failed", "a") == count("failed", "e") == 2  # 2 attempts each
    assert count("retried", "a") == count("retried", "e") == 1
    assert count("duplicate", "a") == 0
    assert _sum(samples, "aeon_handle_seconds_count", phase="a") == 4  # 3 handled, 1 raised
    assert _sum(samples, "aeon_queue_wait_seconds_count", phase="a") == 4
    assert samples["aeon_dead_letters"] == 3
    assert samples["aeon_stream_pending" + '{phase="a"}'] == 0
    assert samples["aeon_consumers" + '{phase="a"}'] == 2  # the worker, and the ghost

    usage = [bus.stored_answer(cid)["usage"] for cid in (*cids, orphan.correlation_id)]
    assert _sum(samples, "aeon_llm_calls_total") == sum(u["calls"] for u in usage)
    assert _sum(samples, "aeon_llm_tokens_total", type="output") == sum(
        u["completion_tokens"] for u in usage
    )
    assert _sum(samples, "aeon_event_loop_lag_seconds_count") > 0
    assert worker.stop() == 0


@pytest.mark.timeout(90)
def test_aeon_serve_serves_its_own_metrics(procs: Processes) -> None:
    """The HTTP gateway counts its responses by route and status at /metrics; run embedded,
    the phases it runs in-process are counted there too."""
    server = Server(procs, child_env())  # no AEON_REDIS_URL: the embedded stack
    answered = server.post("/v1/runs?wait=30", {"request": "Explain how tides work"})
    assert answered.status == 200, answered
    assert server.get("/v1/runs/" + "0" * 32).status == 404
    assert server.post("/v1/runs", {"request": " "}).status == 422
    scraped = server.get("/metrics")
    assert scraped.status == 200
    samples = _samples(scraped.body)

    def requests(route: str, method: str, status: str) -> float:
        labels = {"route": route, "method": method, "status": status}
        return _sum(samples, "aeon_http_requests_total", **labels)

    assert requests("/v1/runs", "POST", "200") == 1
    assert requests("/v1/runs", "POST", "422") == 1
    assert requests("/v1/runs/{correlation_id}", "GET", "404") == 1
    assert _sum(samples, "aeon_http_request_seconds_count", route="/v1/runs") == 2
    assert "aeon_http_event_streams" in samples
    assert _sum(samples, "aeon_events_handled_total", phase="e") == 1
    assert "0" * 32 not in scraped.body  # a run id is never a label
