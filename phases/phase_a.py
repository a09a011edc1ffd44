"""Phase A: infer the TaskProfile and allocate the run's TTL; prepare the run's checks and write
the plain draft, at once; end the run on the draft when it is enough.

See docs/phases.md, "A: task profile and TTL", and docs/verified-answers.md, "Verified answers"
and "Spend that follows need".

Only the calls the request is worth are made (phases.spend): the profile only where it can
change the run's path (a simple ask, or a request with checks and nothing to use, asks for none:
the default profile stands in, `run.profile_is_default`); PREPARE only for a rule in words or
constraint language the host's reader did not read.

A profile is only a judgement of effort, so a failed inference must not stop the run: the default
profile stands in, `run.profile_is_default` says so, and a note says why. PREPARE and the draft
are the same: without them the run goes on as it would have, with a note.

The calls need only the request, so they are made at once (one call's wall time), each
memoised under its own scope (`a`, `a/prepare`, `a/draft`): a redelivered hop makes none of
them again. While the draft fails a fail-severity check, further plain drafts are taken, one at
a time, up to AEON_DRAFT_SAMPLES (`a/draft:<n>`), and the one that holds most is kept
(verification.best_draft). When the loop has nothing to add (phases.exits.draft_suffices: a
simple ask, a request with checks and nothing to use, a profile asking for no more), the run
goes straight to Phase E, which publishes the draft, rewritten there for a check it fails.
"""

from __future__ import annotations

import asyncio

from aeonloop.bus.keys import memo_scope
from aeonloop.llm.session import LLMSession
from aeonloop.phases import exits, spend, summaries, verification
from aeonloop.phases.deps import NO_STREAM, PhaseDeps
from aeonloop.phases.events import Event, RequestSubmitted, RunState, TaskProfiled
from aeonloop.phases.models import TaskProfile
from aeonloop.phases.profiling import PROFILE_FAILURES, profile_from_output
from aeonloop.prompts.clipping import clip
from aeonloop.prompts.registry import PromptId, TaskProfileInferenceInput, TaskProfileOutput


async def handle(event: RequestSubmitted, deps: PhaseDeps) -> list[Event]:
    """RequestSubmitted → TaskProfiled, with the profile, `ttl_remaining`, the prepared checks
    and the draft set; or LoopExited("converged") when the draft is enough."""
    cap = deps.settings.max_passes
    run = event.initial_state(cap, deps.settings.run_token_budget, deps.settings.effort)
    if event.max_ttl is not None and event.max_ttl > cap:  # a producer other than a gateway
        run.notes.append(
            f"phase A: the request allowed {event.max_ttl} passes; AEON_MAX_PASSES holds the "
            f"run to {cap}"
        )
    session = deps.session(
        event.correlation_id, run.usage, event.deadline, event.files, turns=event.messages
    )
    # The draft is written as it comes when the run may end on it here (nobody asked to see
    # the plan first): a short ask then shows its answer at once.
    stream = NO_STREAM if run.approve_plan else deps.answer_stream(event.correlation_id)
    tools = bool(deps.tool_runner(run).specs)
    simple = spend.simple_ask(run, tools_available=tools)
    unprofiled = not spend.needs_profile(run, tools_available=tools, simple=simple)
    # All run to the end, so a redelivery finds every reply memoised; what stops the run (a
    # cancel, the budget, the LLM away at the deadline) is raised, in this order, after.
    profiled, prepared, drafted = await asyncio.gather(
        _unasked() if unprofiled else profile(session, run),
        verification.prepare(session, run) if spend.needs_prepare(run) else _unasked(),
        verification.draft(session, run, stream=stream),
        return_exceptions=True,
    )
    for outcome in (profiled, prepared, drafted):  # LLMFailure: each is done without, below
        if isinstance(outcome, BaseException) and not isinstance(outcome, PROFILE_FAILURES):
            raise outcome
    if isinstance(profiled, TaskProfile):
        run.profile = profiled
    else:
        run.profile = TaskProfile.default()
        run.profile_is_default = True
        if profiled is not None:
            why = summaries.failure_note(
                "A", "profile inference", profiled, "using the default profile"
            )
            run.notes.append(why)
    run.ttl_remaining = run.profile.allocate_ttl(cap=run.max_ttl)
    verification.adopt_prepared(run, verification.stated(run))
    if isinstance(prepared, BaseException):
        run.notes.append(
            summaries.failure_note("A", "PREPARE", prepared, "only the checks the host read")
        )
    elif prepared is not None:
        verification.adopt_prepared(run, prepared)
    if isinstance(drafted, BaseException):
        run.notes.append(summaries.failure_note("A", "the draft", drafted, "no draft to keep"))
    elif (why := verification.unusable(drafted, run.request)) is not None:
        run.notes.append(f"phase A: the draft was not kept: {why}")
    else:
        first = clip(drafted.text.strip(), deps.settings.max_step_output_chars)
        judged = await verification.check_text(run, first, deps.settings)
        run.draft, judged = await verification.best_draft(
            session, run, first, judged, deps.settings, stream
        )
        run.has_draft = True
        end = exits.draft_suffices(run, judged, tools_available=tools, simple=simple)
        if end is not None:
            return [exits.loop_exited(event, end, run=run)]
    await stream.set_aside()  # the run goes on to its plan: the draft is not its answer now
    return [event.child(TaskProfiled, run=run)]


async def profile(session: LLMSession, run: RunState) -> TaskProfile:
    """The profile the model infers (memoised under `a`)."""
    data = TaskProfileInferenceInput(
        request=run.request, rules_summary=summaries.rules_summary(run.rules)
    )
    output = await session.json(
        PromptId.TASKPROFILE_INFERENCE_USER, data, TaskProfileOutput, scope=memo_scope("a")
    )
    return profile_from_output(output, version=1)


async def _unasked() -> None:
    """A call the request is not worth (phases.spend): nothing is asked."""
    return None
