"""Graceful shutdown of a real `aeon worker`: SIGTERM while a slow LLM has events in flight.

The worker stops reading, lets the events it started finish within the grace period, commits
and acks them, logs what it handled and exits 0. Nothing it took is lost: with enough grace
nothing is left pending; with too little, what is unfinished stays pending and another worker
claims it. Either way every request is answered exactly once once a second worker runs.
"""

from __future__ import annotations

import time

import pytest
from e2e_support import Bus, Processes, Worker, assert_answered_once, wait_until

pytestmark = pytest.mark.e2e

REQUESTS = 6
SLOW_LLM_MS = 300  # a pass of Phase C makes 5 calls: 1.5 s in flight
AMPLE_GRACE_S = 10.0  # time enough to finish every pass in flight
SHORT_GRACE_S = 0.3  # far less than one pass takes


def _sigterm_during_phase_c(
    procs: Processes, bus: Bus, env: dict[str, str], grace_s: float
) -> tuple[Worker, float, int]:
    """Slow worker, a burst of requests, SIGTERM while it runs every run's first pass.

    Returns the stopped worker, how long it took to exit, and how many entries it held."""
    slow = procs.worker(
        {**env, "AEON_LLM_DELAY_MS": str(SLOW_LLM_MS), "AEON_SHUTDOWN_GRACE_S": str(grace_s)},
        name="slow",
    )
    gateway = procs.gateway(env, REQUESTS, timeout=60)
    held = wait_until(
        lambda: bus.xlen("passes") == REQUESTS and bus.pending(slow.consumer) == REQUESTS and 1,
        20,
        "the slow worker to be executing every run's first pass",
    )
    held = bus.pending(slow.consumer)
    sent = time.monotonic()
    slow.terminate()
    assert slow.wait(grace_s + 10) == 0, slow.tail()
    took = time.monotonic() - sent
    print(f"\nSIGTERM with {held} events in flight, grace {grace_s:g}s: exit 0 after {took:.2f}s")
    procs.started.remove(gateway)
    procs.started.append(gateway)  # keep the gateway last in failure reports
    return slow, took, held


def _finish_with_a_fresh_worker(procs: Processes, bus: Bus, env: dict[str, str]) -> None:
    fresh = procs.worker(env, name="fresh")
    gateway = next(p for p in procs.started if p.name.startswith("gateway"))
    assert gateway.wait(30) == 0, gateway.tail()
    submitted = [row["cid"] for row in gateway.records("submitted")]
    assert_answered_once(bus, submitted)
    assert fresh.stop() == 0, fresh.tail()


@pytest.mark.timeout(90)
def test_sigterm_finishes_in_flight_events_and_exits_0(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    slow, took, held = _sigterm_during_phase_c(procs, bus, env, AMPLE_GRACE_S)

    assert took < AMPLE_GRACE_S
    assert slow.handled()["c"] == held  # each pass it had started was finished...
    assert bus.pending() == 0  # ...and acked: nothing is left for others to claim
    assert bus.xlen("pass-completed") + bus.xlen("loop-exited") == held
    assert "unfinished at shutdown" not in slow.stderr
    _finish_with_a_fresh_worker(procs, bus, env)


@pytest.mark.timeout(90)
def test_sigterm_past_the_grace_period_leaves_the_rest_to_other_workers(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    slow, took, held = _sigterm_during_phase_c(procs, bus, env, SHORT_GRACE_S)

    assert took < SLOW_LLM_MS * 5 / 1000, "it waited for the passes instead of the grace period"
    assert slow.handled()["c"] == 0
    assert "events unfinished at shutdown stay pending for others to claim" in slow.stderr
    assert bus.pending(slow.consumer) == held  # left pending, not acked, not lost
    _finish_with_a_fresh_worker(procs, bus, env)


@pytest.mark.timeout(60)
def test_shutdown_warning_counts_the_events_left_pending(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    # The requests wait in the stream before the worker starts, so it reads them in one batch.
    procs.gateway(env, REQUESTS, timeout=60)
    wait_until(lambda: bus.xlen("requests") == REQUESTS, 20, "the burst to be submitted")
    slow = procs.worker({**env, "AEON_LLM_DELAY_MS": "2000", "AEON_SHUTDOWN_GRACE_S": "0.2"})
    wait_until(lambda: bus.pending(slow.consumer) == REQUESTS, 10, "every request to be read")
    assert slow.stop() == 0, slow.tail()

    assert bus.pending(slow.consumer) == REQUESTS
    assert f"{REQUESTS} events unfinished at shutdown stay pending" in slow.stderr
