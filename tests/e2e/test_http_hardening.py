"""What an outside fuzzer (Schemathesis) found in the HTTP API, each fixed and proved over real
HTTP against a real `aeon serve` (embedded stack): a client gone mid-body, connections stalled
mid-head or mid-body, one route per path, a bad Host answered as JSON, and an OpenAPI document
that says what is served. The fuzzer itself runs in .ci/run."""

from __future__ import annotations

import re
import socket
import time

import pytest
from e2e_support import Processes, child_env, wait_until
from http_support import Server

pytestmark = pytest.mark.e2e

#: Short bounds, so a stalled connection is seen closed within the test's patience.
BOUNDS = {"AEON_HTTP_HEADER_TIMEOUT_S": "1", "AEON_HTTP_BODY_TIMEOUT_S": "1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    procs = Processes(tmp_path_factory.mktemp("hardening-logs"))
    try:
        yield Server(procs, child_env(AEON_LLM_DELAY_MS="0", **BOUNDS))
    finally:
        procs.kill_all()


def _raw(server: Server, payload: bytes, wait: float = 5.0) -> tuple[float, bytes]:
    """Send `payload` and read what comes back until the server closes: (seconds, bytes)."""
    with socket.create_connection((server.host, server.port), timeout=wait) as connection:
        if payload:
            connection.sendall(payload)
        started, received = time.monotonic(), b""
        while chunk := connection.recv(4096):
            received += chunk
        return time.monotonic() - started, received


def _requests_counted(server: Server) -> dict[str, float]:
    text = server.get("/metrics").body
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("aeon_http_requests_total{")
    }


def test_a_client_that_drops_mid_body_is_one_log_line_and_no_5xx(server: Server) -> None:
    head = (
        b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    with socket.create_connection((server.host, server.port)) as connection:
        connection.sendall(head + b'{"request":')
        time.sleep(0.3)  # the server is reading the body when the client goes
    marker = "closed its connection after 11 bytes of its body"

    def logged() -> bool:
        return marker in server.proc.stderr

    deadline = time.monotonic() + 10
    while not logged() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = server.proc.stderr
    assert log.count(marker) == 1, log
    assert "Traceback" not in log
    counted = _requests_counted(server)
    assert counted.get('aeon_http_requests_total{method="POST",route="/v1/runs",status="499"}')
    assert not [series for series in counted if 'status="5' in series], counted


def test_a_connection_silent_or_stalled_mid_head_is_closed(server: Server) -> None:
    for payload in (b"", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"):
        took, received = _raw(server, payload)
        assert received == b"" and 0.9 < took < 3, (payload, took, received)
    assert "did not arrive within 1 s (AEON_HTTP_HEADER_TIMEOUT_S)" in server.proc.stderr


def test_a_body_stalled_midway_is_408(server: Server) -> None:
    head = (
        b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    took, received = _raw(server, head + b'{"request":')
    assert received.startswith(b"HTTP/1.1 408"), received
    assert b"AEON_HTTP_BODY_TIMEOUT_S" in received and took < 3


def test_one_route_per_path_so_405_names_every_method(server: Server) -> None:
    reply = server.request("DELETE", "/v1/runs")
    assert reply.status == 405 and reply.body["field"] == "method"
    assert {"GET", "POST"} <= {m.strip() for m in reply.header("allow").split(",")}
    assert server.get("/v1/runs").status == 200


def test_a_bad_host_is_the_apis_json_error(server: Server) -> None:
    reply = server.get("/v1/runs", headers={"Host": "evil.example"})
    assert reply.status == 400
    assert (reply.body["error"], reply.body["field"]) == ("bad_request", "Host")
    assert "AEON_HTTP_ALLOWED_HOSTS" in reply.body["reason"]


def test_a_whole_number_written_with_a_fraction_is_taken(server: Server) -> None:
    reply = server.post("/v1/runs", {"request": "Explain tides", "max_ttl": 3.0})
    assert reply.status == 202, reply
    half = server.post("/v1/runs", {"request": "Explain tides", "max_ttl": 3.5})
    assert (half.status, half.body["field"]) == (422, "max_ttl")


def fields_of(schemas: dict, name: str) -> dict:
    return schemas[name]["properties"]


def test_the_openapi_document_says_what_is_served(server: Server) -> None:
    document = server.get("/openapi.json").body
    schemas = document["components"]["schemas"]
    request = schemas["RunRequest"]["properties"]["request"]
    assert (request["minLength"], request["maxLength"]) == (1, 20_000)
    assert "pattern" in request
    assert schemas["RunRequest"]["properties"]["max_ttl"]["maximum"] == 8  # AEON_MAX_PASSES
    events = document["paths"]["/v1/runs/{correlation_id}/events"]["get"]
    header = next(p for p in events["parameters"] if p["name"] == "Last-Event-ID")
    pattern = re.compile(header["schema"]["pattern"])
    for step in ("profile", "awaiting_approval", "plan", "pass-2", "exit", "answer", "webhook"):
        assert pattern.fullmatch(f"{step}@1732300000000-0"), step
    assert not pattern.fullmatch("pass@1732300000000-0")
    assert set(fields_of(schemas, "EventFrame")["event"]["enum"]) >= {
        "awaiting_approval",
        "webhook_delivered",
        "webhook_failed",
    }
    outcome = fields_of(schemas, "WebhookOutcome")["outcome"]["enum"]
    assert outcome == ["pending", "delivered", "failed"]
    frame = events["responses"]["200"]["content"]["text/event-stream"]["schema"]["$ref"]
    fields = schemas[frame.rsplit("/", 1)[1]]["properties"]
    assert set(fields) == {"event", "id", "data", "retry"}
    assert fields["data"]["type"] == "string"
    assert set(document["paths"]["/v1/runs"]) == {"get", "post"}


def test_a_token_in_the_query_string_never_reaches_a_log_line(server: Server) -> None:
    """Issue 35: uvicorn's access log wrote each path with its query string, so a token sent
    wrongly as `?token=...` was kept in the log. The access line shows the path only."""
    secret = "s3cret-in-the-query"
    assert server.get(f"/v1/runs/no-such-run-35?token={secret}").status == 404
    assert server.get(f"/healthz?token={secret}&x=1").status == 200
    wait_until(lambda: '"GET /healthz HTTP/1.1" 200' in server.proc.output, 10, "the access line")
    assert '"GET /v1/runs/no-such-run-35 HTTP/1.1" 404' in server.proc.output
    assert secret not in server.proc.output
