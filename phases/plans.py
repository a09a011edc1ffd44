"""A plan from a plan body, as the model writes one (Phase B, a refinement's new step) or a
person edits one (phases.approvals): ids and dependencies made sound rather than fatal.

Apart from the phases that call the model, so that reading a person's edited plan (the
gateways do, through phases.approvals) loads no phase handler and no LLM session.
"""

from __future__ import annotations

from collections.abc import Mapping

from aeonloop.phases.models import Plan, PlanStep, with_sound_dependencies
from aeonloop.prompts.registry import PlanBody, PlanStepOutput
from aeonloop.prompts.replies import names_no_tool

MAX_STEP_ID = 64  # PlanStep.step_id's limit


def plan_from_output(body: PlanBody) -> Plan:
    """The domain plan; repeated or over-long step ids are made unique rather than fatal, and
    dependencies the model got wrong (an unknown id, a cycle) are dropped rather than fatal
    (models.with_sound_dependencies). A dependency names the first step of its id."""
    ids = unique_step_ids([step.step_id for step in body.steps])
    renamed: dict[str, str] = {}
    for raw, step_id in zip(body.steps, ids, strict=True):
        renamed.setdefault(raw.step_id, step_id)
    steps = [
        step_from_output(step, step_id, renamed)
        for step_id, step in zip(ids, body.steps, strict=True)
    ]
    return Plan(goal=body.goal, steps=with_sound_dependencies(steps))


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


def step_from_output(
    step: PlanStepOutput, step_id: str | None = None, renamed: Mapping[str, str] | None = None
) -> PlanStep:
    """The domain step of a model's step: under `step_id` if given, its dependencies' ids
    passed through `renamed` (ids made unique), and its tool call if it names one. A tool named
    as no tool ("none", "null", "n/a", empty) makes a reasoning step: no model means a tool
    called "none", and treating it as one sent each such step to the missing-tool repair and
    showed it as an unknown tool (issue 32)."""
    names = renamed or {}
    tool = None if names_no_tool(step.tool) else step.tool
    return PlanStep(
        step_id=step_id or step.step_id,
        description=step.description,
        depends_on=None if step.depends_on is None else [names.get(d, d) for d in step.depends_on],
        tool=tool,
        arguments=step.arguments if tool else None,
    )
