"""What a run left, summarised: Phase E's material, for the synthesis prompt and the host's answer.

PhaseEInput (docs/requirements.md, FR-037) holds the run's upstream artifacts as plain dicts,
the shape the seed fixes for `execute_phase_e`'s callers, so what they hold is data, not a
contract: each summary reads its artifact, and one of an unexpected shape is shown as its JSON
(`_tolerant`), never guessed at (FR-028: nothing inferred). `synthesis_input` makes the
prompt's input from them (FR-041); `available_data` the host's account of them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from aeonloop.phases import render
from aeonloop.phases.models import ExecutionPass, PhaseEInput, Plan, RuleFinding
from aeonloop.phases.render import as_json_text
from aeonloop.prompts.clipping import clip
from aeonloop.prompts.registry import AnswerSynthesisInput, goal_text

#: PhaseEInput's optional upstream artifacts, in the order answers present them (FR-028).
ARTIFACT_FIELDS = (
    "plan_state",
    "execution_results",
    "execution_passes",
    "convergence_assessment",
    "semantic_validation",
    "task_profile",
)
#: Characters of one step's output shown to the model, and in a host-made degraded answer.
PROMPT_OUTPUT_CHARS = 8_000
ANSWER_OUTPUT_CHARS = 2_000


def missing_fields(phase_e_input: PhaseEInput) -> tuple[str, ...]:
    """Upstream artifacts that are absent or empty: an empty result is no result (FR-025)."""
    return tuple(name for name in ARTIFACT_FIELDS if not getattr(phase_e_input, name, None))


def failed_rules(phase_e_input: PhaseEInput) -> list[RuleFinding]:
    """The rules that did not hold in the last pass, failed ones first: what the answer names
    when it says what failed. A pass record of another shape names none."""
    passes = phase_e_input.execution_passes
    try:
        judged = (passes[-1] if passes else {}).get("evaluation") or {}
        found = [*(judged.get("failed") or []), *(judged.get("warnings") or [])]
    except (AttributeError, KeyError, TypeError):
        return []
    return render.findings_of(found)


def tool_calls(phase_e_input: PhaseEInput) -> list[dict[str, Any]]:
    """Every tool call of the run, oldest first, each with its pass: what a reader of the
    answer looks for first, gathered from the passes' records (`execution_passes`)."""
    return [
        {"pass_number": record.get("pass_number"), **call}
        for record in phase_e_input.execution_passes or []
        for call in record.get("tool_calls") or []
    ]


def synthesis_input(phase_e_input: PhaseEInput, cap: int | None = None) -> AnswerSynthesisInput:
    """What the model is shown (FR-041): the run's facts and its artifacts, summarised.

    Each step output is clipped to PROMPT_OUTPUT_CHARS, or to `cap` when the session fits the
    prompt to the context window with a smaller one.
    """
    limit = PROMPT_OUTPUT_CHARS if cap is None else min(cap, PROMPT_OUTPUT_CHARS)
    assessment = "\n".join(
        text
        for text in (
            assessment_summary(phase_e_input.convergence_assessment),
            validation_summary(phase_e_input.semantic_validation),
        )
        if text
    )
    return AnswerSynthesisInput(
        request=phase_e_input.request,
        convergence_status=phase_e_input.convergence_status,
        total_passes=phase_e_input.total_passes,
        total_refinements=phase_e_input.total_refinements,
        ttl_remaining=phase_e_input.ttl_remaining,
        last_pass_score=last_pass_score(phase_e_input),
        plan_summary=plan_summary(phase_e_input.plan_state, phase_e_input.request),
        # Under their ids alone: the plan summary just above gives each step's description,
        # so repeating it over each result would send every description twice.
        results_summary=results_summary(phase_e_input.execution_results, None, limit),
        assessment_summary=assessment,
        missing_fields=list(missing_fields(phase_e_input)),
    )


def last_pass_score(phase_e_input: PhaseEInput) -> float:
    """The last pass's score, 0 to 1: the rule score when rules decided, else the assessment's
    (docs/verified-answers.md, "Convergence: the host decides"). 0 when no pass ran or its record
    carries no usable score: nothing was measured."""
    passes = phase_e_input.execution_passes or []
    last = passes[-1] if passes else None
    score = last.get("score") if isinstance(last, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        return 0.0
    return min(1.0, max(0.0, float(score)))


def _tolerant(summary: Callable[..., str]) -> Callable[..., str]:
    """Upstream dicts are data, not contracts: an unexpected shape is shown as its JSON."""

    @functools.wraps(summary)
    def summarise(value: Any, *args: Any) -> str:
        if not value:
            return ""
        try:
            return summary(value, *args)
        except (AttributeError, KeyError, TypeError, ValueError):
            return clipped(_json_text(value), ANSWER_OUTPUT_CHARS)

    return summarise


@_tolerant
def plan_summary(plan_state: dict[str, Any], request: str | None = None) -> str:
    """Goal, then one line per step with its status. Given the `request` a prompt also shows,
    a goal that only restates it is not sent again (registry.goal_text)."""
    goal = str(plan_state.get("goal") or "")
    if goal and request is not None:
        goal = goal_text(goal, request)
    lines = [f"goal: {goal}"] if goal else []
    lines += [
        f"- {step['step_id']} ({step.get('status', 'unknown')}): {step.get('description', '')}"
        for step in plan_state.get("steps") or []
    ]
    return "\n".join(lines)


@_tolerant
def results_summary(
    execution_results: dict[str, Any],
    plan_state: dict[str, Any] | None,
    limit: int,
    shorten: Callable[[str, int], str] = clip,
) -> str:
    """Each step's output under its id and, given the plan, its description; clipped to `limit`
    characters (with the context marker for a prompt; answers shown to people pass a plainer
    `shorten`)."""
    descriptions = _step_descriptions(plan_state)
    return "\n\n".join(
        _result_block(str(step_id), descriptions.get(str(step_id), ""), shorten(_text(out), limit))
        for step_id, out in execution_results.items()
    )


def _result_block(step_id: str, description: str, output: str) -> str:
    return f"[{step_id}] {description}".rstrip() + f"\n{output}"


@_tolerant
def passes_summary(execution_passes: list[dict[str, Any]]) -> str:
    """One line per pass, in the words progress lines and the run page use (phases.render)."""
    return "\n".join(
        f"- {render.pass_line(ExecutionPass.model_validate(record))}" for record in execution_passes
    )


@_tolerant
def assessment_summary(assessment: dict[str, Any]) -> str:
    """The last assessment's scores, reason codes and summary."""
    text = (
        f"completeness {assessment.get('completeness_score')}, "
        f"coherence {assessment.get('coherence_score')}"
    )
    if assessment.get("reason_codes"):
        text += f"; reasons: {', '.join(map(str, assessment['reason_codes']))}"
    if assessment.get("summary"):
        text += f"; {assessment['summary']}"
    return text


@_tolerant
def validation_summary(validation: dict[str, Any]) -> str:
    """The last semantic validation: its issues, one per line, or that there were none."""
    issues = validation.get("issues") or []
    lines = [f"validation: {len(issues)} issue(s)" if issues else "validation: no issues"]
    lines += [f"- [{i.get('severity', '?')}] {i['description']}" for i in issues]
    if validation.get("summary"):
        lines.append(str(validation["summary"]))
    return "\n".join(lines)


@_tolerant
def profile_shown(task_profile: dict[str, Any]) -> str:
    """The profile in the words the planner is shown it (phases.render), or its JSON when it has
    none of a profile's keys."""
    return render.profile_text(task_profile) or _json_text(task_profile)


def available_data(phase_e_input: PhaseEInput) -> str:
    """The request and a summary of each upstream artifact present, for a host-made answer."""
    p = phase_e_input
    results = results_summary(p.execution_results, p.plan_state, ANSWER_OUTPUT_CHARS, clipped)
    sections = [
        ("Plan", plan_summary(p.plan_state)),
        ("Step results", results),
        ("Passes", passes_summary(p.execution_passes)),
        ("Last assessment", assessment_summary(p.convergence_assessment)),
        ("Last validation", validation_summary(p.semantic_validation)),
        ("Task profile", profile_shown(p.task_profile)),
    ]
    parts = [f"Request: {p.request}"]
    parts += [f"{title}:\n{text}" for title, text in sections if text]
    if len(parts) == 1:
        parts.append("No execution data is available beyond the request.")
    return "\n\n".join(parts)


def step_results(plan: Plan | None) -> dict[str, Any] | None:
    """FR-028's execution_results: the output of every step that completed, by step id (one
    whose output is not in hand, its history unread, is left out, not shown empty)."""
    if plan is None:
        return None
    done = [s for s in plan.steps if s.status == "done" and s.output is not None]
    return {s.step_id: s.output for s in done} or None


def known_step_ids(phase_e_input: PhaseEInput) -> set[str]:
    """Step ids the run really has: the model may cite only these as used."""
    results = phase_e_input.execution_results
    ids = set(results) if isinstance(results, dict) else set()
    return ids | set(_step_descriptions(phase_e_input.plan_state))


def _step_descriptions(plan_state: dict[str, Any] | None) -> dict[str, str]:
    try:
        return {
            str(step["step_id"]): str(step.get("description", ""))
            for step in (plan_state or {}).get("steps") or []
        }
    except (AttributeError, KeyError, TypeError):
        return {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


def _json_text(value: Any) -> str:
    try:
        return as_json_text(value)
    except TypeError:
        return repr(value)


def clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " …"
