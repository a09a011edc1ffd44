"""Forking a run through a real `aeon serve` and `aeon fork`, beside a real `aeon worker`
(docs/forks.md): the route and the command fork an answered run into the same answer, with
its lineage shown, and refuse a run that cannot be forked (404 / one line and exit 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from e2e_support import Processes, wait_until
from http_support import Server, Stack, served

pytestmark = pytest.mark.e2e

REQUEST = "Explain how tides work"


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("fork-logs")
    with served(redis_url, logs) as (server, bus, env):
        yield Stack(server, bus, env)


def answered(server: Server, correlation_id: str) -> dict:
    def done() -> dict | None:
        reply = server.get(f"/v1/runs/{correlation_id}")
        return reply.body if reply.status == 200 else None

    return wait_until(done, 60, f"run {correlation_id} answered")


def test_the_fork_route_forks_an_answered_run_into_the_same_answer(stack: Stack) -> None:
    parent = stack.server.submit(REQUEST)
    first = answered(stack.server, parent)
    reply = stack.server.post(f"/v1/runs/{parent}/fork")
    assert reply.status == 202, reply
    fork = reply.body["correlation_id"]
    assert fork != parent and reply.header("location") == f"/v1/runs/{fork}"
    run = answered(stack.server, fork)
    assert run["forked_from"] == {"parent": parent, "from_pass": None}
    assert first["forked_from"] is None
    text = run["result"]["final_answer"]["answer_text"]
    assert text == first["result"]["final_answer"]["answer_text"]
    again = stack.server.post(f"/v1/runs/{parent}/fork", {})  # the same fork, answered: 200
    assert (again.status, again.body["correlation_id"]) == (200, fork), again
    other = stack.server.post(f"/v1/runs/{parent}/fork", {"from_pass": 1, "rules": []})
    assert other.status == 202 and other.body["correlation_id"] not in (fork, parent), other


def test_the_fork_route_refuses_bad_ids_and_bodies_naming_them(stack: Stack) -> None:
    unknown = stack.server.post("/v1/runs/nosuchrun/fork")
    assert unknown.status == 404, unknown
    assert unknown.body["field"] == "id" and "cannot be forked" in unknown.body["reason"]
    assert stack.server.post("/v1/runs/not%20an%20id/fork").status == 422
    parent = stack.server.submit(REQUEST)
    answered(stack.server, parent)
    plan = {"goal": "g", "steps": [{"step_id": "s1", "description": "say it"}]}
    for body, field in (
        ({"from_pass": 0}, "from_pass"),
        ({"from_pass": "2"}, "from_pass"),
        ({"rules": [{"id": "r"}]}, "rules"),
        ({"plan": plan, "from_pass": 2}, "from_pass"),
        ({"timeout_s": -1.0}, "timeout_s"),
        ({"colour": "red"}, "colour"),
    ):
        refused = stack.server.post(f"/v1/runs/{parent}/fork", body)
        assert (refused.status, refused.body["field"]) == (422, field), (body, refused)


def test_aeon_fork_prints_the_forks_answer_and_aeon_answer_its_lineage(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    procs = Processes(tmp_path_factory.mktemp("fork-cli"))
    parent = stack.server.submit(REQUEST)
    first = answered(stack.server, parent)
    rules = tmp_path_factory.mktemp("rules") / "rules.json"
    rules.write_text(
        json.dumps([{"id": "short", "check": {"type": "count", "unit": "words", "max": 400}}])
    )
    done = procs.run_aeon(stack.env, "fork", parent, "--rules", str(rules), "--json")
    assert done.returncode in (0, 1), done.tail()
    result = json.loads(done.stdout)
    fork = result["correlation_id"]
    assert fork != parent and f"fork {fork} of {parent} submitted" in done.stderr
    [checked] = [c for c in result["final_answer"]["metadata"]["checks"] if c["id"] == "short"]
    assert checked["verdict"] == "pass"  # the fork's new rule, checked on its answer
    held_by_parent = first["result"]["final_answer"]["metadata"].get("checks", [])
    assert not any(check["id"] == "short" for check in held_by_parent)
    shown = procs.run_aeon(stack.env, "answer", fork)
    assert f"aeon: forked from {parent}\n" in shown.stderr, shown.tail()
    missing = procs.run_aeon(stack.env, "fork", "nosuchrun")
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        "aeon: run nosuchrun cannot be forked: no request of it is recorded (unknown, or "
        "expired: AEON_ANSWER_KEEP_S); nothing was published"
    ], missing.stderr
