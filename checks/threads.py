"""Where the host's checks run: a few daemon threads that runs share fairly, each run within a
budget of CPU time for all its checks.

A check's patterns are bounded one by one (checks.patterns), but a run may carry a hundred that
backtrack, and check every candidate answer with them. Run in the event loop's default executor,
eight such runs held every one of its threads for minutes, so the checks of every other run (and
anything else that used the executor) waited behind them: runs starved, and a stopping worker
waited for the threads to finish. So:

- checks run in their own threads (`CheckThreads`), one check per job, by *lane* (one lane per
  evaluation of a run, named by the run's budget): a lane holds at most one thread at a time,
  and a free thread takes the next job of the lane whose run has spent the least CPU on checks,
  so a run with a few quick checks goes ahead of runs that have spent seconds on theirs, and
  waits at most for a job in hand (one check, within its pattern bound);
- the threads are daemons, and a job whose caller has gone (a cancelled run, a stopping worker)
  is dropped unrun: a worker's shutdown never waits on them, and a check in hand stops within
  its pattern bound by itself;
- each run's checks spend at most AEON_RUN_CHECK_CPU_S seconds of CPU together, across its
  checks and candidates (`RunBudget`, carried in the run's state between hops): past it, each
  further check fails, saying so, without running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aeonloop.exceptions import PatternTimedOut

T = TypeVar("T")

#: Threads that run checks in one process: one per core (at least two), so checks use the CPU
#: they may without taking all of it from the event loop and the LLM calls' parsing.
CHECK_THREADS = max(2, os.cpu_count() or 1)


class RunBudget:
    """The CPU seconds one run's checks may spend together (AEON_RUN_CHECK_CPU_S), and what they
    have spent: `spent` starts from what earlier hops of the run spent. Thread-safe: a run's
    checks are charged from the check threads."""

    def __init__(self, seconds: float, spent: float = 0.0) -> None:
        self.seconds = seconds
        self._spent = spent
        self._lock = threading.Lock()

    @property
    def spent(self) -> float:
        with self._lock:
            return self._spent

    def left(self) -> float:
        """Seconds left; PatternTimedOut (with the budget's seconds) when none are."""
        left = self.seconds - self.spent
        if left <= 0:
            raise PatternTimedOut(self.seconds)
        return left

    def charge(self, seconds: float) -> None:
        with self._lock:
            self._spent += seconds

    def spent_reason(self) -> str:
        """What a check the budget stopped says of it."""
        return (
            f"the run's checks used up their {self.seconds:g} s of CPU time (AEON_RUN_CHECK_CPU_S)"
        )


@dataclass
class _Job:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    work: Callable[[], Any]


class CheckThreads:
    """Daemon threads that run jobs across lanes, one job of a lane at a time, the lane whose
    run has spent least first."""

    def __init__(self, threads: int = CHECK_THREADS) -> None:
        self._size = threads
        self._threads: list[threading.Thread] = []
        self._ready = threading.Condition()
        #: Lanes with jobs waiting, oldest first (ties on spent go to the older).
        self._lanes: dict[RunBudget, deque[_Job]] = {}
        #: Lanes whose job a thread is running now.
        self._busy: set[RunBudget] = set()

    async def run(self, lane: RunBudget, work: Callable[[], T]) -> T:
        """`work()` in a check thread, in its turn among `lane`'s jobs and the other lanes'.
        Cancelling the caller drops the job if it has not started (one that has finishes on its
        own, bounded as every check is, and its result is dropped)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._ready:
            self._lanes.setdefault(lane, deque()).append(_Job(loop, future, work))
            self._start_thread()
            self._ready.notify()
        return await future

    def _start_thread(self) -> None:
        """One more thread while there are fewer than the pool's size (called holding the
        lock)."""
        if len(self._threads) < self._size:
            thread = threading.Thread(
                target=self._serve, name=f"aeon-check-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _serve(self) -> None:
        """A check thread: forever, the next job."""
        while True:
            lane, job = self._next()
            try:
                if not job.future.cancelled():
                    _settle(job)
            finally:
                with self._ready:
                    self._busy.discard(lane)
                    self._ready.notify_all()

    def _next(self) -> tuple[RunBudget, _Job]:
        """The first job of the lane, among those not running one, whose run has spent least."""
        with self._ready:
            while True:
                free = [lane for lane in self._lanes if lane not in self._busy]
                if free:
                    lane = min(free, key=lambda each: each.spent)
                    jobs = self._lanes[lane]
                    job = jobs.popleft()
                    if not jobs:
                        del self._lanes[lane]
                    self._busy.add(lane)
                    return lane, job
                self._ready.wait()


def _settle(job: _Job) -> None:
    """Run the job and hand its result (or its error) to its caller's loop, if both are still
    there."""
    try:
        result, error = job.work(), None
    except Exception as caught:  # handed to the caller, which raises it
        result, error = None, caught

    def give() -> None:
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for this
        job.loop.call_soon_threadsafe(give)


def cpu_seconds() -> float:
    """The calling thread's CPU time: what a check charges its run's budget (and what the
    `regex` package's own time bound counts)."""
    return time.thread_time()


#: The process's check threads, shared by every run its worker handles.
shared = CheckThreads()
