"""Phase B: write the plan, validate it once if it needs it, refine it once if the validation
found issues.

Without a plan there is nothing to execute, so a plan that cannot be had ends the loop at once
(LoopExited "failed", zero passes) and Phase E answers degraded. Validation and refinement only
improve a plan that already exists, so their failures are noted and the unrefined plan goes on.

Validation and refinement are asked and applied as Phase C asks and applies them after each
pass (phases.planning).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from aeonloop.bus.keys import memo_scope
from aeonloop.exceptions import LLMFailure
from aeonloop.limits import LoopSettings
from aeonloop.llm.session import LLMSession
from aeonloop.phases import exits, history, render, summaries, tool_calls
from aeonloop.phases.deps import PhaseDeps
from aeonloop.phases.events import (
    Event,
    LoopExited,
    PlanAwaitingApproval,
    PlanReady,
    RunState,
    TaskProfiled,
)
from aeonloop.phases.models import Plan, SemanticValidationReport
from aeonloop.phases.planning import adopt, needs_check, refine, refinement_budget, validate
from aeonloop.phases.plans import plan_from_output
from aeonloop.prompts.registry import (
    PlanGenerationInput,
    PlanGenerationOutput,
    PromptId,
)
from aeonloop.tools.base import ToolSpec


async def handle(event: TaskProfiled, deps: PhaseDeps) -> list[Event]:
    """TaskProfiled → PlanReady with `run.plan`, or LoopExited("failed") when no plan came."""
    run = event.run
    files = await history.load_files(deps.records, event.correlation_id, run)
    turns = await history.load_turns(deps.records, event.correlation_id, run)
    session = deps.session(event.correlation_id, run.usage, event.deadline, files, turns)
    tools = tool_calls.available(deps.tools, run.tools)
    if run.fork is not None and run.fork.plan is not None:
        _take_forked_plan(run, run.fork.plan)
    else:
        try:
            plan = await generate_plan(session, run, tools)
        except (LLMFailure, ValidationError) as error:
            return [_no_plan(event, run, f"plan generation failed: {error}")]
        run.plan = plan
        await _validate_and_refine(session, run, plan, deps.settings, tools)
    if run.approve_plan:  # paused until a person approves it (phases.approvals)
        return [event.child(PlanAwaitingApproval, run=run)]
    return [event.child(PlanReady, run=run)]


def _take_forked_plan(run: RunState, plan: Plan) -> None:
    """The plan a fork was given (`Fork.plan`, checked by the gateway as an approval's edit
    is), taken as a person's plan is: neither validated nor refined. The fork stops carrying
    it: from here it travels as the run's plan."""
    run.plan = plan
    run.fork = run.fork.model_copy(update={"plan": None}) if run.fork else None
    run.notes.append("phase B: the plan the fork was given")


def _no_plan(event: TaskProfiled, run: RunState, detail: str) -> LoopExited:
    run.notes.append(f"phase B: {detail}")
    return exits.loop_exited(event, exits.no_plan(detail))


async def generate_plan(session: LLMSession, run: RunState, tools: Sequence[ToolSpec] = ()) -> Plan:
    """The plan for `run`; its steps may call `tools`, which the prompt lists."""
    data = PlanGenerationInput(
        request=run.request,
        profile_summary=render.profile_text(run.profile),
        rules_summary=summaries.rules_summary(run.rules),
        tools=tool_calls.offers(tools),
    )
    output = await session.json(
        PromptId.PLAN_GENERATION_USER, data, PlanGenerationOutput, scope=memo_scope("b", "plan")
    )
    return plan_from_output(output.plan)


async def _validate_and_refine(
    session: LLMSession,
    run: RunState,
    plan: Plan,
    settings: LoopSettings,
    tools: Sequence[ToolSpec],
) -> None:
    """The model's semantic validation (of a plan that needs one: planning.needs_check), plus
    the host's own finding that a step calls a tool this run does not have; refined once if
    either found issues."""
    invented = tool_calls.invented_tools(plan, tools)
    report = SemanticValidationReport()
    if needs_check(plan):
        try:
            report = await validate(session, run.request, plan, scope=memo_scope("b", "validate"))
        except LLMFailure as error:
            note = summaries.failure_note("B", "plan validation", error, "plan kept as is")
            run.notes.append(note)
    report.issues.extend(invented)
    if not report.issues:
        return
    budget = refinement_budget(settings, run)
    if budget < 1:
        run.notes.append("phase B: plan validation found issues; no refinement budget is left")
        return
    try:
        outcome = await refine(
            session, run.request, plan, report.text(), budget, scope=memo_scope("b", "refine")
        )
    except LLMFailure as error:
        run.notes.append(summaries.failure_note("B", "plan refinement", error, "plan kept as is"))
        return
    adopt(run, outcome)
    run.notes.append(
        f"phase B: plan validation found {len(report.issues)} issue(s); refinement applied "
        f"{len(outcome.applied)} action(s) and rejected {len(outcome.rejected)}"
    )
