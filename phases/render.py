"""How a run's models read, for people and for prompts: one renderer per model.

A profile, a pass and a rule that failed each read the same wherever they are shown: in a
prompt field (B's plan, C's refinement, D's profile update), a progress line, a run step of the
HTTP API, and a degraded answer. So each has its wording here, once. The gateway imports this
module; nothing here imports the gateway (layers point one way: gateway → phases).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aeonloop.phases.models import ConvergenceAssessment, ExecutionPass, RuleFinding, TaskProfile

# ---------------------------------------------------------------------------------------------
# The task profile.
# ---------------------------------------------------------------------------------------------

PROFILE_KEYS = (
    "reasoning_depth",
    "information_sufficiency",
    "expected_tool_usage",
    "output_breadth",
    "confidence_requirement",
    "profile_version",
)


def profile_text(profile: TaskProfile | Mapping[str, Any] | None) -> str:
    """The profile's judgement in one line: `reasoning_depth=3, information_sufficiency=0.5, …`.

    Phase E holds the profile as PhaseEInput's JSON artifact (FR-037) and shows only the keys
    it has (FR-028: nothing invented), so the JSON form reads the same way as the model.
    """
    if profile is None:
        return ""
    data = profile.model_dump() if isinstance(profile, TaskProfile) else profile
    return ", ".join(f"{key}={data[key]}" for key in PROFILE_KEYS if key in data)


# ---------------------------------------------------------------------------------------------
# An execution pass.
# ---------------------------------------------------------------------------------------------

#: Why a blocked step is not done: the model's own BLOCKED reply.
BLOCKED_WHY = "the model said it could not do this step"


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """How one step fared in a pass."""

    step_id: str
    status: Literal["done", "blocked", "failed"]
    #: Why the step is not done; None when it is.
    why: str | None = None


def pass_steps(record: ExecutionPass) -> list[StepVerdict]:
    """Each step the pass ran, once, in the order it ran: done, blocked, or failed with why."""
    verdicts = []
    for step_id in dict.fromkeys(
        [*record.executed_step_ids, *record.blocked_step_ids, *record.failed_steps]
    ):
        if step_id in record.failed_steps:
            verdicts.append(StepVerdict(step_id, "failed", record.failed_steps[step_id]))
        elif step_id in record.blocked_step_ids:
            verdicts.append(StepVerdict(step_id, "blocked", BLOCKED_WHY))
        else:
            verdicts.append(StepVerdict(step_id, "done"))
    return verdicts


def pass_line(record: ExecutionPass) -> str:
    """The pass in one line: `pass 2: score 0.91, not converged, 2 step(s) run, blocked: s3`."""
    verdict = "converged" if record.converged else "not converged"
    parts = [
        f"pass {record.pass_number}: score {record.score:.2f}",
        verdict,
        f"{len(record.executed_step_ids)} step(s) run",
    ]
    if record.blocked_step_ids:
        parts.append(f"blocked: {', '.join(record.blocked_step_ids)}")
    if record.failed_steps:
        parts.append(f"did not complete: {', '.join(record.failed_steps)}")
    return ", ".join(parts)


def pass_issues(record: ExecutionPass) -> list[str]:
    """What the pass left to fix, one `- ` line each: validation issues, the assessment's gaps,
    and the steps that are not done (refinement works from these when no rule decided)."""
    validation = record.validation
    lines = validation.text().splitlines() if validation and validation.issues else []
    if record.assessment:
        lines += _assessment_gaps(record.assessment)
    for step in pass_steps(record):
        if step.status == "blocked":
            lines.append(f"- step {step.step_id} is blocked: {step.why}")
        elif step.status == "failed":
            lines.append(
                f"- step {step.step_id} did not complete ({step.why}); it runs again next pass"
            )
    return lines


def _assessment_gaps(assessment: ConvergenceAssessment) -> list[str]:
    c = assessment.consistency
    flags = {"plan": c.plan_aligned, "step": c.step_aligned, "answer": c.answer_aligned}
    unaligned = [name for name, aligned in flags.items() if not aligned]
    lines = [
        f"- assessment: completeness {assessment.completeness_score}, "
        f"coherence {assessment.coherence_score}"
        + (f"; not aligned: {', '.join(unaligned)}" if unaligned else "")
    ]
    lines += [f"- assessment: {code}" for code in assessment.reason_codes]
    return lines


def pass_evidence(record: ExecutionPass) -> str:
    """How a pass went, for the profile update (Phase D): its line, then what it left to fix."""
    validation = [] if record.validation else ["- validation did not run"]
    return "\n".join([pass_line(record), *validation, *pass_issues(record)])


# ---------------------------------------------------------------------------------------------
# Rules that did not hold.
# ---------------------------------------------------------------------------------------------


def finding_text(finding: RuleFinding) -> str:
    """A rule that did not hold: its id and the message (what it asks, and what the check saw)."""
    return f"{finding.id}: {finding.message}"
