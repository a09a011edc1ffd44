"""Domain models of a run: profile, plan, passes, evaluation, and Phase E's input and output.

Everything here is plain data with the small pure functions that belong to it (TTL allocation,
applying refinement actions, rubric checks), so phases stay thin and the rules are testable
without a bus or an LLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Dict, List, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from aeonloop.checks.patterns import compile_pattern
from aeonloop.checks.types import Check
from aeonloop.limits import DEFAULT_MAX_PASSES

ToolUsage = Literal["none", "minimal", "moderate", "extensive"]
Breadth = Literal["narrow", "moderate", "broad"]
ConfidenceLevel = Literal["low", "medium", "high"]

TOOL_WEIGHT: dict[str, float] = {"none": 0.5, "minimal": 0.75, "moderate": 1.0, "extensive": 1.5}
BREADTH_WEIGHT: dict[str, float] = {"narrow": 0.75, "moderate": 1.0, "broad": 1.5}
CONFIDENCE_WEIGHT: dict[str, float] = {"low": 0.75, "medium": 1.0, "high": 1.5}


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskProfile(Model):
    reasoning_depth: int = Field(3, ge=1, le=5)
    information_sufficiency: float = Field(0.5, ge=0.0, le=1.0)
    expected_tool_usage: ToolUsage = "moderate"
    output_breadth: Breadth = "moderate"
    confidence_requirement: ConfidenceLevel = "medium"
    raw_inference: str = ""
    profile_version: int = Field(1, ge=1)

    @classmethod
    def default(cls) -> TaskProfile:
        return cls(raw_inference="default profile")

    def allocate_ttl(self, cap: int = DEFAULT_MAX_PASSES) -> int:
        """Passes the loop may spend (docs/phases.md, "A: task profile and TTL"): at least 1
        and at most `cap`, the run's cap on passes (`pass_cap`)."""
        raw = (
            self.reasoning_depth
            * 1.5
            * self.information_sufficiency
            * TOOL_WEIGHT[self.expected_tool_usage]
            * BREADTH_WEIGHT[self.output_breadth]
            * CONFIDENCE_WEIGHT[self.confidence_requirement]
            * 2.0
        )
        return max(1, min(cap, int(raw)))


def pass_cap(requested: int | None, max_passes: int) -> int:
    """The most passes a run may take: what its request asked for (None: no less than the
    deployment allows), never above `max_passes` (AEON_MAX_PASSES), the one cap every run is
    held to. Gateways refuse a request above it; a request from another producer is capped."""
    return max_passes if requested is None else min(requested, max_passes)


StepStatus = Literal["pending", "done", "failed"]


class PlanStep(Model):
    step_id: str = Field(..., min_length=1, max_length=64)
    description: str = Field(..., min_length=1)
    status: StepStatus = "pending"
    #: What the step produced when it ran in `executed_in_pass`. Not sent with the plan: it is
    #: kept in that pass's history record and loaded with it (phases.history).
    output: SkipJsonSchema[str | None] = Field(None, exclude=True)
    executed_in_pass: int | None = None
    #: The steps whose outputs this one needs. None (a plan that does not say, and every plan
    #: before this field): every step before it in the plan, so such a plan runs one step at a
    #: time in its order, as it always did. [] needs none: it may run with any other.
    depends_on: list[str] | None = None
    #: The tool the step calls (tools/): its result is the step's output, no LLM call is made.
    #: None: a reasoning step, done by the model.
    tool: str | None = Field(None, min_length=1, max_length=128)
    #: The tool's arguments, checked against its input schema before the call.
    arguments: dict[str, Any] | None = None

    @property
    def executed(self) -> bool:
        """Done, so immutable. A failed step produced nothing to keep: it runs again next
        pass, and refinement may still change it."""
        return self.status == "done"


class Plan(Model):
    goal: str
    steps: list[PlanStep] = Field(default_factory=list)

    @field_validator("steps")
    @classmethod
    def _unique_ids(cls, steps: list[PlanStep]) -> list[PlanStep]:
        ids = [s.step_id for s in steps]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"step ids must be unique; repeated: {duplicates}")
        problem = dependency_problem(steps)
        if problem:
            raise ValueError(problem)
        return steps

    def dependencies(self, step: PlanStep) -> list[str]:
        """The ids of the steps `step` needs (`PlanStep.depends_on`; None: every earlier one)."""
        return _needs(self.steps)[step.step_id]

    def pending(self) -> list[PlanStep]:
        return [s for s in self.steps if not s.executed]

    def step(self, step_id: str) -> PlanStep | None:
        return next((s for s in self.steps if s.step_id == step_id), None)


def _needs(steps: list[PlanStep]) -> dict[str, list[str]]:
    ids = [s.step_id for s in steps]
    return {
        s.step_id: list(s.depends_on) if s.depends_on is not None else ids[:i]
        for i, s in enumerate(steps)
    }


def dependency_problem(steps: list[PlanStep]) -> str | None:
    """What is wrong with the steps' dependencies (an unknown id, a step needing itself, a
    cycle), or None."""
    needs = _needs(steps)
    for step_id, wanted in needs.items():
        unknown = [w for w in wanted if w not in needs]
        if unknown:
            return f"step {step_id} depends on unknown steps {unknown}"
        if step_id in wanted:
            return f"step {step_id} depends on itself"
    done: set[str] = set()
    left = dict(needs)
    while left:
        ready = [i for i, wanted in left.items() if all(w in done for w in wanted)]
        if not ready:
            return f"the dependencies of steps {sorted(left)} form a cycle"
        done.update(ready)
        for i in ready:
            del left[i]
    return None


def with_sound_dependencies(steps: list[PlanStep]) -> list[PlanStep]:
    """`steps` with dependencies a model got wrong dropped: unknown ids and the step itself
    leave its list; if a cycle is left, every step falls back to the plan's order (None)."""
    ids = {s.step_id for s in steps}
    kept = [
        s
        if s.depends_on is None
        else s.model_copy(
            update={"depends_on": [d for d in s.depends_on if d in ids and d != s.step_id]}
        )
        for s in steps
    ]
    if dependency_problem(kept):
        return [s.model_copy(update={"depends_on": None}) for s in kept]
    return kept


ActionType = Literal["ADD", "MODIFY", "REMOVE", "REPLACE"]


class RefinementAction(Model):
    action_type: ActionType
    target_step_id: str | None = None
    new_step: PlanStep | None = None
    reason: str = ""

    @model_validator(mode="after")
    def _shape(self) -> RefinementAction:
        needs_target = self.action_type != "ADD"
        needs_step = self.action_type != "REMOVE"
        if needs_target and not self.target_step_id:
            raise ValueError(f"{self.action_type} needs target_step_id")
        if needs_step and self.new_step is None:
            raise ValueError(f"{self.action_type} needs new_step")
        return self


class RefinementRecord(Model):
    """What a refinement did, as a pass's record keeps it: the actions applied and rejected."""

    applied: list[RefinementAction] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)


class RefinementOutcome(RefinementRecord):
    """A refinement in hand: what it did, and the plan it made (which the run carries on)."""

    plan: Plan

    def record(self) -> RefinementRecord:
        return RefinementRecord(applied=self.applied, rejected=self.rejected)


def apply_refinements(
    plan: Plan, actions: list[RefinementAction], max_actions: int
) -> RefinementOutcome:
    """Apply at most `max_actions` actions; executed steps are never touched.

    Each rejected action is reported with why, so an operator can see what the LLM asked for.
    """
    steps = list(plan.steps)
    applied: list[RefinementAction] = []
    rejected: list[str] = []
    for action in actions:
        over = len(applied) >= max_actions
        problem = f"over the limit of {max_actions}" if over else _apply_one(steps, action)
        if problem:
            rejected.append(f"{action.action_type} {action.target_step_id or ''}: {problem}")
        else:
            applied.append(action)
    # A removed or replaced step may be what others named; an added one may name what is not
    # there: the plan keeps what can still be met.
    return RefinementOutcome(
        plan=Plan(goal=plan.goal, steps=with_sound_dependencies(steps)),
        applied=applied,
        rejected=rejected,
    )


def _apply_one(steps: list[PlanStep], action: RefinementAction) -> str | None:
    ids = [s.step_id for s in steps]
    new = (
        action.new_step.model_copy(
            update={"status": "pending", "output": None, "executed_in_pass": None}
        )
        if action.new_step
        else None
    )
    if action.action_type == "ADD":
        if new is None or new.step_id in ids:
            return "new step id already in the plan"
        steps.append(new)
        return None
    if action.target_step_id not in ids:
        return "no such step"
    index = ids.index(action.target_step_id)
    if steps[index].executed:
        return "step already executed; executed steps are immutable"
    if action.action_type == "REMOVE":
        del steps[index]
    elif action.action_type == "MODIFY":
        steps[index] = steps[index].model_copy(update={"description": new.description})
    else:  # REPLACE
        if new.step_id != action.target_step_id and new.step_id in ids:
            return "replacement step id already in the plan"
        steps[index] = new
    return None


class ValidationIssue(Model):
    kind: str = "semantic"
    severity: Literal["low", "medium", "high"] = "medium"
    description: str
    step_id: str | None = None


class SemanticValidationReport(Model):
    issues: list[ValidationIssue] = Field(default_factory=list)
    summary: str = ""

    def text(self) -> str:
        if not self.issues:
            return "no issues"
        return "\n".join(f"- [{i.severity}] {i.description}" for i in self.issues)


class Consistency(Model):
    plan_aligned: bool
    step_aligned: bool
    answer_aligned: bool


class ConvergenceAssessment(Model):
    converged: bool
    completeness_score: float = Field(..., ge=0.0, le=1.0)
    coherence_score: float = Field(..., ge=0.0, le=1.0)
    consistency: Consistency
    reason_codes: list[str] = Field(default_factory=list)
    summary: str = ""

    def meets_default_rubric(self) -> bool:
        """The default rubric when no rule was judged (docs/verified-answers.md, "Convergence:
        the host decides"): the host's test, not the LLM's word."""
        c = self.consistency
        return (
            self.completeness_score >= 0.95
            and self.coherence_score >= 0.90
            and c.plan_aligned
            and c.step_aligned
            and c.answer_aligned
        )

    @property
    def score(self) -> float:
        return round((self.completeness_score + self.coherence_score) / 2, 4)


# ---------------------------------------------------------------------------------------------
# Rules and evaluation (docs/requirements.md, "Rules, evaluation and critique").
# ---------------------------------------------------------------------------------------------

Severity = Literal["fail", "warn", "info"]
Verdict = Literal["pass", "fail", "warn", "skipped"]


class RuleCheck(Model):
    """A check of the request schema's own: a content pattern, or an executable command (which
    only a user's rules file may hold, and which runs only where an operator allows it)."""

    type: Literal["content", "executable"]
    search: str | None = Field(
        None,
        description="content: a regular expression (the `regex` package's syntax) searched in "
        "the output, under a time bound",
    )
    command: str | None = Field(None, description="executable: a shell command; exit 0 passes")
    expected: str = ""

    @model_validator(mode="after")
    def _shape(self) -> RuleCheck:
        if self.type == "content":
            if not self.search:
                raise ValueError("a content check needs 'search' (a regular expression)")
            try:
                compile_pattern(self.search)
            except ValueError as exc:
                raise ValueError(f"'search' is not a valid regular expression: {exc}") from None
        elif not self.command:
            raise ValueError("an executable check needs 'command'")
        return self

    def describe(self) -> str:
        """One line for display."""
        if self.type == "content":
            return f"content matches /{self.search}/"
        return "executable check"


def _check_kind(value: Any) -> str:
    """Which of a rule's check forms `value` is: words, the schema's own, or the vocabulary's."""
    if isinstance(value, str):
        return "words"
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "content|executable" if kind in ("content", "executable") else "vocabulary"


#: A rule's check: the request schema's own (content or executable), one of the host's check
#: vocabulary (aeonloop.checks), or a sentence in words that PREPARE turns into checks
#: (docs/requirements.md, PREPARE).
RuleCheckForm = Annotated[
    Annotated[RuleCheck, Tag("content|executable")]
    | Annotated[Check, Tag("vocabulary")]
    | Annotated[
        str,
        Tag("words"),
        Field(
            min_length=1,
            max_length=2000,
            description="the check in words; the model prepares checks from it",
        ),
    ],
    Discriminator(_check_kind),
]


class Rule(Model):
    id: str = Field(..., min_length=1, max_length=128)
    description: str = ""
    severity: Severity = "fail"
    weight: Literal[0, 1, 2] = 1
    check: RuleCheckForm
    #: Where the rule comes from: the request's rules (`rules`), or a constraint the request's
    #: own text states, made into a rule by PREPARE (`request`).
    origin: Literal["rules", "request"] = "rules"

    @field_validator("check")
    @classmethod
    def _said(cls, check: RuleCheck | Check | str) -> RuleCheck | Check | str:
        if isinstance(check, str) and not check.strip():
            raise ValueError("a check in words must say something")
        return check

    @property
    def in_words(self) -> bool:
        """Whether the check is a sentence in words, which only prepared checks can judge."""
        return isinstance(self.check, str)

    def check_text(self) -> str:
        """The check in one line for display: its words, or its description."""
        return self.check if isinstance(self.check, str) else self.check.describe()


def fail_rules(rules: Sequence[Rule]) -> list[Rule]:
    """The rules of fail severity: the checks a candidate answer is chosen and judged by."""
    return [rule for rule in rules if rule.severity == "fail"]


class RuleFinding(Model):
    id: str
    severity: Severity
    message: str


class RuleResult(Model):
    id: str
    verdict: Verdict
    details: str = ""


class Evaluation(Model):
    score: float
    passed: bool
    failed: list[RuleFinding] = Field(default_factory=list)
    warnings: list[RuleFinding] = Field(default_factory=list)
    rule_results: list[RuleResult] = Field(default_factory=list)


class CritiqueIssue(Model):
    rule_id: str
    problem: str
    fix_instruction: str
    expected_effect: str = ""


ToolOutcome = Literal["ok", "error", "timeout", "failed", "invalid", "unknown"]


class ToolCall(Model):
    """One step's tool call in a pass, as the run page, the SSE stream and the answer show it.

    Outcomes: `ok`; `error` (the tool answered with isError); `timeout`; `failed` (its server
    could not be reached); `invalid` (the arguments broke the tool's schema, still after their
    one repair: no call was made); `unknown` (no such tool here: the step was rewritten as a
    reasoning step by its one repair, and no call was made).
    """

    step_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    outcome: ToolOutcome
    seconds: float = Field(0.0, ge=0)
    #: The start of the result (or of why there is none), for display.
    excerpt: str = ""
    #: The repair that preceded the call (the tool-call or the missing-tool repair), if any.
    repaired: Literal["arguments", "missing_tool"] | None = None


class ExecutionPass(Model):
    pass_number: int = Field(..., ge=1)
    executed_step_ids: list[str] = Field(default_factory=list)
    #: Steps the model said it could not do (a BLOCKED reply): evidence about the task.
    blocked_step_ids: list[str] = Field(default_factory=list)
    #: Steps that did not complete for reasons that say nothing about the task (the LLM call
    #: failed, the reply was cut at the length limit, a refusal), each with why.
    failed_steps: dict[str, str] = Field(default_factory=dict)
    validation: SemanticValidationReport | None = None
    assessment: ConvergenceAssessment | None = None
    evaluation: Evaluation | None = None
    critique: list[CritiqueIssue] = Field(default_factory=list)
    score: float = 0.0
    converged: bool = False
    refinement: RefinementRecord | None = None
    #: The pass's tool calls, in plan order.
    tool_calls: list[ToolCall] = Field(default_factory=list)

    @field_validator("refinement", mode="before")
    @classmethod
    def _without_its_plan(cls, value: Any) -> Any:
        """A record from a version that kept the refined plan in it: the plan is the run's."""
        if isinstance(value, dict) and "plan" in value:
            return {key: item for key, item in value.items() if key != "plan"}
        return value


# ---------------------------------------------------------------------------------------------
# How a run ends (docs/run-lifecycle.md, "How a run ends"): decided in phases.exits, put in words
# by phases.render.
# ---------------------------------------------------------------------------------------------


class ExitReason(StrEnum):
    """Why the C-loop ended: `LoopExited.reason`, and the answer's `ExecutionResult.status`."""

    CONVERGED = "converged"  # a pass met the host's test (rules, else the default rubric)
    TTL_EXHAUSTED = "ttl_exhausted"  # Phase D charged the last pass of the budget
    STAGNATED = "stagnated"  # the score stopped moving, or no step was left to run
    MAX_PASSES = "max_passes"  # the pass was the last AEON_MAX_PASSES allows
    DEADLINE_EXCEEDED = "deadline_exceeded"  # the request's deadline passed before a phase ran
    FAILED = "failed"  # a phase could not go on (no plan, evaluation failed, dead-lettered)
    CANCELLED = "cancelled"  # someone cancelled the run; it stopped at its next hop
    BUDGET_EXHAUSTED = "budget_exhausted"  # the run's token budget could not pay for a call


class AnswerReason(StrEnum):
    """`Outcome.reason` (phases.outcome): what the answer is, derived from the exit and from
    what Phase E could do with the run (phases.exits). For machines: CLI exit codes, alerts."""

    # The model wrote the answer.
    CONVERGED = "converged"  # not degraded: the loop converged with its data complete
    NO_PASSES = "no_passes"  # no execution pass ran (e.g. no plan could be made)
    TTL_EXHAUSTED = "ttl_exhausted"  # the loop spent its TTL before converging
    INCOMPLETE_STATE = "incomplete_state"  # some upstream artifacts are missing or empty
    NOT_CONVERGED = "not_converged"  # stagnated, max_passes, failed, ...: see the exit reason
    CHECKS_FAILED = "checks_failed"  # the loop converged, but a fail-severity check of the
    # answer does not hold (nor on any candidate: phases.verification)
    # The host assembled the answer without the model.
    LLM_ERROR = "llm_error"  # the adapter gave up on the synthesis call
    INVALID_LLM_OUTPUT = "invalid_llm_output"  # the reply stayed unusable after one repair
    PROMPT_ERROR = "prompt_error"  # the registry could not find or render the synthesis prompt
    SYNTHESIS_ERROR = "synthesis_error"  # anything else that broke during synthesis
    REQUEST_LOST = "request_lost"  # no request text survived: nothing to answer
    DEADLINE_EXCEEDED = "deadline_exceeded"  # the deadline passed: no further model call
    PHASE_E_FAILED = "phase_e_failed"  # Phase E's own event was dead-lettered
    CANCELLED = "cancelled"  # the run was cancelled: no further model call
    BUDGET_EXHAUSTED = "budget_exhausted"  # what is left of the token budget cannot pay for it


# ---------------------------------------------------------------------------------------------
# Phase E (docs/requirements.md, FR-037 / FR-038 exactly; FR-039: explicit Optional[] hints).
# ---------------------------------------------------------------------------------------------


class PhaseEInput(BaseModel):
    request: str
    correlation_id: str
    execution_start_timestamp: datetime
    convergence_status: str
    total_passes: int = Field(..., ge=0)
    total_refinements: int = Field(..., ge=0)
    ttl_remaining: int = Field(..., ge=0)
    plan_state: Optional[Dict[str, Any]] = None
    execution_results: Optional[Dict[str, Any]] = None
    convergence_assessment: Optional[Dict[str, Any]] = None
    execution_passes: Optional[List[Dict[str, Any]]] = None
    semantic_validation: Optional[Dict[str, Any]] = None
    task_profile: Optional[Dict[str, Any]] = None


class FinalAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer_text: str = Field(..., min_length=1)
    confidence: Optional[float] = Field(None, ge=0.0, le=1.0)
    used_step_ids: Optional[List[str]] = None
    notes: Optional[str] = None
    ttl_exhausted: Optional[bool] = None
    metadata: Dict[str, Any]
