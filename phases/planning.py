"""Planning that phases B and C share: one semantic validation, one refinement of a plan.

Phase B validates the plan it wrote and refines it once; Phase C validates each pass's outputs
and refines the plan from the pass's evidence. Both ask in the same way and apply the LLM's
actions in the same way, so the two cannot drift apart: executed steps are never touched, a
refinement is bounded per pass and per run, and one that would empty the plan is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import ValidationError

from aeonloop.llm.session import LLMSession
from aeonloop.phases import summaries
from aeonloop.phases.deps import LoopSettings
from aeonloop.phases.events import RunState
from aeonloop.phases.models import (
    Plan,
    PlanStep,
    RefinementAction,
    RefinementOutcome,
    SemanticValidationReport,
    apply_refinements,
)
from aeonloop.prompts.registry import (
    PlanStepOutput,
    PromptId,
    RefinementActionOutput,
    RefinementInput,
    RefinementOutput,
    SemanticValidationInput,
    SemanticValidationOutput,
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
        new_step=step_from_output(new) if new else None,
        reason=item.reason,
    )


def step_from_output(
    step: PlanStepOutput, step_id: str | None = None, renamed: Mapping[str, str] | None = None
) -> PlanStep:
    """The domain step of a model's step: under `step_id` if given, its dependencies' ids
    passed through `renamed` (ids made unique), and its tool call if it names one."""
    names = renamed or {}
    return PlanStep(
        step_id=step_id or step.step_id,
        description=step.description,
        depends_on=None if step.depends_on is None else [names.get(d, d) for d in step.depends_on],
        tool=step.tool or None,
        arguments=step.arguments if step.tool else None,
    )


def adopt(run: RunState, outcome: RefinementOutcome) -> None:
    """Make the refined plan the run's plan and count what was applied against the run's bound."""
    run.plan = outcome.plan
    run.total_refinements += len(outcome.applied)
