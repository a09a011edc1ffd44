"""Live progress of a run: small typed records for `on_progress`, one line each for a person.

A progress event on the bus carries the whole run (several KB once a few passes are in); a
callback gets a `Progress` instead: which phase, one line, and the pass's number and score.
`print` shows just the line.

Names kept apart on purpose: the pass budget (TTL, passes a run may take, `--max-ttl`) and the
request's timeout (seconds, `--timeout`) end a run for different reasons and read differently.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from aeonloop.phases import render
from aeonloop.phases.events import (
    Event,
    LoopExited,
    PassCompleted,
    PassRequested,
    PlanAwaitingApproval,
    PlanReady,
    RunState,
    TaskProfiled,
)
from aeonloop.phases.models import ExecutionPass, ExitReason

Phase = Literal["A", "B", "C", "D", "E"]
#: What a reader of the answer's text as it is written is told when the text shown so far is
#: set aside (runs.answer_text's reset): the chat endpoint's thinking, `aeon ask` on a terminal.
SET_ASIDE_WORDS = "(the text above was set aside)"


@dataclass(frozen=True, slots=True)
class Progress:
    correlation_id: str
    phase: Phase
    #: What a person reads, e.g. "C  pass 2: score 0.91, converged, 3 step(s) run".
    line: str
    #: For the lines about one pass: its number and score.
    pass_number: int | None = None
    score: float | None = None

    def __str__(self) -> str:
        return self.line


def progress_of(event: Event) -> list[Progress]:
    """What `event` says about its run's progress: usually one record, none if nothing new.

    A loop exit after a pass also reports that pass: the pass that converges (or stagnates)
    has no PassCompleted of its own, since the loop goes straight to Phase E.
    """
    cid = event.correlation_id
    if isinstance(event, TaskProfiled):
        return [Progress(cid, "A", _profiled(event.run))]
    if isinstance(event, PlanAwaitingApproval):
        return [Progress(cid, "B", f"{_planned(event.run)}; awaiting approval")]
    if isinstance(event, PlanReady):
        if event.run.approve_plan:  # B's line came with its pause (PlanAwaitingApproval)
            steps = len(event.run.plan.steps) if event.run.plan else 0
            return [Progress(cid, "B", f"B  plan approved: {steps} steps; running it")]
        return [Progress(cid, "B", _planned(event.run))]
    if isinstance(event, PassCompleted):
        last = event.execution_pass or event.run.last_pass
        return [pass_progress(cid, last)] if last else []
    if isinstance(event, PassRequested):
        number, left = event.run.pass_count + 1, event.run.ttl_remaining
        return [Progress(cid, "D", f"D  pass {number} requested, pass budget left {left}")]
    if isinstance(event, LoopExited):
        last = event.execution_pass
        passes = [pass_progress(cid, last)] if last else []
        run = event.run
        ended_at_a = event.reason is ExitReason.CONVERGED and run is not None and not run.plan
        if ended_at_a and run.profile is not None and not run.pass_count:
            # Ended by Phase A itself (its draft was enough): no TaskProfiled said A's part.
            passes = [Progress(cid, "A", f"{_profiled(run)}; the draft is enough")]
        detail = f" ({event.detail})" if event.detail else ""
        words = render.exit_words(event.reason)
        return [*passes, Progress(cid, "E", f"E  loop ended: {words}{detail}; answering")]
    return []


def _profiled(run: RunState) -> str:
    """Phase A's line: the profile's depth, the pass budget, and the checks prepared."""
    depth = run.profile.reasoning_depth if run.profile else "?"
    fallback = " (default profile)" if run.profile_is_default else ""
    checks = sum(len(made) for made in run.prepared.values())
    prepared = f", {checks} check(s) prepared" if checks else ""
    return f"A  profiled: depth {depth}, pass budget {run.ttl_remaining}{fallback}{prepared}"


def _planned(run: RunState) -> str:
    """Phase B's line: the steps it planned, and what its plan check did."""
    steps = len(run.plan.steps) if run.plan else 0
    # The run's count so far is B's own: its plan check is the only refinement yet.
    actions = run.total_refinements
    return f"B  planned: {steps} steps, plan check applied {actions} refinement action(s)"


def pass_progress(correlation_id: str, record: ExecutionPass) -> Progress:
    """A pass's line, in the words an answer and the run page use for it (phases.render), and
    the steps its refinement added: `B  planned` counted B's steps only, and the run page marks
    these `added in pass N` alike (gateway.http.run_steps.plan_history)."""
    line = f"C  {render.pass_line(record)}"
    applied = record.refinement.applied if record.refinement else []
    added = [
        a.new_step.step_id for a in applied if a.new_step and a.new_step.step_id != a.target_step_id
    ]
    if added:
        line += f" (added {', '.join(added)})"
    return Progress(correlation_id, "C", line, record.pass_number, record.score)


#: How often a reader that has heard nothing of its run for that long says what it waits for
#: (`Silence`): against a slow server nothing was shown for minutes while calls ran (issue 41).
WAITING_EVERY_S = 10.0
#: What a run waits for after its last progress line, by that line's phase (None: nothing
#: yet): the model's next call in the pipeline's order.
_WAITING_FOR: dict[Phase | None, str] = {
    None: "the profile and the draft (Phase A)",
    "A": "the plan, or the answer (Phase B or E)",
    "B": "the first pass's steps (Phase C)",
    "C": "the pass's assessment, or the answer (Phase D or E)",
    "D": "the next pass's steps (Phase C)",
    "E": "the answer, and its checks (Phase E)",
}


def waiting_line(phase: Phase | None, seconds: float) -> str:
    """The line saying what a run waits for, `seconds` after its last progress line, which was
    `phase`'s (None: there was none since its submission)."""
    return f"waiting for the model: {_WAITING_FOR[phase]}, {seconds:.0f} s"


class Silence:
    """How long a reader of a run has heard nothing of it, and the line that says what it waits
    for, once every WAITING_EVERY_S of silence (`due`): `aeon ask`, the chat stream's reasoning
    and the runs API's `waiting` events (so the run page) show it between the run's progress
    lines."""

    def __init__(self, every_s: float | None = None) -> None:
        self._every_s = WAITING_EVERY_S if every_s is None else every_s
        #: The phase of the last progress line heard (None: none yet).
        self.phase: Phase | None = None
        self._heard_at = self._said_at = time.monotonic()

    def heard(self, phase: Phase | None) -> None:
        """A progress line of `phase` came."""
        self.phase = phase
        self.writing()

    def writing(self) -> None:
        """The answer's text came: the model is writing, so the run is not silent."""
        self._heard_at = self._said_at = time.monotonic()

    def next_in(self) -> float:
        """Seconds until the next line is due (0: it is)."""
        return max(0.0, self._said_at + self._every_s - time.monotonic())

    def due(self) -> str | None:
        """The waiting line, if one is due now (then the next is due WAITING_EVERY_S on)."""
        now = time.monotonic()
        if now - self._said_at < self._every_s:
            return None
        self._said_at = now
        return waiting_line(self.phase, now - self._heard_at)


async def lines_until(
    lines: asyncio.Queue[Progress], done: asyncio.Future[Any]
) -> AsyncIterator[Progress]:
    """Each progress line as it is put in `lines` (a run's `on_progress`), until `done` is (its
    answer, waited for), the lines queued before it first: what a caller that relays a run's
    progress as it goes sends (MCP progress notifications, the chat endpoint's reasoning)."""
    while not (done.done() and lines.empty()):
        if not lines.empty():
            yield lines.get_nowait()
            continue
        line = asyncio.ensure_future(lines.get())
        try:
            await asyncio.wait({line, done}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the caller went: its wait for a line goes too
            line.cancel()
            raise
        if line.done():
            yield line.result()
        else:
            line.cancel()  # the answer came first; a line still queued is taken next round
