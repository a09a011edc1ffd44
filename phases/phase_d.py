"""Phase D: adaptive depth at the pass boundary, then one unit of TTL spent per pass.

When the last pass shows the task was misjudged (it did not converge and validation found
medium/high-severity issues or a step was blocked), the LLM re-profiles the task with that
evidence; the new profile gets `profile_version + 1` and the TTL is rescaled by the change in
depth. A failed update is noted and the profile in force is kept: adaptation is an improvement,
never a reason to stop. Then the pass just run is paid for: TTL left → PassRequested (back to C),
none → LoopExited("ttl_exhausted").

TTL counts passes: A allocates T, so a run that never converges runs T passes. When D sees the
run, the pass just completed has not been paid for yet, so `ttl_remaining` still includes it.
"""

from __future__ import annotations

from aeonloop.bus.keys import memo_scope
from aeonloop.llm.session import LLMSession
from aeonloop.phases import exits, render, summaries
from aeonloop.phases.deps import PhaseDeps
from aeonloop.phases.events import Event, PassCompleted, PassRequested, RunState
from aeonloop.phases.models import ExecutionPass, TaskProfile
from aeonloop.phases.profiling import PROFILE_FAILURES, profile_from_output
from aeonloop.prompts.registry import PromptId, TaskProfileOutput, TaskProfileUpdateInput

DEPTH_UP_FACTOR = 0.2
DEPTH_DOWN_FACTOR = 0.15


async def handle(event: PassCompleted, deps: PhaseDeps) -> list[Event]:
    """PassCompleted → PassRequested while TTL is left, else LoopExited("ttl_exhausted")."""
    run = event.run
    last = event.execution_pass or run.last_pass
    stop = exits.at_pass_boundary(last)  # ends a run with no pass to judge
    if stop is not None:
        return [exits.loop_exited(event, stop)]
    if misjudged(last):
        session = deps.session(event.correlation_id, run.usage, event.deadline)
        await adapt_profile(session, run, last)
    run.ttl_remaining = max(0, run.ttl_remaining - 1)
    stop = exits.after_charge(run.ttl_remaining, last)
    if stop is not None:
        return [exits.loop_exited(event, stop)]
    return [event.child(PassRequested, run=run)]


def misjudged(record: ExecutionPass) -> bool:
    """The evidence that the profile was wrong: no convergence, and real issues or blocked steps."""
    if record.converged:
        return False
    serious = record.validation is not None and any(
        issue.severity in ("medium", "high") for issue in record.validation.issues
    )
    return serious or bool(record.blocked_step_ids)


def rescale_ttl(ttl: int, old_depth: int, new_depth: int, ceiling: int) -> int:
    """TTL after a depth change of Δ = new - old: up ×(1 + 0.2Δ), down ×(1 + 0.15Δ).

    (docs/phases.md, "D: adaptive depth at the pass boundary".) The product is truncated
    (`int`, as in A's allocation) and then capped by `ceiling`: "never above what is left". We
    read "what is left" as what is left of the request's TTL cap (`max_ttl` minus the passes
    already charged), not as the TTL in force: capping at the TTL in force would make every
    depth-up rescale a no-op, and the ×(1 + 0.2Δ) rule would never act.
    So a deeper task may get more passes, but the run never exceeds the cap it was given. The
    result may be 0 (a large depth-down on a small TTL): the run is then out of TTL.
    """
    delta = new_depth - old_depth
    factor = 1 + (DEPTH_UP_FACTOR if delta > 0 else DEPTH_DOWN_FACTOR) * delta
    return max(0, min(int(ttl * factor), ceiling))


def ttl_ceiling(run: RunState) -> int:
    """What is left of the request's cap, counting the pass about to be charged."""
    return max(0, run.max_ttl - run.pass_count + 1)


async def adapt_profile(session: LLMSession, run: RunState, last: ExecutionPass) -> None:
    """Re-profile from the last pass's evidence; on success, new version and rescaled TTL."""
    old = run.profile or TaskProfile.default()
    data = TaskProfileUpdateInput(
        request=run.request,
        current_profile=summaries.profile_json(old),
        evidence=render.pass_evidence(last),
    )
    try:
        output = await session.json(
            PromptId.TASKPROFILE_UPDATE_USER,
            data,
            TaskProfileOutput,
            scope=memo_scope("d", "update", pass_number=last.pass_number),
        )
        new = profile_from_output(output, version=old.profile_version + 1)
    except PROFILE_FAILURES as error:
        run.notes.append(
            summaries.failure_note("D", "profile update", error, "the profile in force is kept")
        )
        return
    before = run.ttl_remaining
    run.profile = new
    run.profile_is_default = False
    run.ttl_remaining = rescale_ttl(
        before, old.reasoning_depth, new.reasoning_depth, ttl_ceiling(run)
    )
    run.notes.append(
        f"phase D: after pass {last.pass_number} the profile became version "
        f"{new.profile_version} (depth {old.reasoning_depth} → {new.reasoning_depth}); "
        f"TTL {before} → {run.ttl_remaining} before this pass is charged"
    )
