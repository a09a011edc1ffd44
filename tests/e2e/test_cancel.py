"""Cancel a run through every interface, with real processes: `aeon serve`, `aeon worker`
(killed with SIGKILL in one case), `aeon cancel`, on the session's Redis.

The worker's offline model is slowed so that a run is mid-way when it is cancelled. Each run
must end with exactly one answer, `cancelled`, made without another LLM call.
"""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from e2e_support import Bus, Processes, assert_answered_once, wait_until
from http_support import Server

pytestmark = pytest.mark.e2e

#: Each LLM call of the worker takes this long: a run is mid-call most of the time.
SLOW_MS = "1500"


def _answer(bus: Bus, cid: str, timeout: float) -> dict:
    return wait_until(lambda: bus.stored_answer(cid), timeout, f"the answer of {cid}")


def test_cancel_over_http_202_then_409_and_404_for_an_unknown_run(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    slow = {**env, "AEON_LLM_DELAY_MS": SLOW_MS}
    procs.worker(slow)
    server = Server(procs, slow)
    cid = server.submit("Explain tides")
    wait_until(lambda: bus.pending(), 15, "the run to be in hand")

    cancelled_at = time.monotonic()
    reply = server.post(f"/v1/runs/{cid}/cancel")
    assert reply.status == 202, reply
    assert reply.body["state"] == "cancelling"
    assert server.post(f"/v1/runs/{cid}/cancel").status in (202, 409)  # again: the same

    result = _answer(bus, cid, 10)
    assert time.monotonic() - cancelled_at < 2.0 + 0.5  # a hop's poll, then Phase E's commit
    assert result["status"] == "cancelled"
    assert result["final_answer"]["metadata"]["reason"] == "cancelled"
    shown = server.get(f"/v1/runs/{cid}")
    assert (shown.status, shown.body["state"]) == (200, "answered")
    assert any("cancelled" in line for line in shown.body["degraded_because"])
    events = server.events(cid)
    assert events.events[-2].kind == "exit" and "cancelled" in str(events.events[-2].data)

    after = server.post(f"/v1/runs/{cid}/cancel")
    assert (after.status, after.body["error"], after.body["field"]) == (409, "conflict", "id")
    unknown = server.post("/v1/runs/no-such-run/cancel")
    assert (unknown.status, unknown.body["field"]) == (404, "id")
    assert_answered_once(bus, [cid])


def test_aeon_cancel_while_the_worker_holding_the_run_is_sigkilled(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    """The worker holding the run mid-call is killed; the cancel is recorded while no worker
    runs; the worker started next claims the run's entry, finds the mark and ends the run
    without calling the model: one answer, `cancelled`."""
    slow = {**env, "AEON_LLM_DELAY_MS": SLOW_MS}
    victim = procs.worker(slow, name="victim")
    server = Server(procs, slow)
    cid = server.submit("Explain tides")
    wait_until(lambda: bus.pending(victim.consumer), 15, "the victim to hold the run")
    victim.kill()

    cancel = procs.run_aeon(env, "cancel", cid, timeout=30)
    assert cancel.returncode == 0, cancel.tail()
    assert f"cancel of {cid} recorded" in cancel.stderr

    port = _free_port()
    rescuer = procs.worker(slow, "--metrics-port", str(port), name="rescuer")
    result = _answer(bus, cid, 20)
    assert result["status"] == "cancelled"
    assert_answered_once(bus, [cid])
    assert _llm_calls(port) == 0, "the rescuer called the model for a cancelled run"

    again = procs.run_aeon(env, "cancel", cid, timeout=30)
    assert again.returncode == 1, again.tail()
    assert "already has its answer" in again.stderr
    assert rescuer.stop() == 0, rescuer.tail()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _llm_calls(port: int) -> float:
    """The LLM calls a worker made, from its /metrics (every `aeon_llm_calls_total` series)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("aeon_llm_calls_total")
    )


def test_aeon_cancel_of_an_id_aeon_never_saw_is_exit_2_and_writes_nothing(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    """Like the HTTP API's 404 (RunFeed.known decides both): one line, exit 2, no cancel mark;
    while a run submitted elsewhere, which this command never saw, is cancelled."""
    unknown = procs.run_aeon(env, "cancel", "no-such-run", timeout=30)
    assert unknown.returncode == 2, unknown.tail()
    lines = unknown.stderr.strip().splitlines()
    assert len(lines) == 1 and "no run no-such-run" in lines[0], unknown.stderr
    assert "Traceback" not in unknown.output
    assert not bus.redis.exists(bus.keys.cancel("no-such-run"))

    slow = {**env, "AEON_LLM_DELAY_MS": SLOW_MS}
    procs.worker(slow)
    server = Server(procs, slow)
    # Effort high: the loop's calls, 1.5 s each, outlast the CLI's start on a loaded machine; a
    # short ask's one call at the default effort could be answered before the cancel lands.
    cid = server.submit("Explain tides", effort="high")
    known = procs.run_aeon(env, "cancel", cid, timeout=30)
    assert known.returncode == 0, known.tail()
    assert _answer(bus, cid, 20)["status"] == "cancelled"
    assert_answered_once(bus, [cid])
