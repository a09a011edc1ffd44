"""Phase B: write the plan, validate it once, refine it once if the validation found issues.

Without a plan there is nothing to execute, so a plan that cannot be had ends the loop at once
(LoopExited "failed", zero passes) and Phase E answers degraded. Validation and refinement only
improve a plan that already exists, so their failures are noted and the unrefined plan goes on.

The validation and refinement helpers here are also what Phase C uses after each pass: one way
to ask for a semantic check, one way to turn the LLM's actions into an applied refinement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import ValidationError

from aeonloop.phases import summaries
from aeonloop.phases.deps import LoopSettings, PhaseDeps
from aeonloop.phases.events import Event, LoopExited, PlanReady, RunState, TaskProfiled
from aeonloop.phases.llm_calls import LLMSession
from aeonloop.phases.models import (
    Plan,
    PlanStep,
    RefinementAction,
    RefinementOutcome,
    SemanticValidationReport,
    apply_refinements,
)
from aeonloop.prompts.registry import (
    PlanBody,
    PlanGenerationInput,
    PlanGenerationOutput,
    PromptId,
    RefinementActionOutput,
    RefinementInput,
    RefinementOutput,
    SemanticValidationInput,
    SemanticValidationOutput,
)

MAX_STEP_ID = 64  # PlanStep.step_id's limit


async def handle(event: TaskProfiled, deps: PhaseDeps) -> list[Event]:
    """TaskProfiled → PlanReady with `run.plan`, or LoopExited("failed") when no plan came."""
    run = event.run
    session = deps.session(event.correlation_id, run.usage, event.deadline)
    try:
        plan = await generate_plan(session, run)
    except (*summaries.LLM_FAILURES, ValidationError) as error:
        return [_no_plan(event, run, f"plan generation failed: {error}")]
    if not plan.steps:
        return [_no_plan(event, run, "plan generation returned a plan with no steps")]
    run.plan = plan
    await _validate_and_refine(session, run, plan, deps.settings)
    return [event.child(PlanReady, run=run)]


def _no_plan(event: TaskProfiled, run: RunState, detail: str) -> LoopExited:
    run.notes.append(f"phase B: {detail}")
    return event.child(LoopExited, reason="failed", detail=detail, request=run.request, run=run)


async def generate_plan(session: LLMSession, run: RunState) -> Plan:
    data = PlanGenerationInput(
        request=run.request,
        profile_summary=summaries.profile_summary(run.profile),
        rules_summary=summaries.rules_summary(run.rules),
    )
    output = await session.json(
        PromptId.PLAN_GENERATION_USER, data, PlanGenerationOutput, scope="b/plan"
    )
    return plan_from_output(output.plan)


def plan_from_output(body: PlanBody) -> Plan:
    """The domain plan; repeated or over-long step ids are made unique rather than fatal."""
    ids = unique_step_ids([step.step_id for step in body.steps])
    steps = [
        PlanStep(step_id=step_id, description=step.description)
        for step_id, step in zip(ids, body.steps, strict=True)
    ]
    return Plan(goal=body.goal, steps=steps)


def unique_step_ids(ids: list[str]) -> list[str]:
    """Ids trimmed to the allowed length; a repeat gets `-2`, `-3`, ... so each id is unique."""
    seen: set[str] = set()
    result: list[str] = []
    for raw in ids:
        base = raw.strip()[:MAX_STEP_ID] or "step"
        candidate, n = base, 1
        while candidate in seen:
            n += 1
            suffix = f"-{n}"
            candidate = base[: MAX_STEP_ID - len(suffix)] + suffix
        seen.add(candidate)
        result.append(candidate)
    return result


async def _validate_and_refine(
    session: LLMSession, run: RunState, plan: Plan, settings: LoopSettings
) -> None:
    try:
        report = await validate(
            session, run.request, "plan", summaries.plan_text(plan), scope="b/validate"
        )
    except summaries.LLM_FAILURES as error:
        run.notes.append(summaries.failure_note("B", "plan validation", error, "plan kept as is"))
        return
    if not report.issues:
        return
    budget = refinement_budget(settings, run)
    if budget < 1:
        run.notes.append("phase B: plan validation found issues; no refinement budget is left")
        return
    try:
        outcome = await refine(session, run.request, plan, report.text(), budget, scope="b/refine")
    except summaries.LLM_FAILURES as error:
        run.notes.append(summaries.failure_note("B", "plan refinement", error, "plan kept as is"))
        return
    adopt(run, outcome)
    run.notes.append(
        f"phase B: plan validation found {len(report.issues)} issue(s); refinement applied "
        f"{len(outcome.applied)} action(s) and rejected {len(outcome.rejected)}"
    )


async def validate(
    session: LLMSession,
    request: str,
    kind: Literal["plan", "pass"],
    artifact: str | Callable[[int | None], str],
    *,
    scope: str,
) -> SemanticValidationReport:
    """One semantic validation of a plan, or of a pass's outputs (given as a builder of the
    per-output cap, so the prompt can be fitted to the context window)."""

    def build(cap: int | None) -> SemanticValidationInput:
        text = artifact if isinstance(artifact, str) else artifact(cap)
        return SemanticValidationInput(request=request, artifact_kind=kind, artifact=text)

    output = await session.json(
        PromptId.VALIDATION_SEMANTIC_USER, build, SemanticValidationOutput, scope=scope
    )
    # Read straight off the validated output (every report field is one of its attributes): one
    # validation into the domain model, without dumping the output to a dict first.
    return SemanticValidationReport.model_validate(output, from_attributes=True)


def refinement_budget(settings: LoopSettings, run: RunState) -> int:
    """Actions one refinement may apply: the per-pass bound, within what the run has left."""
    left = settings.max_refinements_per_run - run.total_refinements
    return max(0, min(settings.max_actions_per_pass, left))


async def refine(
    session: LLMSession, request: str, plan: Plan, issues: str, max_actions: int, *, scope: str
) -> RefinementOutcome:
    """Ask for actions addressing `issues` and apply them; executed steps stay untouched.

    A refinement that would leave the plan without steps is refused as a whole: an empty plan
    gives the loop nothing to execute and nothing to answer from.
    """
    data = RefinementInput(
        request=request,
        plan=summaries.plan_json(plan),
        issues=issues,
        executed_step_ids=[s.step_id for s in plan.steps if s.executed],
        max_actions=max_actions,
    )
    output = await session.json(
        PromptId.RECURSIVE_REFINEMENT_USER, data, RefinementOutput, scope=scope
    )
    actions, malformed = actions_from_output(output)
    outcome = apply_refinements(plan, actions, max_actions)
    outcome.rejected[:0] = malformed
    if not outcome.plan.steps:
        refused = [f"{a.action_type} {a.target_step_id or ''}".strip() for a in outcome.applied]
        return RefinementOutcome(
            plan=plan,
            rejected=[*outcome.rejected, f"refused {refused}: the plan would have no steps"],
        )
    return outcome


def actions_from_output(output: RefinementOutput) -> tuple[list[RefinementAction], list[str]]:
    """Well-formed actions, and a reason for each one that is not (e.g. MODIFY without target)."""
    actions: list[RefinementAction] = []
    malformed: list[str] = []
    for item in output.actions:
        try:
            actions.append(action_from_output(item))
        except ValidationError as error:
            detail = "; ".join(e["msg"] for e in error.errors())
            malformed.append(
                f"{item.action_type} {item.target_step_id or ''}: malformed ({detail})"
            )
    return actions, malformed


def action_from_output(item: RefinementActionOutput) -> RefinementAction:
    """The domain action, validated (its shape depends on its type); the new step's host-only
    fields (status, output, ...) start at their defaults.

    Built field by field rather than read from the output's attributes: PlanStep has fields
    PlanStepOutput lacks, and pydantic looking each up on the output costs more than a dump.
    """
    new = item.new_step
    return RefinementAction(
        action_type=item.action_type,
        target_step_id=item.target_step_id,
        new_step=PlanStep(step_id=new.step_id, description=new.description) if new else None,
        reason=item.reason,
    )


def adopt(run: RunState, outcome: RefinementOutcome) -> None:
    """Make the refined plan the run's plan and count what was applied against the run's bound."""
    run.plan = outcome.plan
    run.total_refinements += len(outcome.applied)
