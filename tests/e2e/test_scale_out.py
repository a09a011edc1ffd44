"""Issue 3's multi-process proof: one gateway process, two `aeon worker` processes.

Thirty requests go in at once from one client; every one is answered exactly once, and both
workers did part of the work (each reads at most 4 events per phase at a time, so neither can
take a whole burst).
"""

from __future__ import annotations

import pytest
from e2e_support import PHASES, Bus, Processes, assert_answered_once

pytestmark = pytest.mark.e2e

REQUESTS = 30


@pytest.mark.timeout(90)
def test_thirty_requests_over_two_workers_each_answered_once(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    worker_env = {**env, "AEON_LLM_DELAY_MS": "20"}
    workers = [procs.worker(worker_env, "--concurrency", "4") for _ in range(2)]

    gateway = procs.gateway(env, REQUESTS, timeout=60)
    assert gateway.wait(75) == 0, gateway.tail()

    submitted = gateway.submitted()
    assert len(set(submitted)) == REQUESTS
    answered = gateway.answered()
    assert sorted(row["cid"] for row in answered) == sorted(submitted)
    assert all(row["status"] == "converged" for row in answered), answered
    assert_answered_once(bus, submitted)

    for worker in workers:
        assert worker.stop() == 0, worker.tail()
    counts = [worker.handled() for worker in workers]
    print(f"\nevents handled per worker: {counts}")
    assert all(sum(c.values()) > 0 for c in counts), f"a worker did nothing: {counts}"
    totals = {phase: sum(c[phase] for c in counts) for phase in PHASES}
    # One request, one profile, one plan, one answer each: no event was handled twice.
    assert totals["a"] == totals["b"] == totals["e"] == REQUESTS, totals
