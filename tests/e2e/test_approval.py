"""Plan approval through every interface, with real processes on the session's Redis: the
HTTP API (`aeon serve`), `aeon approve [--plan FILE]`, and `aeon ask --approve-plan` answering
on its terminal, with a real `aeon worker` (the offline model)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from e2e_support import Bus, Processes, aeon_argv, assert_answered_once, wait_until
from http_support import Server

pytestmark = pytest.mark.e2e


def _paused(server: Server, cid: str) -> dict:
    def paused() -> dict | None:
        reply = server.get(f"/v1/runs/{cid}")
        return reply.body if reply.body.get("state") == "awaiting_approval" else None

    return wait_until(paused, 20, f"run {cid} awaiting approval")


def test_approve_and_edit_over_http(procs: Processes, env: dict[str, str], bus: Bus) -> None:
    procs.worker(env)
    server = Server(procs, env)
    started = time.monotonic()
    waited = server.post("/v1/runs?wait=30", {"request": "Explain tides", "approve_plan": True})
    assert waited.status == 202 and time.monotonic() - started < 5  # no wait for a paused run
    cid = waited.body["correlation_id"]
    paused = _paused(server, cid)
    assert paused["plan"]["steps"]
    assert (
        server.post(f"/v1/runs/{cid}/approve", {"plan": {"goal": "g", "steps": []}}).status == 422
    )
    edited = {"goal": "a short answer", "steps": [{"step_id": "one", "description": "Say it"}]}
    reply = server.post(f"/v1/runs/{cid}/approve", {"plan": edited})
    assert (reply.status, reply.body["state"]) == (202, "running")
    again = server.post(f"/v1/runs/{cid}/approve")
    assert (again.status, again.body["error"]) == (409, "conflict")
    result = wait_until(lambda: bus.stored_answer(cid), 30, "the answer")
    assert result["final_answer"]["metadata"]["plan_state"]["goal"] == "a short answer"
    assert server.post("/v1/runs/no-such-run/approve").status == 404

    rejected = server.submit("Explain tides", approve_plan=True)
    _paused(server, rejected)
    assert server.post(f"/v1/runs/{rejected}/cancel").status == 202
    assert wait_until(lambda: bus.stored_answer(rejected), 10, "the answer")["status"] == (
        "cancelled"
    )
    assert_answered_once(bus, [cid, rejected])


def test_aeon_approve_with_a_plan_file_after_the_worker_restarted(
    procs: Processes, env: dict[str, str], bus: Bus, tmp_path: Path
) -> None:
    """Paused, the worker is stopped; the plan is approved with no worker running; a new
    worker runs it."""
    first = procs.worker(env)
    server = Server(procs, env)
    cid = server.submit("Explain tides", approve_plan=True)
    _paused(server, cid)
    assert first.stop() == 0, first.tail()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"goal": "edited", "steps": [{"step_id": "x", "description": "d"}]}))
    approve = procs.run_aeon(env, "approve", cid, "--plan", str(plan), timeout=30)
    assert approve.returncode == 0, approve.tail()
    assert "approved as edited" in approve.stderr
    procs.worker(env)
    result = wait_until(lambda: bus.stored_answer(cid), 30, "the answer")
    assert result["final_answer"]["metadata"]["plan_state"]["goal"] == "edited"
    again = procs.run_aeon(env, "approve", cid, timeout=30)
    assert again.returncode == 1 and "not awaiting approval" in again.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    refused = procs.run_aeon(env, "approve", cid, "--plan", str(bad), timeout=30)
    assert refused.returncode == 2 and "is not valid JSON" in refused.stderr


def test_aeon_ask_approve_plan_asks_on_the_terminal(procs: Processes, env: dict[str, str]) -> None:
    procs.worker(env)
    started = time.monotonic()
    done = subprocess.run(
        [*aeon_argv(), "ask", "Explain tides", "--approve-plan", "--json", "--timeout", "60"],
        input="y\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert "the plan, awaiting your approval:" in done.stderr and "goal:" in done.stderr
    assert "approve this plan? [y/N]" in done.stderr and "plan approved" in done.stderr
    assert json.loads(done.stdout)["status"] == "converged"
    # Issue 35: the question came before the `A profiled` and `B planned` lines. The run's
    # lines come in its order: A's, B's (its plan awaiting approval), the question, then the
    # approved plan's line and the passes.
    said = done.stderr
    order = [
        "aeon: A  profiled",
        "aeon: B  planned: ",
        "the plan, awaiting your approval:",
        "approve this plan? [y/N]",
        "aeon: B  plan approved: ",
        "aeon: C  pass 1",
    ]
    at = [said.find(line) for line in order]
    assert -1 not in at and at == sorted(at), said
    assert said.count("B  planned: ") == 1, said
    assert time.monotonic() - started < 60


def test_the_event_stream_says_when_a_run_awaits_approval_with_its_plan(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    """A reader needs no polling: `awaiting_approval` comes with the plan to approve, and once
    approved the stream goes on (resumed after it) with the plan as approved, to the answer."""
    procs.worker(env)
    server = Server(procs, env)
    cid = server.submit("Explain tides", approve_plan=True)
    paused = server.events(cid, stop_after=2)
    assert [e.kind for e in paused.events] == ["profile", "awaiting_approval"]
    step = paused.events[-1]
    assert step.id.startswith("awaiting_approval@")
    assert step.data["plan"]["steps"] and step.data["plan"]["goal"]
    assert step.data["plan"] == {
        "goal": _paused(server, cid)["plan"]["goal"],
        "steps": [
            {"step_id": s["step_id"], "description": s["description"]}
            for s in _paused(server, cid)["plan"]["steps"]
        ],
    }
    edited = {"goal": "a short answer", "steps": [{"step_id": "one", "description": "Say it"}]}
    assert server.post(f"/v1/runs/{cid}/approve", {"plan": edited}).status == 202
    rest = server.events(cid, last_event_id=step.id)
    assert rest.ended and rest.kinds[0] == "plan" and rest.kinds[-1] == "answer", rest.kinds
    assert rest.events[0].data["goal"] == "a short answer"
    assert "awaiting_approval" not in rest.kinds
    assert_answered_once(bus, [cid])
