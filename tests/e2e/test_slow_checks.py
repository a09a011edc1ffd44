"""Checks that cannot starve a worker (issue 41, finding 2): a real `aeon worker` holding eight
runs of 100 patterns that backtrack.

Such runs reach a worker only from a producer past the gateways (which refuse more than
MAX_PATTERN_RULES such rules), so they are published here as one would: the event, on the
requests stream. Each run's checks then take at most AEON_RUN_CHECK_CPU_S of CPU, their details
say when that was used up, and the checks of other runs go first in the check threads (the run
that has spent least first). Before the fix all of them shared the event loop's default
executor: requests whose own text makes checks waited minutes behind the slow ones, and on
SIGTERM the worker said "stopped cleanly" and stayed alive while the threads ran on.

Times here are never asserted as such: the requests with checks are held to a generous multiple
of a control run of the same requests on the same worker, with no slow runs beside them.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from e2e_support import Bus, Processes, wait_until

from aeonloop.bus.codec import encode
from aeonloop.phases.events import RequestSubmitted
from aeonloop.phases.models import Rule, RuleCheck

pytestmark = pytest.mark.e2e

SLOW_RUNS = 8
SLOW_RULES = 100
#: Backtracks without end on a run of "a"s without "#" (issue 41's pattern).
BACKTRACKING = "(a|aa)+#"
#: The draft and the answer quote the request, so the checks are run on these 60 "a"s.
SLOW_REQUEST = "Repeat this back: " + "a" * 60
#: Requests whose own text makes checks (the host reads "three bullet points").
CHECKED_REQUEST = "Name facts about tides in three bullet points"
CHECKED = 3
#: Small enough that the eight slow runs end within the test, large enough that each spends
#: several seconds of CPU on its patterns.
RUN_CHECK_CPU_S = 3.0
GRACE_S = 1.0


def _publish_slow_runs(bus: Bus) -> list[str]:
    """Eight runs of 100 backtracking content rules each, straight onto the requests stream."""
    rules = [
        Rule(id=f"slow-{i}", check=RuleCheck(type="content", search=BACKTRACKING))
        for i in range(SLOW_RULES)
    ]
    cids = []
    for i in range(SLOW_RUNS):
        event = RequestSubmitted.new(f"{SLOW_REQUEST} (#{i})", rules=rules, timeout=600)
        bus.redis.xadd(bus.stream("requests", event.correlation_id), encode(event))
        cids.append(event.correlation_id)
    return cids


def _checked_requests(procs: Processes, env: dict[str, str], name: str, within: float) -> float:
    """The requests with checks, from one gateway; how long until every one was answered,
    failing past `within` seconds."""
    started = time.monotonic()
    gateway = procs.gateway(env, CHECKED, timeout=300, request=CHECKED_REQUEST, name=name)
    try:
        assert gateway.wait(within) == 0, gateway.tail()
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: the requests with checks were not all answered in {within:.0f}s")
    took = time.monotonic() - started
    assert len(gateway.answered()) == CHECKED
    return took


def _in_checks(bus: Bus, worker: str) -> None:
    """Until the worker holds every slow run (their drafts being checked)."""
    wait_until(
        lambda: bus.xlen("requests") >= SLOW_RUNS and bus.pending(worker) >= SLOW_RUNS,
        60,
        "the worker to hold every slow run",
    )


@pytest.mark.timeout(600)
def test_slow_patterns_of_eight_runs_leave_other_runs_checks_their_usual_time(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    worker = procs.worker({**env, "AEON_RUN_CHECK_CPU_S": str(RUN_CHECK_CPU_S)})
    control = _checked_requests(procs, env, "control", within=300)

    slow = _publish_slow_runs(bus)
    _in_checks(bus, worker.consumer)
    # Generous: five times the control, and half a minute for a loaded machine.
    beside = _checked_requests(procs, env, "beside", within=5 * control + 30)
    print(f"\nrequests with checks: {control:.1f}s alone, {beside:.1f}s beside the slow runs")

    wait_until(lambda: all(bus.stored_answer(cid) for cid in slow), 420, "the slow runs' answers")
    for cid in slow:
        checks = bus.stored_answer(cid)["final_answer"]["metadata"]["checks"]
        slow_checks = [check for check in checks if check["id"].startswith("slow-")]
        assert len(slow_checks) == SLOW_RULES
        assert all(check["verdict"] == "fail" for check in slow_checks)
        assert any("AEON_RUN_CHECK_CPU_S" in check["details"] for check in checks), checks[-1]
    assert worker.stop() == 0, worker.tail()


@pytest.mark.timeout(300)
def test_sigterm_ends_a_worker_in_slow_checks_within_its_grace(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    # A budget far above what the test waits: the checks are still running at the SIGTERM.
    worker = procs.worker({**env, "AEON_RUN_CHECK_CPU_S": "600", "AEON_SHUTDOWN_GRACE_S": "1"})
    _publish_slow_runs(bus)
    _in_checks(bus, worker.consumer)
    time.sleep(2)  # every check thread is in a pattern
    sent = time.monotonic()
    worker.terminate()
    assert worker.wait(GRACE_S + 15) == 0, worker.tail()
    took = time.monotonic() - sent
    print(f"\nSIGTERM amid slow checks, grace {GRACE_S:g}s: exit 0 after {took:.2f}s")
    assert "events unfinished at shutdown stay pending" in worker.stderr
    assert "stopped cleanly" in worker.stderr
    assert bus.pending(worker.consumer) == SLOW_RUNS  # left for another worker, not lost
