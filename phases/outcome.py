"""How a run ended, typed: the one model of a run's outcome, built once, by Phase E.

A reader of a finished run asks two questions, and each has its own field:

- **Why did it stop?** `Outcome.stopped` (an `ExitReason`: converged, ttl_exhausted, stagnated,
  max_passes, deadline_exceeded, failed, cancelled, budget_exhausted), with `exit_detail`, the
  evidence in words. It is `ExecutionResult.status`, and it decides the CLI's exit code.
- **What did I get?** `Outcome.published`: which text the answer is (`draft`, `answer`,
  `refinement:<n>`, or `summary`, the host's account of the run when the model's answer could
  not be had), and whether it is `degraded`, why (`degraded_because`: stable codes, a line
  each), and `reason` (an `AnswerReason`), the one code machines alert on.

Beside them: the checks of the published text with their verdicts, the usage, and the raw
upstream artifacts FR-028 asks the metadata to carry.

`FinalAnswer` keeps the six fields docs/requirements.md fixes (FR-033/FR-038, `metadata` a
dict), so the outcome travels inside `metadata`: `as_metadata` writes it and `outcome_of`
reads it back, and nothing else reads the metadata by key (docs/run-lifecycle.md, "How a run
ends"). The keys are those every version wrote before the model existed, plus `stopped`,
`published` and `degraded_because`: older readers keep working, and an answer written by
another version is read as far as it goes (`outcome_of` drops what it cannot read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from aeonloop.contracts import Usage
from aeonloop.phases.models import (
    AnswerReason,
    Evaluation,
    ExitReason,
    Rule,
    RuleFinding,
    Severity,
    Verdict,
)

#: What `published` says of a host-made answer: a summary of the run, not the model's answer.
SUMMARY = "summary"
#: The answers the host wrote without the model: their text is the host's summary.
HOST_REASONS = frozenset(
    {
        AnswerReason.LLM_ERROR,
        AnswerReason.INVALID_LLM_OUTPUT,
        AnswerReason.PROMPT_ERROR,
        AnswerReason.SYNTHESIS_ERROR,
        AnswerReason.REQUEST_LOST,
        AnswerReason.DEADLINE_EXCEEDED,
        AnswerReason.PHASE_E_FAILED,
        AnswerReason.CANCELLED,
        AnswerReason.BUDGET_EXHAUSTED,
    }
)
ANSWER_REASONS = frozenset(reason.value for reason in AnswerReason)
EXIT_REASONS = frozenset(reason.value for reason in ExitReason)
#: Keys `as_metadata` always writes, even when empty (FR-027 asks for the first of them).
ALWAYS_WRITTEN = frozenset(
    {
        "missing_fields",
        "degraded",
        "reason",
        "convergence_status",
        "total_passes",
        "total_refinements",
        "ttl_remaining",
        "stopped",
        "published",
        "degraded_because",
    }
)


class CheckVerdict(BaseModel):
    """One rule's check and its verdict on the published text."""

    model_config = ConfigDict(extra="ignore")

    id: str
    origin: Literal["rules", "request"] = "rules"
    severity: Severity = "fail"
    description: str = ""
    verdict: Verdict
    details: str = ""

    @property
    def held(self) -> bool:
        """It held, or could not run (a skipped check says nothing against the text)."""
        return self.verdict in ("pass", "skipped")


def verdicts(rules: Sequence[Rule], judged: Evaluation) -> list[CheckVerdict]:
    """Each rule with its verdict on the text `judged` was made from, in rule order (a rule
    the evaluation did not reach is left out)."""
    results = {result.id: result for result in judged.rule_results}
    return [
        CheckVerdict(
            id=rule.id,
            origin=rule.origin,
            severity=rule.severity,
            description=rule.description or rule.check_text(),
            verdict=results[rule.id].verdict,
            details=results[rule.id].details,
        )
        for rule in rules
        if rule.id in results
    ]


class CandidateTally(BaseModel):
    """A text the run could have published, and how many fail-severity checks it held."""

    model_config = ConfigDict(extra="ignore")

    answered_by: str
    held: int
    #: The host's lossless repairs this text had (checks.repairs), in words.
    repairs: list[str] = []


class Degradation(BaseModel):
    """One reason an answer is degraded: a stable code for machines, a line for people.

    Codes: the exit (`exit:<ExitReason>`), the answer's reason (`reason:<AnswerReason>`),
    `exit_detail`, `check_failed:<rule id>`, `check_warned:<rule id>`,
    `check_never_held:<rule id>`, `rule_failed:<rule id>`, `rule_warned:<rule id>`, `error`,
    `missing_fields`, and `note` for each of the phases' notes."""

    code: str
    line: str


class Outcome(BaseModel):
    """How a run ended: why it stopped, what was published, why it is degraded, the checks
    with their verdicts, and the usage (module docstring)."""

    model_config = ConfigDict(extra="ignore")

    # Why did it stop?
    stopped: ExitReason
    exit_detail: str = ""
    #: Why the loop ended, as Phase E was given it (FR-037's convergence_status). It differs
    #: from `stopped` only for a run cancelled after its loop ended (exits.answered_status).
    convergence_status: str = ""

    # What did I get?
    published: str
    degraded: bool
    reason: AnswerReason
    degraded_because: list[Degradation] = []
    error: str | None = None
    #: The part of the run that could not be used, and why, when the run was answered without
    #: it: "the loop (phases B to D): plan generation failed: ..." (phases.exits.
    #: draft_path_answered). None: every part the run set out on was used.
    not_used: str | None = None
    run_notes: list[str] = []
    missing_fields: list[str] = []

    # The checks of the published text.
    answered_by: str | None = None
    #: The host's lossless repairs to the published text (checks.repairs), in words: "lower-cased
    #: by the host".
    repairs: list[str] = []
    checks: list[CheckVerdict] = []
    candidates: list[CandidateTally] = []
    checks_never_held: list[str] = []
    #: The rules that did not hold in the loop's last pass (the checks above judge the answer).
    failed_rules: list[RuleFinding] = []

    # The effort.
    total_passes: int = 0
    total_refinements: int = 0
    ttl_remaining: int = 0
    usage: Usage | None = None
    tool_calls: list[dict[str, Any]] = []

    # FR-028's raw upstream artifacts, as PhaseEInput held them.
    plan_state: dict[str, Any] | None = None
    execution_results: dict[str, Any] | None = None
    execution_passes: list[dict[str, Any]] | None = None
    convergence_assessment: dict[str, Any] | None = None
    semantic_validation: dict[str, Any] | None = None
    task_profile: dict[str, Any] | None = None

    @field_validator("checks", "candidates", "failed_rules", "degraded_because", mode="wrap")
    @classmethod
    def _readable_items(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A list with an entry of another shape (another version's) keeps the entries it can
        read."""
        try:
            return handler(value)
        except ValidationError:
            if not isinstance(value, list):
                raise
            kept = []
            for item in value:
                try:
                    kept += handler([item])
                except ValidationError:
                    continue
            return kept

    @field_validator("usage", mode="before")
    @classmethod
    def _usage_without_total(cls, value: Any) -> Any:
        """The metadata's usage carries its `total_tokens` for readers; Usage computes it."""
        if isinstance(value, Mapping):
            return {key: item for key, item in value.items() if key != "total_tokens"}
        return value

    @property
    def by_model(self) -> bool:
        """The published text is the model's (or the draft, one call's): not the host's."""
        return self.published != SUMMARY

    @property
    def checks_held(self) -> list[CheckVerdict]:
        """The checks that held on the published text (a skipped one is left out)."""
        return [check for check in self.checks if check.verdict == "pass"]

    @property
    def checks_not_held(self) -> list[CheckVerdict]:
        """The checks that failed or warned on the published text."""
        return [check for check in self.checks if not check.held]


def published_label(reason: AnswerReason, answered_by: str | None) -> str:
    """What `published` says: the candidate the checks chose, else `summary` for the host's
    account (the model's answer could not be had) and `answer` for the model's reply."""
    if answered_by:
        return answered_by
    return SUMMARY if reason in HOST_REASONS else "answer"


def as_metadata(outcome: Outcome) -> dict[str, Any]:
    """The one writer: the outcome as `FinalAnswer.metadata`, leaving out what is empty (an
    answer without checks has no `checks` key) except the keys every answer has."""
    data = outcome.model_dump(mode="json")
    if outcome.usage is not None:
        data["usage"]["total_tokens"] = outcome.usage.total_tokens
    return {
        key: value
        for key, value in data.items()
        if key in ALWAYS_WRITTEN or value not in (None, "", [], {})
    }


def outcome_of(metadata: Mapping[str, Any] | None) -> Outcome:
    """The one reader: the outcome an answer's metadata carries. Metadata from another version
    is read as far as it goes: a key it cannot read is dropped (and its default stands), and
    what an older answer did not record (`stopped`, `published`) is derived from what it did."""
    data = dict(metadata) if isinstance(metadata, Mapping) else {}
    for _ in range(len(data) + 1):
        try:
            return Outcome.model_validate(_derived(data))
        except ValidationError as error:
            bad = {str(e["loc"][0]) for e in error.errors() if e["loc"]}
            if not bad & set(data):
                break
            data = {key: value for key, value in data.items() if key not in bad}
    return Outcome.model_validate(_derived({}))


def _derived(data: dict[str, Any]) -> dict[str, Any]:
    """Fill what an answer of an older version did not write, from what it did."""
    filled = dict(data)
    reason = filled.get("reason")
    if not isinstance(filled.get("degraded"), bool):  # degraded when its reason says so
        filled["degraded"] = _one_of(reason, ANSWER_REASONS) and reason != AnswerReason.CONVERGED
    if not _one_of(reason, ANSWER_REASONS):
        degraded = filled["degraded"]
        filled["reason"] = AnswerReason.NOT_CONVERGED if degraded else AnswerReason.CONVERGED
    if not _one_of(filled.get("stopped"), EXIT_REASONS):
        status = filled.get("convergence_status")
        filled["stopped"] = status if _one_of(status, EXIT_REASONS) else ExitReason.FAILED
    if not isinstance(filled.get("published"), str):
        answered_by = filled.get("answered_by")
        label = answered_by if isinstance(answered_by, str) else None
        filled["published"] = published_label(AnswerReason(filled["reason"]), label)
    return filled


def _one_of(value: Any, names: frozenset[str]) -> bool:
    return isinstance(value, str) and value in names
