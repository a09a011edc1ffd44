"""What the phase handlers share: run data formatted into prompt *fields*, and failure handling.

The prompt text itself lives in prompts/registry.py; these helpers only turn the run's data
(rules, plan, step outputs, findings, critique) into the strings the registry's input models
carry, so each phase describes its state the same way and no two phases drift apart. A profile,
a pass and a rule that failed are shown to people too, so their wording is phases.render's.
Beside these: the note a handler leaves when it degrades (on an `LLMFailure`, the branch of
aeonloop.exceptions a handler catches from an LLM call).
"""

from __future__ import annotations

from collections.abc import Iterable

from aeonloop.phases.models import (
    CritiqueIssue,
    Evaluation,
    Plan,
    PlanStep,
    Rule,
    RuleCheck,
    RuleFinding,
    TaskProfile,
)
from aeonloop.phases.render import as_json_text
from aeonloop.prompts.clipping import clip


def failure_note(phase: str, what: str, error: Exception, consequence: str) -> str:
    """One line for `run.notes`, so Phase E and operators can see what degraded and why."""
    return f"phase {phase}: {what} failed ({type(error).__name__}: {error}); {consequence}"


def rules_summary(rules: Iterable[Rule]) -> str:
    """The request's rules, one per line, as the LLM should see them (no rules → empty)."""
    return "\n".join(_rule_line(rule) for rule in rules)


def _rule_line(rule: Rule) -> str:
    how = rule.check_text()
    expected = rule.check.expected if isinstance(rule.check, RuleCheck) else ""
    text = rule.description or expected or how
    shown = text if text == how else f"{text} ({how})"
    origin = ", from the request" if rule.origin == "request" else ""
    return f"- {rule.id} [{rule.severity}, weight {rule.weight}{origin}]: {shown}"


def profile_json(profile: TaskProfile) -> str:
    return as_json_text(profile)


def plan_json(plan: Plan) -> str:
    """The plan without step outputs: what refinement may act on, not what the steps said."""
    steps = [
        {"step_id": s.step_id, "description": s.description, "status": s.status}
        | ({"tool": s.tool, "arguments": s.arguments or {}} if s.tool else {})
        for s in plan.steps
    ]
    return as_json_text({"goal": plan.goal, "steps": steps})


def plan_text(plan: Plan) -> str:
    """The plan as the validator reads it: goal, then one step per line."""
    lines = [f"goal: {plan.goal}"]
    lines += [f"- {s.step_id}: {s.description}{_tool_text(s)}" for s in plan.steps]
    return "\n".join(lines)


def _tool_text(step: PlanStep) -> str:
    """How a plan in text shows a step's tool call (nothing for a reasoning step)."""
    if step.tool is None:
        return ""
    return f" [tool {step.tool}, arguments {as_json_text(step.arguments or {})}]"


def step_outputs(steps: Iterable[PlanStep], cap: int | None = None) -> str:
    """Outputs of executed steps, each under its id and description, blank line between; each
    output cut to `cap` characters with a marker when a prompt must fit its context window."""
    return "\n\n".join(f"[{s.step_id}] {s.description}\n{clip(s.output or '', cap)}" for s in steps)


def combined_output(plan: Plan, cap: int | None = None) -> str:
    """The work so far: every done step's output in plan order, as rules' checks search it
    (each cut to `cap` characters when shown to a model whose window needs it)."""
    return "\n\n".join(clip(s.output or "", cap) for s in plan.steps if s.status == "done")


def first_line(text: str, limit: int = 120) -> str:
    """The start of a reply, for a note: its first line, shortened."""
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[:limit].rstrip() + "…"


def rule_results_text(evaluation: Evaluation | None) -> str:
    """The host's rule verdicts, one per line, with the score (no rules → empty)."""
    if evaluation is None:
        return ""
    lines = [f"score {evaluation.score}, passed: {evaluation.passed}"]
    lines += [f"- {r.id}: {r.verdict} ({r.details})" for r in evaluation.rule_results]
    return "\n".join(lines)


def findings_text(findings: Iterable[RuleFinding]) -> str:
    """Failed rules for the critique, one per line: id, severity, message."""
    return "\n".join(f"{f.id}, {f.severity}, {f.message}" for f in findings)


def critique_text(issues: Iterable[CritiqueIssue]) -> str:
    """Critique issues as refinement input: each keeps the rule it is tied to."""
    return "\n".join(
        f"- [{i.rule_id}] {i.problem} Fix: {i.fix_instruction}".rstrip() for i in issues
    )


def findings_as_issues(findings: Iterable[RuleFinding]) -> str:
    """Failed rules as refinement input, when the critique gave nothing usable."""
    return "\n".join(f"- [{f.id}] rule failed: {f.message}" for f in findings)
