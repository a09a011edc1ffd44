"""Planning that phases B and C share: one refinement of a plan; and B's plan check.

Phase B validates the plan it wrote (when it needs it: `needs_check`) and refines it once; Phase
C refines the plan from each pass's evidence (its evaluation validates the pass's outputs). Both
ask for a refinement and apply the LLM's actions in the same way, so the two cannot drift apart:
executed steps are never touched, a refinement is bounded per pass and per run, and one that
would empty the plan is refused.
"""

from __future__ import annotations

from pydantic import ValidationError

from aeonloop.limits import LoopSettings
from aeonloop.llm.session import LLMSession
from aeonloop.phases import summaries
from aeonloop.phases.events import RunState
from aeonloop.phases.models import (
    Plan,
    RefinementAction,
    RefinementOutcome,
    SemanticValidationReport,
    apply_refinements,
)
from aeonloop.phases.plans import step_from_output
from aeonloop.prompts.registry import (
    PromptId,
    RefinementActionOutput,
    RefinementInput,
    RefinementOutput,
    SemanticValidationInput,
    SemanticValidationOutput,
)

#: The most steps a plan may have and run without the model's check in Phase B. The first pass's
#: evaluation reviews what such a plan's steps made, with their outputs as evidence, and its
#: refinement fixes the plan then; a wrong short plan costs only its few step calls first. A
#: longer plan wastes more step calls before that, so its check is worth its one call.
UNCHECKED_PLAN_STEPS = 3


def needs_check(plan: Plan) -> bool:
    """Whether Phase B has the model validate `plan` before it runs: one of more than
    UNCHECKED_PLAN_STEPS steps."""
    return len(plan.steps) > UNCHECKED_PLAN_STEPS


async def validate(
    session: LLMSession, request: str, plan: Plan, *, scope: str
) -> SemanticValidationReport:
    """One semantic validation of a plan (VALIDATION_SEMANTIC_USER). A pass's outputs are
    validated by the pass evaluation instead, in the call that judges them (phases.phase_c)."""
    data = SemanticValidationInput(
        request=request, artifact_kind="plan", artifact=summaries.plan_text(plan)
    )
    output = await session.json(
        PromptId.VALIDATION_SEMANTIC_USER, data, SemanticValidationOutput, scope=scope
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


def adopt(run: RunState, outcome: RefinementOutcome) -> None:
    """Make the refined plan the run's plan and count what was applied against the run's bound."""
    run.plan = outcome.plan
    run.total_refinements += len(outcome.applied)
