"""Issue 14's proofs of the HTTP API: a real `aeon serve` and a real `aeon worker` on the
session's Redis, spoken to over real HTTP.

Status codes and bodies, the same validation as `aeon ask` (and nothing published when it
refuses), `?wait=`, 404, tokens (and that none is ever logged), the rate limit, CORS, health
and readiness, and the event stream: every step once and in order, resumed with Last-Event-ID
from where the reader left off, by this server or by one that never saw the run.
"""

from __future__ import annotations

import concurrent.futures
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from e2e_support import Bus, Processes, child_env, wait_until
from http_support import Server, Stack, expected_kinds, served

from aeonloop.bus.compact import unpack

pytestmark = pytest.mark.e2e

#: Each LLM call of the offline model takes this long, so a run lasts a second or two and
#: can be watched while it runs.
LLM_DELAY_MS = "100"
TOKEN = "tok-" + "7" * 28
OTHER_TOKEN = "tok-" + "3" * 28


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One worker and one server for the whole module, under a prefix of its own."""
    logs = tmp_path_factory.mktemp("http-api-logs")
    with served(redis_url, logs, AEON_LLM_DELAY_MS=LLM_DELAY_MS) as (server, bus, env):
        yield Stack(server, bus, env)


def _answered(server: Server, correlation_id: str) -> dict:
    def done() -> dict | None:
        reply = server.get(f"/v1/runs/{correlation_id}")
        return reply.body if reply.status == 200 else None

    return wait_until(done, 60, f"run {correlation_id} answered")


# -- submitting and reading -------------------------------------------------------------------


def test_a_submit_is_202_with_links_and_the_run_is_then_200_with_its_answer(stack: Stack) -> None:
    reply = stack.server.post("/v1/runs", {"request": "Explain how tides work, then why they vary"})
    assert reply.status == 202, reply
    cid = reply.body["correlation_id"]
    assert reply.body["state"] == "running"
    assert reply.body["request"] == "Explain how tides work, then why they vary"
    assert reply.body["links"] == {
        "self": f"/v1/runs/{cid}",
        "events": f"/v1/runs/{cid}/events",
        "page": f"/#/runs/{cid}",
    }
    assert reply.header("location") == f"/v1/runs/{cid}"

    run = _answered(stack.server, cid)
    assert run["state"] == "answered"
    assert run["request"] == "Explain how tides work, then why they vary"
    result = run["result"]
    assert result["status"] == "converged" and result["degraded"] is False
    assert result["final_answer"]["answer_text"]
    assert run["degraded_because"] == []
    # The numbers a reader sees agree: the offline model's confidence is what the loop measured
    # of its last pass, and its token counts, which no LLM made, are marked as estimates.
    last = result["final_answer"]["metadata"]["execution_passes"][-1]
    assert result["final_answer"]["confidence"] == last["score"]
    assert result["usage"]["estimated"] is True


def test_get_while_running_is_202_with_the_newest_step(stack: Stack) -> None:
    cid = stack.server.submit()

    def progressing() -> dict | None:
        reply = stack.server.get(f"/v1/runs/{cid}")
        assert reply.status in (200, 202), reply
        latest = reply.body["progress"] and reply.body["progress"]["latest"]
        return reply.body if reply.status == 202 and latest else None

    running = wait_until(progressing, 30, "a 202 with a step in it")
    assert running["state"] == "running" and running["result"] is None
    latest = running["progress"]["latest"]
    assert latest["kind"] in ("profile", "plan", "pass", "exit")
    assert running["progress"]["steps_done"] >= 1
    assert latest["id"].startswith(latest["kind"])


def test_wait_returns_200_with_the_result_when_it_comes_in_time(stack: Stack) -> None:
    reply = stack.server.post("/v1/runs?wait=60", {"request": "Explain how a rainbow forms"})
    assert reply.status == 200, reply
    assert reply.body["state"] == "answered"
    assert reply.body["request"] == "Explain how a rainbow forms"
    assert reply.body["result"]["final_answer"]["answer_text"]


def test_wait_too_short_is_202_all_the_same(stack: Stack) -> None:
    reply = stack.server.post("/v1/runs?wait=0.01", {"request": "Explain how a rainbow forms"})
    assert reply.status == 202, reply
    _answered(stack.server, reply.body["correlation_id"])


def test_unknown_runs_and_paths_are_404_as_json(stack: Stack) -> None:
    reply = stack.server.get(f"/v1/runs/{uuid.uuid4().hex}")
    assert reply.status == 404
    assert reply.body["error"] == "not_found" and reply.body["field"] == "id"
    assert "no run" in reply.body["reason"]
    events = stack.server.events(uuid.uuid4().hex)
    assert events.status == 404 and events.body["field"] == "id"
    nowhere = stack.server.get("/v1/nowhere")
    assert nowhere.status == 404 and nowhere.body["field"] == "path"
    bad = stack.server.get("/v1/runs/not%20an%20id")
    assert bad.status == 422 and bad.body["field"] == "id"


def test_recent_runs_list_the_newest_first_with_their_answers(stack: Stack) -> None:
    first = stack.server.submit("Explain why the sky is blue, then why sunsets are red")
    second = stack.server.submit("Explain why the sea is salty, then how salt gets there")
    _answered(stack.server, first)
    _answered(stack.server, second)
    reply = stack.server.get("/v1/runs?limit=2")
    assert reply.status == 200
    runs = reply.body["runs"]
    assert [r["correlation_id"] for r in runs] == [second, first]
    assert runs[0]["request"] == "Explain why the sea is salty, then how salt gets there"
    assert runs[0]["state"] == "answered" and runs[0]["status"] == "converged"
    assert 0 <= runs[0]["confidence"] <= 1 and runs[0]["total_passes"] >= 1
    assert stack.server.get("/v1/runs?limit=0").body["field"] == "limit"


# -- refusing bad input -----------------------------------------------------------------------

BAD_BODIES = [
    ({"request": ""}, "request", "the request is empty"),
    ({"request": "   \n\t "}, "request", "the request is empty"),
    ({"request": "x" * 20_001}, "request", "the limit is 20,000"),
    ({"request": "hello\x00world"}, "request", "control character"),
    ({"request": 42}, "request", "must be a string"),
    ({}, "request", "is required"),
    ({"request": "ok", "rules": "nope"}, "rules", "expected a list of rules"),
    ({"request": "ok", "rules": [{"id": "r"}]}, "rules", "breaks the rule schema"),
    (
        {"request": "ok", "rules": [{"id": "r", "check": {"type": "content", "search": "("}}]},
        "rules",
        "not a valid regular expression",
    ),
    (
        {"request": "ok", "rules": [{"id": "r", "check": {"type": "pattern", "pattern": "(x"}}]},
        "rules",
        "pattern /(x/ does not compile",
    ),
    ({"request": "ok", "max_ttl": 9}, "max_ttl", "max TTL 9 is above AEON_MAX_PASSES=8"),
    ({"request": "ok", "max_ttl": 101}, "max_ttl", "max TTL 101 is above AEON_MAX_PASSES=8"),
    ({"request": "ok", "max_ttl": 0}, "max_ttl", "max TTL 0 is not a number of passes from 1 to 8"),
    ({"request": "ok", "max_ttl": 2.5}, "max_ttl", "must be a whole number"),
    ({"request": "ok", "max_ttl": True}, "max_ttl", "must be a whole number"),
    ({"request": "ok", "max_ttl": "7"}, "max_ttl", "must be a whole number"),
    ({"request": "ok", "token_budget": 0}, "token_budget", "token budget 0 is not a number"),
    ({"request": "ok", "token_budget": 10**13}, "token_budget", "from 1 to 1,000,000,000,000"),
    ({"request": "ok", "token_budget": 2.5}, "token_budget", "must be a whole number"),
    ({"request": "ok", "webhook_url": "https://h.example/x"}, "webhook_url", "webhooks are off"),
    ({"request": "ok", "timeout_s": "7"}, "timeout_s", "must be a number"),
    ({"request": "ok", "threshold": True}, "threshold", "must be a number"),
    ({"request": "ok", "timeout_s": 0}, "timeout_s", "timeout 0 is not a number of seconds"),
    ({"request": "ok", "timeout_s": 1e12}, "timeout_s", "at most 604,800"),
    ({"request": "ok", "threshold": 1.5}, "threshold", "must be at most 1"),
    ({"request": "ok", "colour": "blue"}, "colour", "is not a field of a run"),
    (["request"], "body", "must be a JSON object"),
]


@pytest.mark.parametrize(("body", "field", "words"), BAD_BODIES, ids=lambda v: str(v)[:40])
def test_bad_input_is_422_naming_the_field_and_nothing_is_published(
    stack: Stack, body: object, field: str, words: str
) -> None:
    before = stack.bus.xlen("requests")
    reply = stack.server.post("/v1/runs", body)
    assert reply.status == 422, reply
    assert reply.body["error"] == "bad_input"
    assert reply.body["field"] == field
    assert words in reply.body["reason"]
    assert stack.bus.xlen("requests") == before


@pytest.mark.parametrize("max_ttl", [8, None])
def test_max_ttl_at_the_cap_or_null_is_taken(stack: Stack, max_ttl: int | None) -> None:
    """AEON_MAX_PASSES itself may be asked for, and null (or nothing) means just that."""
    before = stack.bus.xlen("requests")
    reply = stack.server.post("/v1/runs", {"request": "Explain tides", "max_ttl": max_ttl})
    assert reply.status == 202, reply
    assert stack.bus.xlen("requests") == before + 1
    _answered(stack.server, reply.body["correlation_id"])


#: Attached files past the server's limits (the defaults), or not text: 413 past a limit on
#: bytes, else 422, naming the field and the limit.
BAD_FILES = [
    (
        [{"path": "big.txt", "content": "x" * 200_001}],
        413,
        "files",
        "file big.txt is 200,001 bytes; the limit is 200,000 (AEON_MAX_FILE_BYTES)",
    ),
    (
        [{"path": n, "content": "x" * 190_000} for n in "abc"],
        413,
        "files",
        "570,000 bytes together; the limit is 500,000 (AEON_MAX_FILES_BYTES)",
    ),
    (
        [{"path": "app.bin", "content": "\u007fELF\u0000\u0000"}],
        422,
        "files",
        "file app.bin is not text: it holds 3 control character(s) such as '\\x7f'",
    ),
    (
        [{"path": f"{n}.txt", "content": ""} for n in range(11)],
        422,
        "files",
        "11 files attached; the limit is 10 (AEON_MAX_FILES)",
    ),
    ([{"path": "a.txt"}], 422, "files.0.content", "is required"),
]


@pytest.mark.parametrize(
    ("files", "status", "field", "words"),
    BAD_FILES,
    ids=["file-too-large", "files-too-large", "binary", "too-many", "no-content"],
)
def test_bad_files_are_413_or_422_and_nothing_is_published(
    stack: Stack, files: list[dict], status: int, field: str, words: str
) -> None:
    before = stack.bus.xlen("requests")
    reply = stack.server.post("/v1/runs", {"request": "Review these", "files": files})
    assert reply.status == status, reply
    assert reply.body["error"] == ("too_large" if status == 413 else "bad_input")
    assert (reply.body["field"], words in reply.body["reason"]) == (field, True), reply.body
    assert stack.bus.xlen("requests") == before


def test_an_attached_file_reaches_the_steps_and_is_stored_once(stack: Stack) -> None:
    """The offline model's steps name the files they were given; the file's text rides in the
    request's entry and in the run's `files` record, and in no later event."""
    content = "High tide at 06:12 < low tide at 12:30 & so on."
    files = [{"path": "tides.md", "content": content}]
    reply = stack.server.post("/v1/runs", {"request": "Explain the tide table", "files": files})
    assert reply.status == 202, reply
    cid = reply.body["correlation_id"]
    _answered(stack.server, cid)

    runs = stack.bus.keys.run_records(cid)
    records = {k.decode(): unpack(v) for k, v in stack.bus.redis.hgetall(runs).items()}
    assert orjson.loads(records["files"]) == files
    assert b"It had the attached file(s) to work from: tides.md" in records["outputs:1"]
    carried = [
        stream
        for stream in ("requests", "profiled", "passes", "pass-completed", "loop-exited", "answers")
        for _, fields in stack.bus.entries(stream)
        if fields["cid"].decode() == cid and b"06:12" in fields["body"]
    ]
    assert carried == ["requests"]


def test_a_body_that_is_not_json_or_too_large_is_refused(stack: Stack) -> None:
    before = stack.bus.xlen("requests")
    json_type = {"Content-Type": "application/json"}
    garbled = stack.server.post("/v1/runs", raw=b"{not json", headers=json_type)
    assert garbled.status == 422 and garbled.body["field"] == "body"
    huge = stack.server.post("/v1/runs", {"request": "x" * 1_100_000})
    assert huge.status == 413 and huge.body["field"] == "body"
    assert "AEON_HTTP_MAX_BODY_BYTES" in huge.body["reason"]
    waiting = stack.server.post("/v1/runs?wait=forever", {"request": "ok"})
    assert waiting.status == 422 and waiting.body["field"] == "wait"
    assert stack.bus.xlen("requests") == before


# -- the event stream ---------------------------------------------------------------------------


def test_events_are_every_step_once_in_order_ending_with_the_answer(stack: Stack) -> None:
    cid = stack.server.submit()
    stream = stack.server.events(cid)
    assert stream.status == 200 and stream.ended
    result = stream.events[-1].data
    assert stream.kinds == expected_kinds(result)
    passes = [e.data for e in stream.events if e.kind == "pass"]
    assert all(0 <= p["score"] <= 1 for p in passes)
    assert passes[-1]["converged"] is True
    assert any(step["output"] for p in passes for step in p["steps"])
    assert stream.events[-2].data["reason"] == result["status"] == "converged"
    assert result["final_answer"]["answer_text"]
    assert len({e.id for e in stream.events}) == len(stream.events)


def test_the_plan_is_counted_as_phase_b_made_it_by_the_cli_and_the_event_stream(
    stack: Stack, procs: Processes
) -> None:
    """Issue 35: `aeon ask` said `B planned: 2 steps` while the `plan` event (and the run
    page's Plan card, made from it) showed 3: the offline model's refinement after pass 1 adds
    a review step, which a reader who came after it took for a planned one. The `plan` event
    counts B's steps and marks the added one with its pass, as the CLI's pass line names it."""
    ask = procs.run_aeon(
        stack.env, "ask", "Explain how tides work, then why they vary", "--json", timeout=60
    )
    assert ask.returncode == 0, ask.tail()
    planned = re.search(r"B  planned: (\d+) steps", ask.stderr)
    added = re.search(r"C  pass 1: .*\(added ([\w, -]+)\)", ask.stderr)
    assert planned and added, ask.stderr
    cid = orjson.loads(ask.stdout)["correlation_id"]

    (plan,) = [e.data for e in stack.server.events(cid).events if e.kind == "plan"]
    assert plan["planned_steps"] == int(planned.group(1)) == 2
    later = [s for s in plan["steps"] if "added_in_pass" in s]
    assert [(s["step_id"], s["added_in_pass"]) for s in later] == [
        (step_id, 1) for step_id in added.group(1).split(", ")
    ]
    assert len(plan["steps"]) == plan["planned_steps"] + len(later)


def test_a_reader_resumes_with_last_event_id_missing_nothing_and_repeating_nothing(
    stack: Stack,
) -> None:
    cid = stack.server.submit()
    first = stack.server.events(cid, stop_after=2)
    assert [e.kind for e in first.events] == ["profile", "plan"]
    rest = stack.server.events(cid, last_event_id=first.events[-1].id)
    assert rest.ended
    whole = stack.server.events(cid)
    assert first.kinds + rest.kinds == whole.kinds == expected_kinds(whole.events[-1].data)
    assert rest.events[-1].data == whole.events[-1].data
    after_answer = stack.server.events(cid, last_event_id=whole.events[-1].id)
    assert after_answer.status == 204


def test_a_server_that_never_saw_the_run_resumes_it_from_redis(
    stack: Stack, procs: Processes
) -> None:
    """The id says where in Redis the reader was: a second gateway, started after the run
    ended, finds the rest from there; a new reader there gets the whole run, found from its
    answer's time."""
    cid = stack.server.submit()
    first = stack.server.events(cid, stop_after=3)
    whole = stack.server.events(cid)  # to its end: the run is answered
    other = Server(procs, stack.env, name="serve-late")
    assert other.get(f"/v1/runs/{cid}").status == 200  # from the answer store
    rest = other.events(cid, last_event_id=first.events[-1].id)
    assert rest.status == 200 and rest.ended
    assert first.kinds + rest.kinds == whole.kinds
    assert [e.data for e in rest.events] == [e.data for e in whole.events[3:]]
    assert other.events(cid).kinds == whole.kinds


def test_a_bad_last_event_id_is_422(stack: Stack) -> None:
    cid = stack.server.submit()
    for made_up in ("pass-x@yesterday", f"plan@{2**64}-0"):  # the second, past what Redis takes
        stream = stack.server.events(cid, last_event_id=made_up)
        assert stream.status == 422 and stream.body["field"] == "Last-Event-ID", stream.body


def test_a_last_event_id_must_name_an_event_of_the_run_itself(stack: Stack) -> None:
    """Reading a run back from an id scans its shard from there: only for a run that exists,
    from an entry that is its own. A made-up run is 404 whatever the id, and another run's
    event is 422, both before anything is scanned."""
    cid = stack.server.submit()
    theirs = stack.server.events(cid).events[0].id
    unknown = uuid.uuid4().hex
    assert stack.server.events(unknown, last_event_id="profile@0-0").status == 404
    assert stack.server.events(unknown, last_event_id="exit@1-0").status == 404
    foreign = stack.server.events(unknown, last_event_id=theirs)
    assert foreign.status == 422 and foreign.body["field"] == "Last-Event-ID"
    assert "another run" in foreign.body["reason"]


def test_a_reader_that_hangs_up_is_let_go(stack: Stack) -> None:
    cid = stack.server.submit()
    gone = stack.server.events(cid, stop_after=1)  # reads one event, then closes its socket
    assert len(gone.events) == 1

    def let_go() -> bool:
        health = stack.server.get("/healthz").body
        return health["open_event_streams"] == 0 and health["watched_runs"] == 0

    wait_until(let_go, 30, "the server to close the stream of a reader that left")
    assert stack.server.events(cid).ended  # and the run is still there for the next reader


# -- the process ---------------------------------------------------------------------------------


def test_health_readiness_openapi_docs_and_page(stack: Stack) -> None:
    health = stack.server.get("/healthz")
    assert health.status == 200 and health.body["status"] == "ok"
    ready = stack.server.get("/readyz")
    assert ready.status == 200 and ready.body == {"status": "ready"}
    document = stack.server.get("/openapi.json").body
    assert document["openapi"].startswith("3.1")
    assert set(document["paths"]) >= {"/v1/runs", "/v1/runs/{correlation_id}/events", "/readyz"}
    assert "RunRequest" in document["components"]["schemas"]
    for path in ("/", "/docs"):
        page = stack.server.get(path)
        assert page.status == 200 and "<!doctype html>" in page.body
        assert "default-src 'self'" in page.header("content-security-policy")
    assert stack.server.get("/static/app.js").status == 200
    for path in ("/static/index.html", "/static/app.js"):  # the page, wherever it is served
        headers = stack.server.get(path).headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
    assert (
        "access-control-allow-origin"
        not in stack.server.get("/healthz", headers={"Origin": "https://elsewhere.example"}).headers
    )


def test_readiness_is_503_while_redis_is_down(procs: Processes, redis_server_factory) -> None:
    private = redis_server_factory()
    server = Server(procs, child_env(private.url, "tready"))
    assert server.get("/readyz").status == 200
    private.close()
    reply = server.get("/readyz")
    assert reply.status == 503 and reply.body["status"] == "unavailable"
    assert server.get("/healthz").status == 200


# -- tokens, the rate limit, CORS ---------------------------------------------------------------


def test_tokens_guard_the_api_and_are_never_logged(
    stack: Stack, procs: Processes, tmp_path: Path
) -> None:
    env = {
        **stack.env,
        "AEON_HTTP_TOKENS": f"{TOKEN},{OTHER_TOKEN}",
        "AEON_HTTP_CORS_ORIGINS": "https://app.example",
        "AEON_LOG_LEVEL": "DEBUG",
    }
    server = Server(procs, env, name="serve-guarded")
    bare = server.post("/v1/runs", {"request": "Explain tides"})
    assert bare.status == 401 and bare.body["field"] == "Authorization"
    assert bare.header("www-authenticate").startswith("Bearer")
    wrong = server.get("/v1/runs", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert wrong.status == 401
    good = {"Authorization": f"Bearer {OTHER_TOKEN}"}
    cid = server.post("/v1/runs", {"request": "Explain tides"}, headers=good).body["correlation_id"]
    assert server.events(cid, headers=good).ended
    assert server.events(cid).status == 401
    assert server.get("/healthz").status == 200  # outside the guard
    preflight = server.request(
        "OPTIONS",
        "/v1/runs",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status == 200
    assert preflight.header("access-control-allow-origin") == "https://app.example"
    refused = server.get("/v1/runs", headers={"Origin": "https://app.example"})
    assert refused.status == 401 and refused.header("access-control-allow-origin")
    server.proc.terminate()
    assert server.proc.wait(30) == 0
    for token in (TOKEN, OTHER_TOKEN):
        assert token not in server.proc.output


def test_a_client_over_the_rate_limit_is_429(stack: Stack, procs: Processes) -> None:
    env = {**stack.env, "AEON_HTTP_RATE_PER_S": "0.1", "AEON_HTTP_RATE_BURST": "3"}
    server = Server(procs, env, name="serve-limited")
    statuses = [
        # Whoever can send a request can send this header: it must not make a new client.
        server.get("/v1/runs?limit=1", headers={"X-Forwarded-For": f"10.0.0.{n}"}).status
        for n in range(4)
    ]
    assert statuses == [200, 200, 200, 429]
    refused = server.get("/v1/runs?limit=1")
    assert refused.body["error"] == "rate_limited" and int(refused.header("retry-after")) >= 1
    assert server.get("/healthz").status == 200  # the limit guards the API only


# -- the command --------------------------------------------------------------------------------


def test_sigterm_ends_open_streams_cleanly_and_exits_0(
    procs: Processes, redis_url: str, redis_prefix: str
) -> None:
    """No worker under this prefix: the run never moves, so its stream stays open until the
    server stops, and must then end as a stream ends (not cut), for the reader to resume."""
    server = Server(procs, child_env(redis_url, redis_prefix), name="serve-stopping")
    cid = server.submit()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        reading = pool.submit(server.events, cid)
        wait_until(lambda: server.get("/healthz").body["open_event_streams"] == 1, 30, "the stream")
        server.proc.terminate()
        stream = reading.result(timeout=30)
    assert stream.status == 200 and stream.ended and stream.events == []
    assert server.proc.wait(30) == 0
    assert "ERROR" not in server.proc.output


def test_serve_without_redis_url_runs_the_embedded_stack(procs: Processes) -> None:
    server = Server(procs, child_env(AEON_LLM_DELAY_MS="0"), name="serve-embedded")
    reply = server.post("/v1/runs?wait=60", {"request": "Explain tides"})
    assert reply.status == 200 and reply.body["result"]["final_answer"]["answer_text"]
    server.proc.terminate()
    assert server.proc.wait(30) == 0


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"AEON_HTTP_TOKENS": "short"}, "AEON_HTTP_TOKENS='***': 1 token(s) shorter than 16"),
        ({"AEON_HTTP_PORT": "99999"}, "AEON_HTTP_PORT='99999': must be at most 65535"),
        ({"AEON_HTTP_CORS_ORIGINS": "app.example"}, "'app.example' is not an origin"),
        ({"AEON_HTTP_RATE_PER_S": "-1"}, "AEON_HTTP_RATE_PER_S='-1': must be at least 0"),
    ],
)
def test_bad_http_settings_are_one_line_and_exit_2(
    procs: Processes, env: dict[str, str], said: str
) -> None:
    done = procs.run_aeon(child_env(**env), "serve")
    assert done.returncode == 2
    assert done.stderr.strip() == f"aeon: {said}" or said in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_port_already_taken_is_one_line_and_exit_2(stack: Stack, procs: Processes) -> None:
    done = procs.run_aeon(stack.env, "serve", "--port", str(stack.server.port))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.startswith(f"aeon: cannot listen on 127.0.0.1:{stack.server.port}")
    assert "choose a free port" in line and len(line.splitlines()) == 1


def test_a_trusted_proxy_names_the_client_the_rate_limit_counts(
    stack: Stack, procs: Processes
) -> None:
    env = {
        **stack.env,
        "AEON_HTTP_RATE_PER_S": "0.1",
        "AEON_HTTP_RATE_BURST": "1",
        "AEON_HTTP_TRUSTED_PROXIES": "127.0.0.1",
    }
    server = Server(procs, env, name="serve-proxied")
    behind = [
        server.get("/v1/runs?limit=1", headers={"X-Forwarded-For": f"10.0.0.{n}"}).status
        for n in range(3)
    ]
    assert behind == [200, 200, 200]
    again = server.get("/v1/runs?limit=1", headers={"X-Forwarded-For": "10.0.0.0"})
    assert again.status == 429 and "10.0.0.0" in again.body["reason"]


# -- what a browser elsewhere can do --------------------------------------------------------------


def test_a_body_not_sent_as_json_is_415_so_no_page_can_submit_without_a_preflight(
    stack: Stack,
) -> None:
    before = stack.bus.xlen("requests")
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        reply = stack.server.post("/v1/runs", raw=b'{"request": "hi"}', headers=headers)
        assert reply.status == 415, reply
        assert reply.body["field"] == "Content-Type" and "application/json" in reply.body["reason"]
    json_type = {"Content-Type": "application/json; charset=utf-8"}
    assert stack.server.post("/v1/runs", raw=b'{"request": "hi"}', headers=json_type).status == 202
    assert stack.bus.xlen("requests") == before + 1


def test_only_this_machines_names_and_allowed_hosts_are_served(
    stack: Stack, procs: Processes
) -> None:
    """DNS rebinding: a page at evil.example whose name now resolves to this machine sends
    `Host: evil.example`; refused, it cannot read the runs."""
    port = stack.server.port
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
        assert stack.server.get("/v1/runs", headers={"Host": host}).status == 200, host
    assert stack.server.get("/v1/runs", headers={"Host": f"evil.example:{port}"}).status == 400
    env = {**stack.env, "AEON_HTTP_ALLOWED_HOSTS": "aeon.example.com"}
    named = Server(procs, env, name="serve-named")
    assert named.get("/v1/runs", headers={"Host": "aeon.example.com"}).status == 200
    assert named.get("/v1/runs", headers={"Host": "evil.example"}).status == 400


# -- what the process keeps and survives ---------------------------------------------------------


def test_runs_submitted_without_wait_leave_nothing_behind(stack: Stack) -> None:
    """A submit's client keeps a run's answer until someone waits for it; a POST that does not
    wait must not have it kept, or every answer stays in memory for good."""
    cids = [stack.server.submit(f"Explain tide number {n}") for n in range(12)]
    short = stack.server.post("/v1/runs?wait=0.01", {"request": "Explain neap tides"})
    assert short.status == 202
    for cid in [*cids, short.body["correlation_id"]]:
        _answered(stack.server, cid)
    assert stack.server.get("/healthz").body["awaited_runs"] == 0


def test_an_answer_stored_unreadable_is_shown_as_missing_not_500(stack: Stack) -> None:
    cid = stack.server.submit("Explain spring tides")
    _answered(stack.server, cid)
    stack.bus.redis.set(stack.bus.keys.answer(cid), b'{"not": "an answer"}')
    run = stack.server.get(f"/v1/runs/{cid}")
    assert run.status == 202 and run.body["result"] is None, run
    listed = stack.server.get("/v1/runs?limit=20")
    assert listed.status == 200
    assert [r["status"] for r in listed.body["runs"] if r["correlation_id"] == cid] == [None]


def test_an_entry_that_cannot_be_read_is_skipped_and_the_streams_go_on(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    """Bytes that are not text where a correlation id belongs, in every stream the server
    reads: the readers pass over them and keep going."""
    procs.worker(env)
    server = Server(procs, env)
    garbage = {b"cid": b"\xff\xfe", b"type": b"\xff", b"body": b"\xff"}
    for name in ("requests", "profiled", "passes", "pass-completed", "loop-exited", "answers"):
        bus.redis.xadd(bus.stream(name), garbage)
    cid = server.submit()
    stream = server.events(cid)
    assert stream.ended and stream.kinds == expected_kinds(stream.events[-1].data)
    assert server.post("/v1/runs?wait=60", {"request": "Explain tides"}).status == 200
    assert server.get("/readyz").status == 200


def test_readiness_is_503_naming_a_reader_that_stopped(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    """A stream that is no longer a stream stops its reader for good; the process must not
    go on saying it is ready while every wait and live stream behind that reader hangs."""
    server = Server(procs, env)
    assert server.get("/readyz").status == 200
    bus.redis.delete(bus.stream("answers"))
    bus.redis.set(bus.stream("answers"), b"not a stream")

    def stopped() -> dict | None:
        reply = server.get("/readyz")
        return reply.body if reply.status == 503 else None

    body = wait_until(stopped, 30, "readiness to say a reader stopped")
    assert body["status"] == "unavailable" and "stopped" in body["reason"]
    assert "WRONGTYPE" in body["reason"]


def test_a_run_past_its_deadline_without_an_answer_ends_with_no_answer(
    procs: Processes, redis_url: str, redis_prefix: str
) -> None:
    """No worker under this prefix: nothing answers. Once the run's deadline and the grace
    after it have passed, its stream ends with `no_answer` rather than staying open for ever,
    and reading it says so."""
    server = Server(procs, child_env(redis_url, redis_prefix), name="serve-unanswered")
    cid = server.submit(timeout_s=0.5)
    stream = server.events(cid)
    assert stream.status == 200 and stream.ended
    assert stream.kinds == ["no_answer"]
    assert "no answer came by the run's deadline" in stream.events[0].data["reason"]
    run = server.get(f"/v1/runs/{cid}")
    assert run.status == 200 and run.body["state"] == "no_answer" and run.body["result"] is None
    assert server.events(cid, last_event_id=stream.events[0].id).status == 204
    listed = server.get("/v1/runs").body["runs"]
    assert [r["state"] for r in listed if r["correlation_id"] == cid] == ["no_answer"]
