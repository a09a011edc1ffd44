"""Phase D: adaptive depth at the pass boundary, then one unit of TTL spent per pass.

When the last pass shows the task was misjudged (it did not converge and validation found
medium/high-severity issues or a step was blocked), the LLM re-profiles the task with that
evidence; the new profile gets `profile_version + 1` and the TTL is rescaled by the change in
depth. A failed update is noted and the profile in force is kept: adaptation is an improvement,
never a reason to stop. Then the pass just run is paid for: TTL left → PassRequested (back to C),
none → LoopExited("ttl_exhausted").

The update is asked for only where it can change what the run does (`reprofile_due`), and
then by the next pass, beside its steps (`run.reprofile_evidence`, phases.phase_c), since that
pass runs whatever the update says; the TTL is rescaled there as D would have (`apply_update`).
So D itself makes no LLM call.

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
    if reprofile_due(run, last):  # made by the next pass, beside its steps (phases.phase_c)
        run.reprofile_evidence = render.pass_evidence(last)
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


def reprofile_due(run: RunState, last: ExecutionPass) -> bool:
    """Whether the last pass asks for a re-profile that can change what the run does (the host
    decides, purely): the evidence asks for one (`misjudged`), and TTL is left for a next pass
    as it stands (at least 2 before this charge). With 1 left, no update could give the run a
    next pass: the rescale of 1 is int(1 × (1 + 0.2Δ)) = 1 at most (Δ ≤ 4), which this charge
    spends, so the run ends whatever the profile says, and the call would change nothing.

    A due update runs beside the next pass's steps: that pass runs whatever it says, so
    nothing needs to wait for it (phases.phase_c.beside_reprofile, then `apply_update`)."""
    return misjudged(last) and run.ttl_remaining >= 2


async def reprofile(
    session: LLMSession, run: RunState, evidence: str, after_pass: int
) -> TaskProfile | Exception:
    """The profile the model re-rates from a pass's `evidence`, or the failure to have one (a
    profile only estimates effort, so a failure is noted, never raised). Memoised under
    `d/p<after_pass>/update` wherever it is made, so a redelivery makes no second call."""
    old = run.profile or TaskProfile.default()
    data = TaskProfileUpdateInput(
        request=run.request, current_profile=summaries.profile_json(old), evidence=evidence
    )
    try:
        output = await session.json(
            PromptId.TASKPROFILE_UPDATE_USER,
            data,
            TaskProfileOutput,
            scope=memo_scope("d", "update", pass_number=after_pass),
        )
        return profile_from_output(output, version=old.profile_version + 1)
    except PROFILE_FAILURES as error:
        return error


def apply_update(run: RunState, after_pass: int, update: TaskProfile | Exception) -> None:
    """Adopt a re-profile made beside the pass after `after_pass`: the new version, and the TTL
    rescaled by the change in depth.

    The rescale is of the TTL Phase D saw before it charged `after_pass` (the charge is taken
    out, and put back after), so it comes out as if D had made the update before charging. It
    applies from the pass after the one running, which started on the TTL it had: a rescale to
    0 ends the run when that pass is charged."""
    if isinstance(update, Exception):
        run.notes.append(
            summaries.failure_note("D", "profile update", update, "the profile in force is kept")
        )
        return
    old = run.profile or TaskProfile.default()
    before = run.ttl_remaining + 1
    after = rescale_ttl(before, old.reasoning_depth, update.reasoning_depth, ttl_ceiling(run))
    run.profile = update
    run.profile_is_default = False
    run.ttl_remaining = max(0, after - 1)
    run.notes.append(
        f"phase D: after pass {after_pass} the profile became version "
        f"{update.profile_version} (depth {old.reasoning_depth} → {update.reasoning_depth}); "
        f"TTL {before} → {after} before pass {after_pass} is charged (the update was made "
        f"beside pass {after_pass + 1}'s steps)"
    )
