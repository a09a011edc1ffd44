"""Where checks run (checks.threads): a run's budget of CPU time for all its checks, and the
check threads runs share, the run that has spent least first, never waited on at shutdown.

No assertion here is on a duration: the budget is CPU time as the checks charge it, and the
threads are judged by the order in which jobs run.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from aeonloop.checks.running import all_hold, run_check
from aeonloop.checks.threads import CheckThreads, RunBudget, shared
from aeonloop.checks.types import CountCheck, PatternCheck
from aeonloop.exceptions import PatternTimedOut

#: Backtracks without end on a run of "a"s without "#" (issue 41).
BACKTRACKING = PatternCheck(pattern="(a|aa)+#")
AS = "a" * 60


@pytest.mark.timeout(60)
def test_a_runs_checks_stop_once_its_budget_is_spent_and_say_why() -> None:
    """Each slow pattern is charged what it took; once the run has spent its budget, a further
    check fails without running, its details naming the budget and its setting."""
    budget = RunBudget(0.2)
    first = run_check(BACKTRACKING, AS, timeout=0.15, budget=budget)
    assert not first.held and "ran out of its 0.15 s time bound" in first.details
    assert budget.spent >= 0.15

    # What is left (about 0.05 s) bounds the next pattern, and the budget is named for it.
    second = run_check(BACKTRACKING, AS, timeout=0.15, budget=budget)
    assert not second.held
    assert "the run's checks used up their 0.2 s of CPU time (AEON_RUN_CHECK_CPU_S)" in (
        second.details
    )
    with pytest.raises(PatternTimedOut):
        budget.left()

    # Spent: even a check that needs no pattern fails, unrun, saying why.
    quick = run_check(CountCheck(unit="words", max=5), "three words here", budget=budget)
    assert not quick.held
    assert quick.details.endswith(
        "not run: the run's checks used up their 0.2 s of CPU time (AEON_RUN_CHECK_CPU_S)"
    )


def test_a_budget_carries_what_earlier_hops_spent() -> None:
    """A run's state carries what its checks spent (RunState.check_cpu_s): a budget made from it
    has only the rest, and a run that spent it all checks nothing more."""
    assert RunBudget(10.0, spent=9.5).left() == pytest.approx(0.5)
    spent = RunBudget(10.0, spent=10.0)
    outcome = all_hold([PatternCheck(pattern="tide")], "tides", 0.5, spent)
    assert not outcome.held and "used up their 10 s of CPU time" in outcome.details


def test_quick_checks_spend_little_of_the_budget() -> None:
    budget = RunBudget(10.0)
    for _ in range(20):
        assert run_check(PatternCheck(pattern="tide"), "tides", budget=budget).held
    assert 0 < budget.spent < 1.0


async def test_a_fresh_runs_check_goes_before_the_next_of_a_run_that_has_spent() -> None:
    """One thread, a busy run with five jobs queued and a fresh run with one: the fresh run's
    job runs next, not after the busy run's (the default executor's FIFO order made a run with
    one quick check wait behind every check of every run before it)."""
    threads = CheckThreads(threads=1)
    busy, fresh = RunBudget(100.0), RunBudget(100.0)
    gate = threading.Event()
    order: list[str] = []

    def job(name: str, lane: RunBudget) -> None:
        if name == "busy-0":
            gate.wait(10)
        lane.charge(1.0)  # what a slow pattern would have cost
        order.append(name)

    def make(name: str, lane: RunBudget) -> asyncio.Future[None]:
        return asyncio.ensure_future(threads.run(lane, lambda: job(name, lane)))

    jobs = [make(f"busy-{i}", busy) for i in range(5)]
    await asyncio.sleep(0)  # queued, and the first taken
    jobs.append(make("fresh", fresh))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*jobs)
    assert order == ["busy-0", "fresh", "busy-1", "busy-2", "busy-3", "busy-4"]


async def test_one_run_holds_one_thread_at_a_time() -> None:
    """A run's jobs run one after another, whatever the threads: the others stay free."""
    threads = CheckThreads(threads=3)
    lane = RunBudget(100.0)
    running, most = 0, 0
    lock = threading.Lock()

    def job() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        run_check(BACKTRACKING, AS, timeout=0.02)
        with lock:
            running -= 1

    await asyncio.gather(*(threads.run(lane, job) for _ in range(6)))
    assert most == 1


async def test_a_cancelled_callers_job_is_dropped_unrun() -> None:
    threads = CheckThreads(threads=1)
    lane = RunBudget(100.0)
    gate = threading.Event()
    ran: list[str] = []
    first = asyncio.ensure_future(threads.run(lane, lambda: gate.wait(10)))
    second = asyncio.ensure_future(threads.run(lane, lambda: ran.append("second")))
    await asyncio.sleep(0)
    second.cancel()
    gate.set()
    await first
    await asyncio.sleep(0.05)
    third = await threads.run(lane, lambda: "third")
    assert third == "third" and ran == []


async def test_a_jobs_error_is_raised_to_its_caller() -> None:
    def fails() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await CheckThreads(threads=1).run(RunBudget(1.0), fails)


def test_check_threads_are_daemons_a_stopping_worker_never_waits_on() -> None:
    asyncio.run(shared.run(RunBudget(1.0), lambda: None))
    names = [t for t in threading.enumerate() if t.name.startswith("aeon-check-")]
    assert names and all(t.daemon for t in names)
