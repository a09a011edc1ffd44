"""One line of live progress per pipeline event, for a person watching `aeon ask` on stderr."""

from __future__ import annotations

from phases.events import (
    Event,
    LoopExited,
    PassCompleted,
    PassRequested,
    PlanReady,
    TaskProfiled,
)


def describe(event: Event) -> str | None:
    """What `event` says about the run's progress, or None if it says nothing worth a line."""
    if isinstance(event, TaskProfiled):
        profile = event.run.profile
        depth = profile.reasoning_depth if profile else "?"
        fallback = " (default profile)" if event.run.profile_is_default else ""
        return f"A  profiled: depth {depth}, TTL {event.run.ttl_remaining} passes{fallback}"
    if isinstance(event, PlanReady):
        steps = len(event.run.plan.steps) if event.run.plan else 0
        return f"B  planned: {steps} steps, {event.run.total_refinements} refinement(s)"
    if isinstance(event, PassCompleted):
        last = event.run.last_pass
        if last is None:
            return None
        verdict = "converged" if last.converged else "not converged"
        return (
            f"C  pass {last.pass_number}: score {last.score:.2f}, {verdict}, "
            f"{len(last.executed_step_ids)} step(s) run"
        )
    if isinstance(event, PassRequested):
        return f"D  pass {event.run.pass_count + 1} requested, TTL left {event.run.ttl_remaining}"
    if isinstance(event, LoopExited):
        detail = f" ({event.detail})" if event.detail else ""
        return f"E  loop exited: {event.reason}{detail}; synthesising the answer"
    return None
