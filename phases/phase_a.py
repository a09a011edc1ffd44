"""Phase A: infer the TaskProfile and allocate the run's TTL.

See docs/architecture.md, "A: task profile and TTL".

A profile is only a judgement of effort, so a failed inference must not stop the run: the default
profile stands in, `run.profile_is_default` says so, and a note says why.
"""

from __future__ import annotations

from aeonloop.bus.keys import memo_scope
from aeonloop.phases import summaries
from aeonloop.phases.deps import PhaseDeps
from aeonloop.phases.events import Event, RequestSubmitted, TaskProfiled
from aeonloop.phases.models import TaskProfile
from aeonloop.phases.profiling import PROFILE_FAILURES, profile_from_output
from aeonloop.prompts.registry import PromptId, TaskProfileInferenceInput, TaskProfileOutput


async def handle(event: RequestSubmitted, deps: PhaseDeps) -> list[Event]:
    """RequestSubmitted → TaskProfiled, with the profile and `ttl_remaining` set."""
    cap = deps.settings.max_passes
    run = event.initial_state(cap, deps.settings.run_token_budget)
    if event.max_ttl is not None and event.max_ttl > cap:  # a producer other than a gateway
        run.notes.append(
            f"phase A: the request allowed {event.max_ttl} passes; AEON_MAX_PASSES holds the "
            f"run to {cap}"
        )
    session = deps.session(event.correlation_id, run.usage, event.deadline, turns=event.messages)
    data = TaskProfileInferenceInput(
        request=run.request, rules_summary=summaries.rules_summary(run.rules)
    )
    try:
        output = await session.json(
            PromptId.TASKPROFILE_INFERENCE_USER, data, TaskProfileOutput, scope=memo_scope("a")
        )
        profile = profile_from_output(output, version=1)
    except PROFILE_FAILURES as error:
        profile = TaskProfile.default()
        run.profile_is_default = True
        run.notes.append(
            summaries.failure_note("A", "profile inference", error, "using the default profile")
        )
    run.profile = profile
    run.ttl_remaining = profile.allocate_ttl(cap=run.max_ttl)
    return [event.child(TaskProfiled, run=run)]
