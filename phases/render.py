"""How a run's models read, for people and for prompts: one renderer per model.

A profile, a pass, a rule that failed and the way a run ended each read the same wherever they
are shown: in a prompt field (B's plan, C's refinement, D's profile update), a progress line, a
run step of the HTTP API, a degraded answer, and the CLI's output. So each has its wording here,
once. The gateway imports this module; nothing here imports the gateway (layers point one way:
gateway → phases).

Texts about how a run ended are made from its `Outcome` (phases.outcome), which every reader
gets from the answer's metadata through `outcome_of`, not from the run: a reader of an answer
has only that, perhaps from another version of the workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ValidationError

from aeonloop.phases.models import (
    AnswerReason,
    ConvergenceAssessment,
    ExecutionPass,
    ExitReason,
    Plan,
    Rule,
    RuleFinding,
    TaskProfile,
)
from aeonloop.phases.outcome import CheckVerdict, Degradation, Outcome

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


def plan_text(plan: Plan) -> str:
    """A plan as a person reviews it: its goal, then one line per step."""
    lines = [f"goal: {plan.goal}"]
    lines += [f"  {step.step_id}: {step.description}" for step in plan.steps]
    return "\n".join(lines)


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
    """The pass in one line: `pass 2: score 0.91, not converged, 2 step(s) run, tool call(s):
    add ok, blocked: s3, 1 refinement action(s) applied`."""
    verdict = "converged" if record.converged else "not converged"
    parts = [
        f"pass {record.pass_number}: score {record.score:.2f}",
        verdict,
        f"{len(record.executed_step_ids)} step(s) run",
    ]
    if record.tool_calls:
        calls = ", ".join(f"{c.tool} {c.outcome}" for c in record.tool_calls)
        parts.append(f"tool call(s): {calls}")
    if record.blocked_step_ids:
        parts.append(f"blocked: {', '.join(record.blocked_step_ids)}")
    if record.failed_steps:
        parts.append(f"did not complete: {', '.join(record.failed_steps)}")
    if record.refinement is not None:  # these and B's add up to the run's refinement actions
        parts.append(f"{len(record.refinement.applied)} refinement action(s) applied")
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


def failed_rule_line(finding: RuleFinding) -> str:
    """A rule that did not hold, said so: `failed rule no-tbd: …`, or a warning's."""
    label = "failed rule" if finding.severity == "fail" else "warning from rule"
    return f"{label} {finding_text(finding)}"


# ---------------------------------------------------------------------------------------------
# How a run ended.
# ---------------------------------------------------------------------------------------------

#: Each exit reason as a person reads it.
EXIT_WORDS: dict[str, str] = {
    ExitReason.CONVERGED: "converged",
    ExitReason.TTL_EXHAUSTED: "TTL exhausted, every pass of the budget used",
    ExitReason.STAGNATED: "stopped improving",
    ExitReason.MAX_PASSES: "reached AEON_MAX_PASSES",
    ExitReason.DEADLINE_EXCEEDED: "the request's timeout passed",
    ExitReason.FAILED: "a phase failed",
    ExitReason.CANCELLED: "cancelled",
    ExitReason.BUDGET_EXHAUSTED: "the run's token budget was spent",
}

#: Each answer reason as a person reads it: why the answer is degraded, or why the host, not
#: the model, wrote it.
ANSWER_WORDS: dict[str, str] = {
    AnswerReason.CONVERGED: "the loop converged with its data complete",
    AnswerReason.NO_PASSES: "no execution pass ran, so the answer rests on no checked work",
    AnswerReason.TTL_EXHAUSTED: "the pass budget (TTL) was spent before the loop converged",
    AnswerReason.INCOMPLETE_STATE: "part of the run's data is missing or empty",
    AnswerReason.NOT_CONVERGED: "the loop ended without converging",
    AnswerReason.CHECKS_FAILED: (
        "a check of the answer did not hold, and no answer the run had held more checks"
    ),
    AnswerReason.LLM_ERROR: "the language model call failed",
    AnswerReason.INVALID_LLM_OUTPUT: (
        "the language model's reply was unusable even after one repair"
    ),
    AnswerReason.PROMPT_ERROR: "the synthesis prompt could not be prepared",
    AnswerReason.SYNTHESIS_ERROR: "answer synthesis failed unexpectedly",
    AnswerReason.REQUEST_LOST: (
        "the request text was lost, so there was nothing to put to the model"
    ),
    AnswerReason.DEADLINE_EXCEEDED: (
        "the request's deadline passed, so the model was not called again"
    ),
    AnswerReason.PHASE_E_FAILED: (
        "answer synthesis kept failing, so the model was not called again"
    ),
    AnswerReason.CANCELLED: "the run was cancelled, so the model was not called again",
    AnswerReason.BUDGET_EXHAUSTED: (
        "what is left of the run's token budget cannot pay for answer synthesis"
    ),
}
#: An answer that says it is degraded without saying why (another version's).
UNSAID = "the run did not go as planned"


def exit_words(reason: str) -> str:
    """An exit reason in words; a value this version does not know is shown as it is."""
    return EXIT_WORDS.get(reason, reason)


def answer_words(reason: str) -> str:
    """An answer reason in words; a value this version does not know is shown as it is."""
    return ANSWER_WORDS.get(reason, reason or UNSAID)


def ending(outcome: Outcome) -> list[Degradation]:
    """How the run ended and what failed, one coded line each: the exit in words (unless the
    loop converged), why the answer is what it is (unless the first line said it), the exit's
    detail, each check of the answer that did not hold (else each rule that did not hold in the
    last pass), the error, and what is missing from the run."""
    found: list[Degradation] = []
    status = outcome.convergence_status or outcome.stopped
    if status and status != ExitReason.CONVERGED:
        line = f"the loop exited early, before converging: {exit_words(status)}"
        found.append(Degradation(code=f"exit:{status}", line=line))
    reason = outcome.reason
    said = (reason == AnswerReason.NOT_CONVERGED and found) or (
        reason == AnswerReason.TTL_EXHAUSTED and status == ExitReason.TTL_EXHAUSTED
    )
    if reason != AnswerReason.CONVERGED and not said:
        found.append(Degradation(code=f"reason:{reason}", line=answer_words(reason)))
    if outcome.exit_detail:
        found.append(Degradation(code="exit_detail", line=f"why: {outcome.exit_detail}"))
    if outcome.checks:  # what the published answer held, which is what the reader gets
        found += [
            Degradation(code=f"check_{_verdict_word(c)}:{c.id}", line=check_line(c))
            for c in outcome.checks_not_held
        ]
        found += [
            Degradation(code=f"check_never_held:{rule_id}", line=never_held_line(rule_id))
            for rule_id in outcome.checks_never_held
        ]
    else:
        found += [
            Degradation(code=f"rule_{_finding_word(f)}:{f.id}", line=failed_rule_line(f))
            for f in outcome.failed_rules
        ]
    if outcome.error:
        found.append(Degradation(code="error", line=f"error: {outcome.error}"))
    if outcome.missing_fields:
        missing = ", ".join(artifact_words(name) for name in outcome.missing_fields)
        found.append(Degradation(code="missing_fields", line=f"missing from the run: {missing}"))
    return found


#: Each of the run's artifacts (PhaseEInput's optional fields, FR-028) as a reader names it:
#: the field names stay in the outcome's `missing_fields`, for machines.
ARTIFACT_WORDS: dict[str, str] = {
    "plan_state": "the plan",
    "execution_results": "the steps' results",
    "execution_passes": "the passes' records",
    "convergence_assessment": "the last pass's assessment",
    "semantic_validation": "the last pass's validation",
    "task_profile": "the task's profile",
}


def artifact_words(name: str) -> str:
    """An artifact's name in words; one this version does not know is shown as it is."""
    return ARTIFACT_WORDS.get(name, name)


def _verdict_word(check: CheckVerdict) -> str:
    return "failed" if check.verdict == "fail" else "warned"


def _finding_word(finding: RuleFinding) -> str:
    return "failed" if finding.severity == "fail" else "warned"


def ending_lines(outcome: Outcome) -> list[str]:
    """`ending`, the lines alone."""
    return [found.line for found in ending(outcome)]


def degradations(outcome: Outcome) -> list[Degradation]:
    """Why an answer is degraded (empty when it is not), coded, so no reader has to know the
    reason codes: how the run ended and what failed, then the run's notes."""
    if not outcome.degraded:
        return []
    notes = [Degradation(code="note", line=note) for note in outcome.run_notes]
    return [*ending(outcome), *notes]


def degraded_because(outcome: Outcome) -> list[str]:
    """The lines of why an answer is degraded, as its outcome records them, or as they follow
    from it for an answer of a version that did not record them (empty when it is not; UNSAID
    when it says it is, but nothing says why)."""
    if not outcome.degraded:
        return []
    found = outcome.degraded_because or degradations(outcome)
    return [each.line for each in found] or [UNSAID]


# ---------------------------------------------------------------------------------------------
# The checks of the answer (phases.verification), as its outcome records them.
# ---------------------------------------------------------------------------------------------

#: What each candidate the answer may be is called: `Outcome.published`.
ANSWERED_BY_WORDS: dict[str, str] = {
    "draft": "the plain draft (one call)",
    "answer": "the answer synthesised from the loop's work",
    "summary": "the host's summary of the run",
}


def answered_by_words(label: str) -> str:
    """`draft`, `answer`, `refinement:<round>` or `summary` in words."""
    if label.startswith("refinement:"):
        return f"the answer as refined in round {label.partition(':')[2]}"
    return ANSWERED_BY_WORDS.get(label, label)


def check_name(check: CheckVerdict) -> str:
    """A check's rule id, and that the request implied it when it did: `request.bullets (from
    the request)`."""
    origin = " (from the request)" if check.origin == "request" else ""
    return f"{check.id}{origin}"


def check_line(check: CheckVerdict) -> str:
    """A check that did not hold on the answer: `check request.bullets (from the request) did
    not hold: exactly 3 bullet points: found 5`."""
    what = "did not hold" if check.verdict == "fail" else "warns"
    about = ": ".join(part for part in (check.description, check.details) if part)
    return f"check {check_name(check)} {what}" + (f": {about}" if about else "")


def checks_line(outcome: Outcome) -> str:
    """How the answer fared, in one line: `2 of 3 check(s) held; answered by the answer as
    refined in round 1; lower-cased by the host`; empty when the answer records no checks."""
    if not outcome.checks:  # nothing was checked: which candidate it is says nothing
        return ""
    label = outcome.answered_by
    by = f"answered by {answered_by_words(label)}" if label else ""
    ran = [check for check in outcome.checks if check.verdict != "skipped"]
    held = f"{sum(1 for c in ran if c.held)} of {len(ran)} check(s) held"
    return "; ".join(part for part in (held, by, *outcome.repairs) if part)


def never_held_line(rule_id: str) -> str:
    """A check no candidate held, the draft included: more likely the check is wrong than
    every answer."""
    return (
        f"no answer the run had held check {rule_id}, not even the plain draft: this model did "
        "not meet it, here"
    )


def checks_not_held(outcome: Outcome) -> list[str]:
    """Each check that did not hold on the answer (failed or warned), one line each."""
    return [check_line(check) for check in outcome.checks_not_held]


def prepared_lines(rules: Iterable[Rule], prepared: Mapping[str, list[Any]]) -> list[str]:
    """The checks PREPARE made, one line per rule: `request.bullets (from the request): exactly
    3 bullet count(s)` (each check's own description, joined)."""
    lines = []
    for rule in rules:
        checks = prepared.get(rule.id) or []
        if checks:
            origin = " (from the request)" if rule.origin == "request" else ""
            what = "; ".join(check.describe() for check in checks)
            lines.append(f"{rule.id}{origin}: {what}")
    return lines


def check_held_line(check: CheckVerdict) -> str:
    """A check that held on the answer: `check request.bullets (from the request) held: …`."""
    return f"check {check_name(check)} held: {check.description}".rstrip(": ")


def findings_of(value: Any) -> list[RuleFinding]:
    """The failed rules an answer records; an entry of another shape is left out."""
    findings = []
    for item in value if isinstance(value, list) else []:
        try:
            findings.append(RuleFinding.model_validate(item))
        except ValidationError:
            continue
    return findings


def as_sentences(lines: Iterable[str]) -> str:
    """Lines as prose: each starts with a capital and ends with a full stop."""
    return " ".join(_sentence(line) for line in lines if line.strip())


def _sentence(line: str) -> str:
    text = line.strip()
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else f"{text}."


def as_json_text(value: BaseModel | dict | list) -> str:
    """Compact JSON of a model or structure, for prompt fields that carry an artifact (a
    profile, a plan, a tool call's arguments)."""
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
