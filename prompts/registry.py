"""The prompt registry: every prompt Aeon sends, its typed input, and (for JSON prompts) its output.

docs/requirements.md is the contract: one PromptId per prompt, an input model for every prompt,
an output model exactly for the JSON-producing ones, rendering by f-string field access on the
validated input, and `validate_output` as the only place JSON is pulled out of an LLM reply.
Everything lives in this one file (FR-008); prompt text lives here and in `templates/system/*.md`
only.

Which prompts return JSON. FR-005 lists PLAN_GENERATION_*, RECURSIVE_SUBPLAN_GENERATION_USER,
RECURSIVE_REFINEMENT_*, CONVERGENCE_ASSESSMENT_*, SUPERVISOR_REPAIR_JSON_USER and
ANSWER_SYNTHESIS_*. Project decision beyond FR-005: TASKPROFILE_INFERENCE_*,
TASKPROFILE_UPDATE_* (TaskProfileOutput), VALIDATION_SEMANTIC_* (SemanticValidationOutput),
RULE_CRITIQUE_* (CritiqueOutput), CHECKS_PREPARE_* (PrepareChecksOutput) and PASS_EVALUATION_*
(PassEvaluationOutput: CONVERGENCE_ASSESSMENT's fields and VALIDATION_SEMANTIC's issues in one
reply, an addition beside those two) return JSON too,
because the loop acts on their structure (TTL from the profile, issues to refine, critique issues
tied to rules, checks the host runs) and parsing prose for it would be a second, hidden
extraction next to `validate_output`. Every other prompt (REASONING_STEP_*, ANSWER_DRAFT_*,
ANSWER_REWRITE_*, RECURSIVE_PLAN_GENERATION_USER, SUPERVISOR_REPAIR_SYSTEM and the tool-call,
plan and missing-tool repairs) is free-form and has no output model. A *_SYSTEM prompt carries
the output model of the pair it frames, as FR-005 lists them.

System prompts are files: `templates/system/<agent>-<phase>.md`, else `BASE-<phase>.md`
(docs/requirements.md, R3), so each model family can get its own wording without a code change.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from string import Formatter
from typing import Any, Literal, cast, overload

from pydantic import BaseModel, Field

from aeonloop.exceptions import NoOutputModelError, PromptNotFoundError, RenderingError
from aeonloop.prompts.compat import (
    PYDANTIC_V2,
    LenientModel,
    ModelT,
    StrictModel,
    dump_model,
    json_schema,
    model_fields,
    schema_only,
    validate_model,
)
from aeonloop.prompts.extraction import extract_json
from aeonloop.prompts.unified import TEMPLATES_DIR, load_system_template


class PromptId(StrEnum):
    """Every prompt Aeon sends; the value is the name, so ids read the same in logs and keys."""

    # docs/requirements.md, FR-005.
    PLAN_GENERATION_SYSTEM = "PLAN_GENERATION_SYSTEM"
    PLAN_GENERATION_USER = "PLAN_GENERATION_USER"
    REASONING_STEP_SYSTEM = "REASONING_STEP_SYSTEM"
    REASONING_STEP_USER = "REASONING_STEP_USER"
    VALIDATION_SEMANTIC_SYSTEM = "VALIDATION_SEMANTIC_SYSTEM"
    VALIDATION_SEMANTIC_USER = "VALIDATION_SEMANTIC_USER"
    CONVERGENCE_ASSESSMENT_SYSTEM = "CONVERGENCE_ASSESSMENT_SYSTEM"
    CONVERGENCE_ASSESSMENT_USER = "CONVERGENCE_ASSESSMENT_USER"
    TASKPROFILE_INFERENCE_SYSTEM = "TASKPROFILE_INFERENCE_SYSTEM"
    TASKPROFILE_INFERENCE_USER = "TASKPROFILE_INFERENCE_USER"
    TASKPROFILE_UPDATE_SYSTEM = "TASKPROFILE_UPDATE_SYSTEM"
    TASKPROFILE_UPDATE_USER = "TASKPROFILE_UPDATE_USER"
    RECURSIVE_PLAN_GENERATION_USER = "RECURSIVE_PLAN_GENERATION_USER"
    RECURSIVE_SUBPLAN_GENERATION_USER = "RECURSIVE_SUBPLAN_GENERATION_USER"
    RECURSIVE_REFINEMENT_SYSTEM = "RECURSIVE_REFINEMENT_SYSTEM"
    RECURSIVE_REFINEMENT_USER = "RECURSIVE_REFINEMENT_USER"
    SUPERVISOR_REPAIR_SYSTEM = "SUPERVISOR_REPAIR_SYSTEM"
    SUPERVISOR_REPAIR_JSON_USER = "SUPERVISOR_REPAIR_JSON_USER"
    SUPERVISOR_REPAIR_TOOLCALL_USER = "SUPERVISOR_REPAIR_TOOLCALL_USER"
    SUPERVISOR_REPAIR_PLAN_USER = "SUPERVISOR_REPAIR_PLAN_USER"
    SUPERVISOR_REPAIR_MISSINGTOOL_USER = "SUPERVISOR_REPAIR_MISSINGTOOL_USER"
    ANSWER_SYNTHESIS_SYSTEM = "ANSWER_SYNTHESIS_SYSTEM"
    ANSWER_SYNTHESIS_USER = "ANSWER_SYNTHESIS_USER"
    # What the C-loop needs beyond FR-005: the CRITIQUE step (docs/requirements.md).
    RULE_CRITIQUE_SYSTEM = "RULE_CRITIQUE_SYSTEM"
    RULE_CRITIQUE_USER = "RULE_CRITIQUE_USER"
    # One call that judges a pass and validates it together (issue 33): the assessment's
    # verdict and the validation's issues in one reply, where FR-005's two prompts took two.
    PASS_EVALUATION_SYSTEM = "PASS_EVALUATION_SYSTEM"
    PASS_EVALUATION_USER = "PASS_EVALUATION_USER"
    # Verified answers (docs/verified-answers.md, "Verified answers"): PREPARE, the plain draft
    # Phase A writes beside it, and REFINE of the answer the user gets (its CRITIQUE is
    # RULE_CRITIQUE_USER's, on the answer): docs/requirements.md, "Rules, evaluation and critique".
    CHECKS_PREPARE_SYSTEM = "CHECKS_PREPARE_SYSTEM"
    CHECKS_PREPARE_USER = "CHECKS_PREPARE_USER"
    ANSWER_DRAFT_SYSTEM = "ANSWER_DRAFT_SYSTEM"
    ANSWER_DRAFT_USER = "ANSWER_DRAFT_USER"
    ANSWER_REWRITE_SYSTEM = "ANSWER_REWRITE_SYSTEM"
    ANSWER_REWRITE_USER = "ANSWER_REWRITE_USER"


# --------------------------------------------------------------------------------------------
# Base classes (docs/requirements.md, "Prompt registry").
# --------------------------------------------------------------------------------------------


class PromptInput(StrictModel):
    """Base of every prompt's input model."""


class PromptOutput(LenientModel):
    """Base of every JSON prompt's output model."""


# --------------------------------------------------------------------------------------------
# Input models.
# --------------------------------------------------------------------------------------------


class SystemPromptInput(PromptInput):
    """Input of every *_SYSTEM prompt: which model family's template to prefer."""

    agent: str = Field(
        "BASE", min_length=1, description="model family, e.g. 'openai'; BASE is the fallback"
    )


class TaskProfileInferenceInput(PromptInput):
    request: str = Field(..., min_length=1)
    rules_summary: str = ""


class TaskProfileUpdateInput(PromptInput):
    request: str = Field(..., min_length=1)
    current_profile: str = Field(..., description="the profile now in force, as JSON")
    evidence: str = Field(
        ..., description="what the last pass showed: convergence, issues, blocked steps"
    )


class ToolOffer(PromptInput):
    """A tool a plan step may call, as plan generation lists it (one line each)."""

    name: str = Field(..., min_length=1)
    description: str = ""
    #: The tool's input schema, as compact JSON text.
    input_schema: str = "{}"

    def __str__(self) -> str:
        about = self.description.strip() or "no description"
        return f"- {self.name}: {about} Arguments (JSON schema): {self.input_schema}"


class PlanGenerationInput(PromptInput):
    request: str = Field(..., min_length=1)
    profile_summary: str = ""
    rules_summary: str = ""
    #: The tools this run's steps may call (tools/); empty: none, every step is reasoning.
    tools: list[ToolOffer] = Field(default_factory=list)


class SemanticValidationInput(PromptInput):
    request: str = Field(..., min_length=1)
    artifact_kind: Literal["plan", "pass"]
    artifact: str = Field(..., description="the plan, or the pass's step outputs, as text")


class RefinementInput(PromptInput):
    request: str = Field(..., min_length=1)
    plan: str = Field(..., description="the current plan as JSON")
    issues: str = Field(..., description="the issues the refinement must address, one per line")
    executed_step_ids: list[str] = Field(default_factory=list)
    max_actions: int = Field(5, ge=1)


class ReasoningStepInput(PromptInput):
    request: str = Field(..., min_length=1)
    goal: str
    step_id: str
    step_description: str
    prior_outputs: str = Field("", description="outputs of the steps this one depends on")
    pass_number: int = Field(..., ge=1)


class ConvergenceAssessmentInput(PromptInput):
    request: str = Field(..., min_length=1)
    goal: str
    pass_number: int = Field(..., ge=1)
    step_outputs: str
    rules_summary: str = ""


class PassEvaluationInput(ConvergenceAssessmentInput):
    """What the pass evaluation is shown: what the assessment is shown (the validation's
    request and pass outputs are among it), as one prompt judges and validates together."""


class CritiqueInput(PromptInput):
    request: str = Field(..., min_length=1)
    artifact: str
    failed_rules: str = Field(
        ..., description="the failed rules, one per line: id, severity, message"
    )


class PrepareChecksInput(PromptInput):
    """PREPARE (docs/requirements.md): the request and the rules whose check is in words, never
    an answer; and the host's check vocabulary, which aeonloop.checks writes from its types
    (`vocabulary.described`) and the phases pass in, since prompts/ imports nothing of Aeon. It
    is the same in every call, so it is shown among the prompt's fixed text, before the data."""

    request: str = Field(..., min_length=1)
    rules_in_words: str = Field(
        "", description="the rules whose check is in plain words, one per line: id, then the words"
    )
    check_types: str = Field(
        ..., min_length=1, description="the host's check types, one a line, each an example object"
    )


class DraftAnswerInput(PromptInput):
    """The plain draft: the request as one call sends it, the user's rules written in as
    instructions (prompts.baseline.plain_call); nothing else is shown."""

    request: str = Field(..., min_length=1)


class RewriteAnswerInput(PromptInput):
    """The targeted rewrite of an answer (docs/verified-answers.md): the answer and the checks it
    failed, in words, nothing else. The failed checks are its only instructions."""

    request: str = Field(..., min_length=1)
    answer: str = Field(..., min_length=1, description="the answer to rewrite")
    failed_checks: str = Field(
        ..., description="what the answer does not meet yet, one per line, in the checks' words"
    )


class RepairJSONInput(PromptInput):
    #: The request the rejected reply was written for: a field that only repeated the prompt's
    #: own text can be rewritten only with it in view.
    request: str = ""
    expected_schema: str = Field(..., description="JSON schema the reply must satisfy")
    malformed_output: str
    error: str


class RepairToolCallInput(PromptInput):
    tool_name: str
    malformed_call: str
    error: str
    #: The JSON schema the call's arguments must satisfy, as the tool's server gives it.
    argument_schema: str = ""


class RepairPlanInput(PromptInput):
    request: str = Field(..., min_length=1)
    plan: str
    error: str


class RepairMissingToolInput(PromptInput):
    tool_name: str
    available_tools: list[str] = Field(default_factory=list)
    step_description: str


class RecursivePlanInput(PromptInput):
    request: str = Field(..., min_length=1)
    parent_goal: str
    depth: int = Field(1, ge=1)


class RecursiveSubplanInput(PromptInput):
    request: str = Field(..., min_length=1)
    parent_step_id: str
    parent_step_description: str


class AnswerSynthesisInput(PromptInput):
    """What Phase E tells the model, derived from PhaseEInput (docs/requirements.md, FR-041)."""

    request: str = Field(..., min_length=1)
    convergence_status: str
    total_passes: int = Field(..., ge=0)
    total_refinements: int = Field(..., ge=0)
    ttl_remaining: int = Field(..., ge=0)
    #: The last pass's score (0 when no pass ran): the loop's own measure of the work the
    #: answer is written from, which the answer's confidence is weighed against.
    last_pass_score: float = Field(0.0, ge=0.0, le=1.0)
    plan_summary: str = ""
    results_summary: str = ""
    assessment_summary: str = ""
    missing_fields: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Output models (JSON prompts only).
#
# A field its phase acts on is required, even a list that may be empty: a reply is accepted
# only when it says everything the phase needs, so a fragment (a reasoning model's draft, a
# reply cut short) fails validation and is repaired instead of being taken for the answer.
# --------------------------------------------------------------------------------------------


class TaskProfileOutput(PromptOutput):
    reasoning_depth: int = Field(
        ..., ge=1, le=5, description="how many connected steps the request takes, 1 to 5"
    )
    information_sufficiency: float = Field(
        ..., ge=0.0, le=1.0, description="share of what the answer needs that the request gives"
    )
    expected_tool_usage: Literal["none", "minimal", "moderate", "extensive"] = Field(
        ..., description="how much the work depends on lookups, calculation or code"
    )
    output_breadth: Literal["narrow", "moderate", "broad"] = Field(
        ..., description="how long and many-sided the answer must be"
    )
    confidence_requirement: Literal["low", "medium", "high"] = Field(
        ..., description="how costly a wrong answer would be"
    )
    raw_inference: str = Field("", description="your reasons for these ratings of this request")


#: A step id as a server that enforces the schema lets a model write it: s1, s2, ..., and a
#: sub-plan's s2.1, s2.2 under its parent. Schema only (`schema_only`): the host still takes any
#: clean id (prompts.echo) from a server that does not enforce it, as scripted plans use. Issue
#: 40: on outside slices, plans failed on step ids such as `][`, which this rules out. The dot
#: as a class (`[.]`), not escaped: llama-cpp-python 0.3 writes `\.` into its grammar as an
#: escape its own grammar parser refuses, which took its server down.
STEP_ID_PATTERN = r"^s[0-9]+([.][0-9]+)*$"
_STEP_ID = {"type": "string", "pattern": STEP_ID_PATTERN, "maxLength": 16}
#: A field that holds a step id or null, a list of them, or a list of them or null, as schemas:
#: alternatives (`anyOf`) the field's own schema is checked against as well, since Pydantic 1
#: writes a list's own `items` over a field's.
_STEP_ID_OR_NULL = schema_only(anyOf=[_STEP_ID, {"type": "null"}])
_STEP_IDS = schema_only(anyOf=[{"type": "array", "items": _STEP_ID}])
_STEP_IDS_OR_NULL = schema_only(anyOf=[{"type": "array", "items": _STEP_ID}, {"type": "null"}])


class PlanStepOutput(PromptOutput):
    step_id: str = Field(
        ...,
        min_length=1,
        description="short id, unique in the plan: s1, s2, ...",
        **schema_only(pattern=STEP_ID_PATTERN, maxLength=16),
    )
    description: str = Field(
        ..., min_length=1, description="the work this step does for this request"
    )
    #: The ids of the steps whose outputs this one needs; omitted: every earlier step.
    depends_on: list[str] | None = Field(
        None,
        description="ids of the earlier steps whose outputs this step needs",
        **_STEP_IDS_OR_NULL,
    )
    #: A tool from the plan prompt's list that does this step; omitted: the model does it.
    tool: str | None = Field(None, description="a listed tool's name, or null for reasoning")
    #: The tool's arguments, an object matching its input schema.
    arguments: dict[str, Any] | None = Field(
        None, description="the tool's arguments, matching its schema"
    )


#: A plan needs a step: said in the schema (`minItems`), not only by phase B after the fact, so
#: that servers which make a grammar of the schema never let a model send an empty plan.
_AT_LEAST_ONE = {"min_length": 1} if PYDANTIC_V2 else {"min_items": 1}


class PlanBody(PromptOutput):
    goal: str = Field(..., description="what the final answer to this request must achieve")
    steps: list[PlanStepOutput] = Field(..., **_AT_LEAST_ONE)


class PlanGenerationOutput(PromptOutput):
    plan: PlanBody


class SemanticIssueOutput(PromptOutput):
    kind: str = Field("semantic", description="a short label for the kind of problem")
    severity: Literal["low", "medium", "high"] = "medium"
    description: str = Field(..., min_length=1, description="what is wrong, and where")
    step_id: str | None = Field(None, description="the step concerned, or null", **_STEP_ID_OR_NULL)


class SemanticValidationOutput(PromptOutput):
    issues: list[SemanticIssueOutput]
    summary: str = Field("", description="your verdict on this plan or these outputs")


class RefinementActionOutput(PromptOutput):
    action_type: Literal["ADD", "MODIFY", "REMOVE", "REPLACE"]
    target_step_id: str | None = Field(
        None, description="the step changed, or null for ADD", **_STEP_ID_OR_NULL
    )
    new_step: PlanStepOutput | None = None
    reason: str = Field("", description="the listed issue this action fixes")


class RefinementOutput(PromptOutput):
    actions: list[RefinementActionOutput]


class ConsistencyOutput(PromptOutput):
    plan_aligned: bool
    step_aligned: bool
    answer_aligned: bool


class ConvergenceAssessmentOutput(PromptOutput):
    converged: bool
    completeness_score: float = Field(
        ..., ge=0.0, le=1.0, description="share of what the request asks that is delivered"
    )
    coherence_score: float = Field(
        ..., ge=0.0, le=1.0, description="how well the outputs fit together"
    )
    consistency: ConsistencyOutput
    reason_codes: list[str] = Field(
        default_factory=list, description="short labels of what is still wrong"
    )
    summary: str = Field("", description="what these outputs deliver and what they lack")


class PassEvaluationOutput(ConvergenceAssessmentOutput):
    """The pass evaluation: the assessment's verdict and the semantic validation's issues in one
    reply. Phase C reads it as the pass's ConvergenceAssessment and SemanticValidationReport, so
    the host decides from the same evidence two calls gave it."""

    issues: list[SemanticIssueOutput]


class CritiqueIssueOutput(PromptOutput):
    rule_id: str = Field(..., description="the id of one failed rule, as listed")
    problem: str = Field(..., description="what in this output makes the rule fail")
    fix_instruction: str = Field(..., description="one specific change to this output")
    expected_effect: str = Field("", description="what will pass after the change")


class CritiqueOutput(PromptOutput):
    issues: list[CritiqueIssueOutput]


class PreparedCheckOutput(PromptOutput):
    """One concrete check: the rule it belongs to, and the check in the host's vocabulary (a
    JSON object the host reads with aeonloop.checks' parse_check, dropping one it cannot run)."""

    rule_id: str = Field(..., min_length=1)
    description: str = ""
    check: dict[str, Any]


class PrepareChecksOutput(PromptOutput):
    checks: list[PreparedCheckOutput]


class RepairedJSONOutput(PromptOutput):
    """A repaired reply is any JSON object; the caller validates it against the original model.

    Validating against this model only proves the reply holds a JSON object; the repaired data is
    read with `validate_output(<original prompt id>, repaired_reply)` (or the original model).
    """


class FinalAnswerOutput(PromptOutput):
    """The model's part of a FinalAnswer; the host adds ttl_exhausted and metadata (FR-041)."""

    answer_text: str = Field(
        ..., min_length=1, description="your answer to the request, written from the results"
    )
    confidence: float = Field(
        ..., ge=0.0, le=1.0, description="how likely the answer is correct and complete"
    )
    used_step_ids: list[str] = Field(
        ...,
        description="ids of the steps whose results it uses",
        **_STEP_IDS,
    )
    notes: str | None = Field(None, description="caveats for the reader, or null")


# --------------------------------------------------------------------------------------------
# Definitions: one per PromptId.
# --------------------------------------------------------------------------------------------

#: How an empty string or list renders, so a prompt never shows a dangling "Rules:" line.
NONE_TEXT = "(none)"
#: A plan's goal that only restates the request, as a prompt showing both gives it: the
#: request is already in the prompt, and sending it twice pays for it twice.
GOAL_AS_REQUEST = "(the request above)"


def goal_text(goal: str, request: str) -> str:
    """The plan's goal as a prompt beside the request shows it: GOAL_AS_REQUEST when it is
    the request's own words (or a cut of them), else the goal."""

    def words(text: str) -> str:
        return " ".join(text.lower().split()).rstrip(".!?… ")

    said = words(goal)
    return GOAL_AS_REQUEST if said and said in words(request) else goal


@dataclass(frozen=True)
class PromptDefinition:
    """One prompt's contract: its text, what it takes, and what it must return (if JSON).

    A user prompt has a `template` rendered by field access on the validated input. A system
    prompt has a `system_phase` instead: its text is the file `<agent>-<phase>.md` (else
    `BASE-<phase>.md`), so wording per model family changes without code. The checks below run at
    import, so a template naming a field its input lacks, or an unescaped brace in a JSON example,
    fails every test instead of the first production call.
    """

    prompt_id: PromptId
    template: str
    input_model: type[PromptInput]
    output_model: type[PromptOutput] | None
    description: str
    system_phase: str | None = None
    #: For JSON user prompts: the literal example object the template shows the model.
    example_output: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not issubclass(self.input_model, PromptInput):
            raise TypeError(f"{self.prompt_id}: input model must derive from PromptInput")
        if self.output_model is not None and not issubclass(self.output_model, PromptOutput):
            raise TypeError(f"{self.prompt_id}: output model must derive from PromptOutput")
        if self.system_phase is not None:
            if self.template or not issubclass(self.input_model, SystemPromptInput):
                raise ValueError(
                    f"{self.prompt_id}: a system prompt takes SystemPromptInput and its text "
                    "from a template file, not an inline template"
                )
        else:
            unknown = _placeholders(self.template) - set(model_fields(self.input_model))
            if unknown:
                raise ValueError(f"{self.prompt_id}: template names unknown fields {unknown}")
        if self.example_output is not None:
            if self.output_model is None:
                raise ValueError(f"{self.prompt_id}: a free-form prompt has no example output")
            validate_model(self.output_model, self.example_output)

    @property
    def is_json(self) -> bool:
        """Whether the prompt's reply is JSON, validated by `validate_output`."""
        return self.output_model is not None


def _placeholders(template: str) -> set[str]:
    """Field names a format template refers to (`{plan.goal}` refers to `plan`)."""
    names = set()
    for _literal, field_name, _spec, _conversion in Formatter().parse(template):
        if field_name is not None:
            names.add(re.split(r"[.\[]", field_name, maxsplit=1)[0])
    return names


def _validated_input(
    input_model: type[PromptInput], input_data: BaseModel | Mapping[str, Any]
) -> PromptInput:
    """`input_data` as a valid `input_model` (FR-012), validated only if it is not one already.

    An instance of exactly `input_model` was validated when it was built, and inputs are frozen
    (StrictModel), so validating it again would only repeat that work on every call. A dict,
    another prompt's model or a subclass (which may loosen a field) is validated here.
    """
    if type(input_data) is input_model:
        return cast(PromptInput, input_data)
    if isinstance(input_data, BaseModel):
        input_data = dump_model(input_data)
    return validate_model(input_model, input_data)


def _render_value(value: Any) -> str:
    """A field as prompt text: lists joined with commas (lists of models, such as tools, one
    per line), empty values as NONE_TEXT."""
    if isinstance(value, list):
        joiner = "\n" if value and isinstance(value[0], BaseModel) else ", "
        text = joiner.join(str(item) for item in value)
    else:
        text = str(value)
    return text if text.strip() else NONE_TEXT


def _system(prompt_id: PromptId, output_model: type[PromptOutput] | None) -> PromptDefinition:
    """A *_SYSTEM prompt, whose text is the template file of its phase.

    The phase is the id without its suffix, in lower case (PLAN_GENERATION_SYSTEM ->
    plan_generation), so the file name follows from the id and cannot be mistyped.
    """
    phase = prompt_id.value.removesuffix("_SYSTEM").lower()
    return PromptDefinition(
        prompt_id=prompt_id,
        template="",
        input_model=SystemPromptInput,
        output_model=output_model,
        description=f"system prompt from templates/system/<agent>-{phase}.md",
        system_phase=phase,
    )


def _json_user(
    prompt_id: PromptId,
    input_model: type[PromptInput],
    output_model: type[PromptOutput],
    description: str,
    task: str,
    example: dict[str, Any],
    field_rules: str,
    data: str,
) -> PromptDefinition:
    """A JSON user prompt: the task, the literal shape of the reply and its field rules, then
    the data it is about (`data`, where the input's fields are).

    Fixed text first, the data last: every call of the prompt, in every run, then begins with
    the same bytes up to the data, which servers that cache prompt prefixes process once
    (docs/llm-servers.md, "Prompt prefix caching"). The data lists what a run's calls share
    (the request, its rules, the plan) before what changes from call to call (outputs, a step).

    The example is serialised here, on one line and without spaces (EXAMPLE_SEPARATORS:
    indentation is tokens that say nothing the braces do not), and checked against the output
    model at import, so the shape the model is shown cannot drift from the shape
    `validate_output` accepts. `field_rules` says only what
    the fields mean: their allowed values, ranges and id patterns are the output model's
    schema, which a server that takes `response_format` enforces, and which the adapter writes
    into the prompt for one that does not (`schema_in_text`); issue 40 cut the prompts so.
    The example's values answer EXAMPLE_REQUEST, a request no run is about, so a model that
    copies them writes something plainly wrong rather than something that reads like an
    answer (issue 32: small models copy a format's example; prompts.echo catches the copy).
    """
    shape = json.dumps(example, separators=EXAMPLE_SEPARATORS)
    shape = shape.replace("{", "{{").replace("}", "}}")
    rules = f"{field_rules}\n" if field_rules else ""
    template = (
        f"{task}\n\n"
        f'Reply with only the JSON object, as here for another request ("{EXAMPLE_REQUEST}") '
        "but with your own values:\n"
        f"{shape}\n"
        f"{rules}"
        "No text before or after the object, and no Markdown fences.\n\n"
        f"{data}"
    )
    return PromptDefinition(
        prompt_id=prompt_id,
        template=template,
        input_model=input_model,
        output_model=output_model,
        description=description,
        example_output=example,
    )


#: What a JSON call is told of its reply's schema when its server is not sent it (a
#: `response_format` stepped down to plain json_object, or none: llm.openai_stepdowns).
SCHEMA_IN_TEXT = (
    "{system}\n\nThe reply is one JSON object that satisfies this JSON schema:\n{schema}"
)


def schema_in_text(system_prompt: str, schema: Mapping[str, Any]) -> str:
    """`system_prompt` followed by the reply's JSON `schema` (compact, without the titles
    pydantic gives every field), for a server that is not sent the schema: the prompt's own
    text says only what the fields mean (`_json_user`), and a server that takes
    `response_format` is sent the schema once, there, and not again in the text (issue 40).
    It goes in the system prompt, which comes before the instructions (prompts.unified), so the
    call still gives its fixed text before its data, for servers that cache prompt prefixes."""
    compact = json.dumps(_untitled(schema), separators=(",", ":"))
    return SCHEMA_IN_TEXT.format(system=system_prompt, schema=compact)


def _untitled(schema: Any) -> Any:
    """`schema` without its "title" keywords (names pydantic derives from the field names)."""
    if isinstance(schema, list):
        return [_untitled(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    # A title is a string; a field named "title" is a schema (a dict) under "properties".
    return {
        key: _untitled(value)
        for key, value in schema.items()
        if not (key == "title" and isinstance(value, str))
    }


def _free_form(
    prompt_id: PromptId, input_model: type[PromptInput], description: str, template: str
) -> PromptDefinition:
    """A prompt whose reply is prose: no output model, so `validate_output` refuses it."""
    return PromptDefinition(
        prompt_id=prompt_id,
        template=template,
        input_model=input_model,
        output_model=None,
        description=description,
    )


#: How a reply format's example is written: on one line, with no space after a comma or a
#: colon (a space there is a token that says nothing the punctuation does not).
EXAMPLE_SEPARATORS = (",", ":")
#: The request every reply format's example answers: concrete, so the example reads as another
#: request's reply, not as a template of this one's.
EXAMPLE_REQUEST = "Compare the yearly running costs of a heat pump and a gas boiler"

_PROFILE_SCALES = """\
- reasoning_depth: 1 = a fact or one lookup; 3 = several connected steps; 5 = long reasoning
  whose later parts depend on earlier ones.
- information_sufficiency: how much of what the answer needs the request itself gives (1.0 =
  all of it; 0.0 = it hinges on facts the request does not give).
- expected_tool_usage: how much the work depends on looking up, calculating or running code.
- output_breadth: narrow (one short answer), moderate (a few points) or broad (many parts).
- confidence_requirement: how costly a wrong answer would be.
- raw_inference: one sentence of reasons."""

_PROFILE_EXAMPLE: dict[str, Any] = {
    "reasoning_depth": 3,
    "information_sufficiency": 0.7,
    "expected_tool_usage": "minimal",
    "output_breadth": "moderate",
    "confidence_requirement": "medium",
    "raw_inference": "Two cost estimates and a comparison; energy prices must be assumed.",
}

_PLAN_EXAMPLE: dict[str, Any] = {
    "plan": {
        "goal": "Say which heating system costs less to run per year, with the figures.",
        "steps": [
            {
                "step_id": "s1",
                "description": "Estimate the yearly energy cost of each system.",
                "depends_on": [],
                "tool": None,
                "arguments": None,
            },
            {
                "step_id": "s2",
                "description": "Compare the costs from s1 and say which is cheaper.",
                "depends_on": ["s1"],
                "tool": None,
                "arguments": None,
            },
        ],
    }
}

_PLAN_FIELDS = """\
- depends_on: the earlier steps whose outputs the step needs ([] for none); steps that need \
nothing of each other run at once.
- tool and arguments: only for a step a listed tool does (its name as listed, and arguments \
matching its schema); else null."""


_PREPARE_EXAMPLE: dict[str, Any] = {
    "checks": [
        {
            "rule_id": "request.example-bullets",
            "description": "exactly 4 bullet points",
            "check": {"type": "count", "unit": "bullets", "min": 4, "max": 4},
        },
    ]
}


#: What a semantic validation looks for, in a plan or a pass's outputs (and what the pass
#: evaluation lists as issues).
_LOOK_FOR = (
    "parts of the request nothing covers, work that does not serve it, wrong order, "
    "contradictions, unsupported claims, vague steps; not style or wording."
)
_ISSUE_EXAMPLE: dict[str, Any] = {
    "kind": "missing_coverage",
    "severity": "high",
    "description": "Nothing estimates the gas boiler's cost.",
    "step_id": None,
}
_ISSUE_FIELDS = (
    "- issues: [] when there is nothing to report; severity high when the answer would be "
    "wrong or incomplete without a fix; step_id the step concerned, or null."
)
#: The convergence assessment's task, and what it is shown of the pass (the pass evaluation's
#: too: it judges what the assessment judges, and validates beside it).
_ASSESS_TASK = (
    "Assess whether the step outputs at the end fully answer the request, judging the "
    "outputs, not what the plan intended. Be strict: 1.0 means nothing is missing or wrong."
)
_PASS_SHOWN = (
    "Request:\n{request}\n\n"
    "Goal of the plan:\n{goal}\n\n"
    "Step outputs after pass {pass_number}:\n{step_outputs}\n\n"
    "Rule results:\n{rules_summary}"
)
_ASSESSMENT_EXAMPLE: dict[str, Any] = {
    "converged": False,
    "completeness_score": 0.7,
    "coherence_score": 0.9,
    "consistency": {
        "plan_aligned": True,
        "step_aligned": True,
        "answer_aligned": False,
    },
    "reason_codes": ["incomplete"],
    "summary": "Both yearly costs are estimated; none says which is cheaper.",
}
_ASSESSMENT_FIELDS = (
    "- completeness_score: the share of what the request asks that the outputs deliver; "
    "coherence_score: how well they fit together.\n"
    "- consistency: plan_aligned (the steps serve the request), step_aligned (each output does "
    "its step), answer_aligned (together they answer the request as asked).\n"
    "- converged: true only when nothing substantive is missing or wrong; reason_codes then [], "
    'else labels such as "incomplete", "incoherent", "unsupported_claims", "rule_failed".'
)


def _definitions() -> list[PromptDefinition]:
    """Every prompt Aeon sends. The texts are the contract the offline adapter and tests follow."""
    return [
        # ---- A: task profile -----------------------------------------------------------------
        _system(PromptId.TASKPROFILE_INFERENCE_SYSTEM, TaskProfileOutput),
        _json_user(
            PromptId.TASKPROFILE_INFERENCE_USER,
            TaskProfileInferenceInput,
            TaskProfileOutput,
            "Phase A: rate how much reasoning a request needs; the TTL is computed from it.",
            "Rate what the request at the end will take to answer well. Do not answer it.",
            _PROFILE_EXAMPLE,
            _PROFILE_SCALES,
            "Request:\n{request}\n\nRules the answer will be checked against:\n{rules_summary}",
        ),
        _system(PromptId.TASKPROFILE_UPDATE_SYSTEM, TaskProfileOutput),
        _json_user(
            PromptId.TASKPROFILE_UPDATE_USER,
            TaskProfileUpdateInput,
            TaskProfileOutput,
            "Phase D: re-rate a request when the last pass shows its profile was misjudged.",
            "The task profile at the end set the budget of passes for the request there, and "
            "the last pass suggests it is wrong. Re-rate the request: change a rating only where "
            "the evidence shows it was misjudged (raise reasoning_depth when steps keep coming "
            "out incomplete, lower information_sufficiency when steps are blocked on facts nobody "
            "gave), keep the others, and say in raw_inference what you changed and why.",
            _PROFILE_EXAMPLE,
            _PROFILE_SCALES,
            "Request:\n{request}\n\n"
            "Current profile (JSON):\n{current_profile}\n\n"
            "What the last pass showed:\n{evidence}",
        ),
        # ---- B: plan -------------------------------------------------------------------------
        _system(PromptId.PLAN_GENERATION_SYSTEM, PlanGenerationOutput),
        _json_user(
            PromptId.PLAN_GENERATION_USER,
            PlanGenerationInput,
            PlanGenerationOutput,
            "Phase B: write the plan whose steps the C-loop executes.",
            "Write a plan for the request at the end: as few steps as it needs (usually 2 to 5), "
            "s1, s2, ... in the order they must be done, each one concrete piece of work whose "
            "output later steps build on; the last assembles the earlier results. When there "
            "are rules, some step must produce what each rule checks for.",
            _PLAN_EXAMPLE,
            _PLAN_FIELDS,
            "Request:\n{request}\n\n"
            "Rules the final answer will be checked against:\n{rules_summary}\n\n"
            "Tools a step may call:\n{tools}\n\n"
            "Task profile:\n{profile_summary}",
        ),
        _system(PromptId.VALIDATION_SEMANTIC_SYSTEM, SemanticValidationOutput),
        _json_user(
            PromptId.VALIDATION_SEMANTIC_USER,
            SemanticValidationInput,
            SemanticValidationOutput,
            "Phases B and C: find semantic problems in a plan or in a pass's step outputs.",
            "Check whether the plan or the step outputs at the end serve the request. Look "
            "for: " + _LOOK_FOR,
            {
                "issues": [_ISSUE_EXAMPLE],
                "summary": "The plan misses the boiler's cost.",
            },
            _ISSUE_FIELDS,
            "Request:\n{request}\n\nThe {artifact_kind} to check:\n{artifact}",
        ),
        # ---- C: execute, evaluate, refine ----------------------------------------------------
        _system(PromptId.REASONING_STEP_SYSTEM, None),
        _free_form(
            PromptId.REASONING_STEP_USER,
            ReasoningStepInput,
            "Phase C: carry out one plan step; the reply is the step's output.",
            # What every step call of a run shares comes first (the instructions, the request,
            # the goal), so servers that cache prompt prefixes reuse it from call to call.
            "Do only the step at the end and write its result itself (facts, reasoning, "
            "calculations, text), building on the earlier outputs without repeating them. If "
            'it cannot be done with what you have, start your reply with "BLOCKED:" and say '
            "what is missing. Write plain text or Markdown, not JSON.\n\n"
            "Request:\n{request}\n\n"
            "Goal of the plan:\n{goal}\n\n"
            "Outputs of the steps this one builds on:\n{prior_outputs}\n\n"
            "Your step ({step_id}, in pass {pass_number} over the plan):\n{step_description}",
        ),
        _system(PromptId.CONVERGENCE_ASSESSMENT_SYSTEM, ConvergenceAssessmentOutput),
        _json_user(
            PromptId.CONVERGENCE_ASSESSMENT_USER,
            ConvergenceAssessmentInput,
            ConvergenceAssessmentOutput,
            "Phase C: assess whether a pass's outputs answer the request (the host decides).",
            _ASSESS_TASK,
            _ASSESSMENT_EXAMPLE,
            _ASSESSMENT_FIELDS,
            _PASS_SHOWN,
        ),
        _system(PromptId.PASS_EVALUATION_SYSTEM, PassEvaluationOutput),
        _json_user(
            PromptId.PASS_EVALUATION_USER,
            PassEvaluationInput,
            PassEvaluationOutput,
            "Phase C: judge a pass's outputs and find their semantic problems, in one call (the "
            "host decides).",
            _ASSESS_TASK + " Then list the outputs' problems: " + _LOOK_FOR,
            {
                **_ASSESSMENT_EXAMPLE,
                "issues": [_ISSUE_EXAMPLE],
                "summary": "Both costs are estimated; neither is called cheaper.",
            },
            _ASSESSMENT_FIELDS + "\n" + _ISSUE_FIELDS,
            _PASS_SHOWN,
        ),
        _system(PromptId.RULE_CRITIQUE_SYSTEM, CritiqueOutput),
        _json_user(
            PromptId.RULE_CRITIQUE_USER,
            CritiqueInput,
            CritiqueOutput,
            "Phase C (CRITIQUE): say how to fix the output for each failed rule.",
            "The output at the end failed some of its rules. Name at most 5 issues, each tied "
            "to one failed rule by its id as listed: what in the output makes it fail, and one "
            "specific change that fixes it. Do not rewrite the output.",
            {
                "issues": [
                    {
                        "rule_id": "r1",
                        "problem": "The comparison never states the yearly difference.",
                        "fix_instruction": "Add a closing line with the difference in euros.",
                        "expected_effect": "Rule r1 holds: the difference is stated.",
                    }
                ]
            },
            "",
            "Request:\n{request}\n\n"
            "Output that was checked:\n{artifact}\n\n"
            "Failed rules (id, severity, message):\n{failed_rules}",
        ),
        _system(PromptId.RECURSIVE_REFINEMENT_SYSTEM, RefinementOutput),
        _json_user(
            PromptId.RECURSIVE_REFINEMENT_USER,
            RefinementInput,
            RefinementOutput,
            "Phases B and C: revise the pending part of a plan to address listed issues.",
            "Revise the plan at the end to address the issues listed there, and only those, in "
            "at most the number of actions given there ([] when no issue needs a change):\n"
            "- ADD: new_step, a step appended with an unused step_id; target_step_id null.\n"
            "- MODIFY: target_step_id, and new_step with that step_id and a new description.\n"
            "- REMOVE: target_step_id of a pending step; new_step null.\n"
            "- REPLACE: target_step_id, and new_step to put in its place.",
            {
                "actions": [
                    {
                        "action_type": "ADD",
                        "target_step_id": None,
                        "new_step": {
                            "step_id": "s3",
                            "description": "Work out the yearly saving of the cheaper one.",
                            "depends_on": ["s2"],
                            "tool": None,
                            "arguments": None,
                        },
                        "reason": "Nothing covers the saving the request asks for.",
                    },
                ]
            },
            "",
            "Request:\n{request}\n\n"
            "Current plan (JSON):\n{plan}\n\n"
            "Steps already executed, which must not be changed or removed: {executed_step_ids}\n\n"
            "Issues to address:\n{issues}\n\n"
            "Actions to propose: at most {max_actions}.",
        ),
        # ---- verified answers: PREPARE, the draft, REFINE (the critique is RULE_CRITIQUE's) ---
        _system(PromptId.CHECKS_PREPARE_SYSTEM, PrepareChecksOutput),
        _json_user(
            PromptId.CHECKS_PREPARE_USER,
            PrepareChecksInput,
            PrepareChecksOutput,
            "Phase A (PREPARE): turn rules in words and the request's own checkable constraints "
            "into checks the host runs on the answer.",
            "Turn what the answer to the request at the end must satisfy into checks a program "
            "runs. Do not answer the request. Make them from:\n"
            "- each rule in words given at the end, under its id;\n"
            "- each constraint the request states that a program can check (a number of bullet "
            'points, words or sentences, "mention X", "start with Y", a language, JSON), under '
            "an id request.<name>.\n"
            "Leave out tone, accuracy and quality; with nothing to check, return []. Each check "
            "is one of these objects, with exactly their fields:\n{check_types}",
            _PREPARE_EXAMPLE,
            "",
            "Request:\n{request}\n\nRules in words (id: what to check):\n{rules_in_words}",
        ),
        _system(PromptId.ANSWER_DRAFT_SYSTEM, None),
        _free_form(
            PromptId.ANSWER_DRAFT_USER,
            DraftAnswerInput,
            "Phase A: the plain draft, the request answered as one call would answer it.",
            "{request}",
        ),
        _system(PromptId.ANSWER_REWRITE_SYSTEM, None),
        _free_form(
            PromptId.ANSWER_REWRITE_USER,
            RewriteAnswerInput,
            "Phase E: one targeted rewrite of the answer, to meet the checks it failed.",
            "Rewrite the answer so that it meets every requirement below, and change nothing "
            "else.\n\n"
            "Request:\n{request}\n\n"
            "Answer:\n{answer}\n\n"
            "Requirements it does not meet yet:\n{failed_checks}\n\n"
            "Reply with the whole rewritten answer only.",
        ),
        # ---- recursive planning --------------------------------------------------------------
        _free_form(
            PromptId.RECURSIVE_PLAN_GENERATION_USER,
            RecursivePlanInput,
            "Break a goal of a larger plan into sub-goals, as a plain list.",
            "Break a goal into smaller sub-goals. This is nesting level {depth} of a larger plan "
            "for the request below.\n\n"
            "Request:\n{request}\n\n"
            "Goal to break down:\n{parent_goal}\n\n"
            "Write 2 to 5 sub-goals in the order they must be done, one per line, each starting "
            'with "- ". Each is a concrete piece of work, and together they cover the whole goal. '
            "Write nothing else.",
        ),
        _json_user(
            PromptId.RECURSIVE_SUBPLAN_GENERATION_USER,
            RecursiveSubplanInput,
            PlanGenerationOutput,
            "Expand one plan step that is too large into a sub-plan.",
            "One step of the plan for the request at the end is too large to do in one go. Write "
            "a sub-plan for it, whose goal is what the step must produce: 2 to 5 steps, with ids "
            "that start with the step's id.",
            {
                "plan": {
                    "goal": "The heat pump's yearly running cost in euros.",
                    "steps": [
                        {
                            "step_id": "s2.1",
                            "description": "Estimate the heat pump's yearly use in kWh.",
                            "depends_on": [],
                            "tool": None,
                            "arguments": None,
                        },
                        {
                            "step_id": "s2.2",
                            "description": "Multiply the use from s2.1 by the price.",
                            "depends_on": ["s2.1"],
                            "tool": None,
                            "arguments": None,
                        },
                    ],
                }
            },
            _PLAN_FIELDS,
            "Request:\n{request}\n\n"
            "The step to expand ({parent_step_id}):\n{parent_step_description}\n\n"
            'Sub-plan step ids: "{parent_step_id}.1", "{parent_step_id}.2", and so on.',
        ),
        # ---- supervisor repairs --------------------------------------------------------------
        _system(PromptId.SUPERVISOR_REPAIR_SYSTEM, None),
        PromptDefinition(
            prompt_id=PromptId.SUPERVISOR_REPAIR_JSON_USER,
            template=(
                "A reply that had to be a JSON object could not be used: it is given at the end, "
                "with the request it was written for, why it was rejected and the JSON schema it "
                "must satisfy.\n\n"
                "Rewrite it as one JSON object that satisfies the schema. Keep the content of the "
                "rejected reply; fix the syntax; add missing required fields with values that fit "
                "that content; drop fields the schema does not have; use only allowed values. A "
                "field that only repeats the instructions or an example is not content: write it "
                "anew for the request. Write each id alone, exactly as given, with no "
                "punctuation around it.\n\n"
                "Reply with only the JSON object: no text before or after it, and no Markdown "
                "fences.\n\n"
                "The request it was written for:\n{request}\n\n"
                "The JSON schema the reply must satisfy:\n{expected_schema}\n\n"
                "Why it was rejected:\n{error}\n\n"
                "The rejected reply:\n{malformed_output}"
            ),
            input_model=RepairJSONInput,
            output_model=RepairedJSONOutput,
            description="The one repair round for a JSON reply that failed extraction or "
            "validation; the shape to reach is the schema in the input.",
        ),
        _free_form(
            PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER,
            RepairToolCallInput,
            "Repair a malformed tool call.",
            'A call to the tool "{tool_name}" was malformed and was not run.\n\n'
            "Error:\n{error}\n\n"
            "The JSON schema its arguments must satisfy:\n{argument_schema}\n\n"
            "The call as written:\n{malformed_call}\n\n"
            "Write the corrected call: the same tool and the same intent, with the arguments "
            "fixed so that this error cannot happen again. Reply with the corrected call only, in "
            "the same format as the call above.",
        ),
        _free_form(
            PromptId.SUPERVISOR_REPAIR_PLAN_USER,
            RepairPlanInput,
            "Repair a plan that was rejected.",
            "The plan below, written for this request, was rejected.\n\n"
            "Request:\n{request}\n\n"
            "The plan:\n{plan}\n\n"
            "Why it was rejected:\n{error}\n\n"
            "Write the corrected plan: keep the steps that are fine, fix the problem named above, "
            "and keep the format of the plan above. Reply with the corrected plan only.",
        ),
        _free_form(
            PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER,
            RepairMissingToolInput,
            "Rewrite a step that asks for a tool that is not available.",
            'A plan step asks for the tool "{tool_name}", which is not available.\n\n'
            "The step:\n{step_description}\n\n"
            "Available tools: {available_tools}\n\n"
            "Rewrite the step so it can be done with the available tools, or by reasoning alone "
            "if none of them fits. Reply with the rewritten step description only, in one or two "
            "sentences.",
        ),
        # ---- E: answer synthesis -------------------------------------------------------------
        _system(PromptId.ANSWER_SYNTHESIS_SYSTEM, FinalAnswerOutput),
        _json_user(
            PromptId.ANSWER_SYNTHESIS_USER,
            AnswerSynthesisInput,
            FinalAnswerOutput,
            "Phase E: write the final answer from whatever the loop produced (FR-041).",
            "Write the final answer to the request at the end from the step results there. "
            "Answer it directly; do not describe the process. If the work is incomplete, still "
            "give the best answer the results support, and say what is missing or uncertain. "
            "Never invent results.",
            {
                "answer_text": "The heat pump: about 900 euros a year against 1,400 for "
                "the gas boiler (s1, s2).",
                "confidence": 0.8,
                "used_step_ids": ["s1", "s2"],
                "notes": None,
            },
            "- confidence: how likely the answer is correct and complete, judged from the results "
            "and the last pass's score.",
            "Request:\n{request}\n\n"
            "How the reasoning loop ended: {convergence_status}, after {total_passes} pass(es) "
            "and {total_refinements} refinement action(s) applied to the plan; passes left in "
            "the budget: {ttl_remaining}. The last pass scored {last_pass_score} (0 to 1).\n\n"
            "Plan:\n{plan_summary}\n\n"
            "Step results:\n{results_summary}\n\n"
            "Last assessment:\n{assessment_summary}\n\n"
            "Data missing from this run: {missing_fields}",
        ),
    ]


# --------------------------------------------------------------------------------------------
# The registry.
# --------------------------------------------------------------------------------------------


#: Each user prompt's reply budget in tokens, sent as `max_tokens` unless AEON_LLM_MAX_TOKENS
#: sets one for all. Every call sends one: a server given none generates until its own limit,
#: which on a small local model is minutes of noise (issue 24 measured 60 s timeouts). Each is
#: room for its output filled in generously, at about four characters a token: a profile or a
#: convergence verdict is a few short fields, a plan or a step a few paragraphs, the answer the
#: longest. A reply cut at its budget is asked for once more with twice the budget.
REPLY_TOKENS: dict[PromptId, int] = {
    PromptId.TASKPROFILE_INFERENCE_USER: 300,
    PromptId.TASKPROFILE_UPDATE_USER: 300,
    PromptId.PLAN_GENERATION_USER: 800,
    PromptId.VALIDATION_SEMANTIC_USER: 600,
    PromptId.REASONING_STEP_USER: 700,
    PromptId.CONVERGENCE_ASSESSMENT_USER: 400,
    PromptId.PASS_EVALUATION_USER: 800,
    PromptId.RULE_CRITIQUE_USER: 600,
    PromptId.RECURSIVE_REFINEMENT_USER: 700,
    PromptId.RECURSIVE_PLAN_GENERATION_USER: 800,
    PromptId.RECURSIVE_SUBPLAN_GENERATION_USER: 800,
    PromptId.SUPERVISOR_REPAIR_JSON_USER: 1_000,
    PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER: 600,
    PromptId.SUPERVISOR_REPAIR_PLAN_USER: 800,
    PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER: 600,
    PromptId.ANSWER_SYNTHESIS_USER: 1_000,
    PromptId.CHECKS_PREPARE_USER: 600,
    # The draft is the one-call answer, and the refinement is a whole answer: each as long as
    # the synthesised answer may be.
    PromptId.ANSWER_DRAFT_USER: 1_000,
    PromptId.ANSWER_REWRITE_USER: 1_000,
}


class PromptRegistry:
    """Looks prompts up by id, renders them from validated input, and validates replies.

    `PromptRegistry()` holds every definition of this module; tests pass their own definitions
    or template directory to exercise the failure paths without touching the real ones.
    """

    def __init__(
        self,
        definitions: Iterable[PromptDefinition] | None = None,
        templates_dir: Path = TEMPLATES_DIR,
    ) -> None:
        self._definitions: dict[PromptId, PromptDefinition] = {}
        for definition in _definitions() if definitions is None else definitions:
            if definition.prompt_id in self._definitions:
                raise ValueError(f"{definition.prompt_id} is defined twice")
            self._definitions[definition.prompt_id] = definition
        self._templates_dir = templates_dir

    def get_definition(self, prompt_id: PromptId | str) -> PromptDefinition:
        """The definition of `prompt_id`; PromptNotFoundError when it is not registered."""
        try:
            return self._definitions[PromptId(prompt_id)]
        except (ValueError, KeyError):
            raise PromptNotFoundError(prompt_id) from None

    def get_prompt(
        self, prompt_id: PromptId | str, input_data: BaseModel | Mapping[str, Any]
    ) -> str:
        """The prompt text for `input_data`, validated against the prompt's input model first.

        An instance of exactly that model was validated when it was built and is used as it is.
        Raises PromptNotFoundError, pydantic's ValidationError for bad input, TemplateNotFound
        for a system prompt without a template file, and RenderingError when a template fails.
        """
        definition = self.get_definition(prompt_id)
        data = _validated_input(definition.input_model, input_data)
        if definition.system_phase is not None:
            agent = cast(SystemPromptInput, data).agent  # __post_init__ guarantees the type
            return load_system_template(definition.system_phase, agent, self._templates_dir)
        names = model_fields(definition.input_model)
        fields = {name: _render_value(getattr(data, name)) for name in names}
        try:
            return definition.template.format_map(fields)
        except (KeyError, IndexError, AttributeError, ValueError, TypeError) as error:
            raise RenderingError(definition.prompt_id, error) from error

    def reply_tokens(self, prompt_id: PromptId | str) -> int:
        """The reply budget of a user prompt (REPLY_TOKENS)."""
        definition = self.get_definition(prompt_id)
        if definition.system_phase is not None:
            raise ValueError(f"{definition.prompt_id}: a system prompt has no reply of its own")
        return REPLY_TOKENS[definition.prompt_id]

    def output_schema(self, prompt_id: PromptId | str) -> str:
        """The JSON schema of the prompt's output model, as text for the JSON repair prompt."""
        definition = self.get_definition(prompt_id)
        if definition.output_model is None:
            raise NoOutputModelError(definition.prompt_id)
        return json.dumps(json_schema(definition.output_model))

    @overload
    def validate_output(
        self,
        prompt_id: PromptId | str,
        llm_response: str | Mapping[str, Any],
        output_model: type[ModelT],
    ) -> ModelT: ...

    @overload
    def validate_output(
        self,
        prompt_id: PromptId | str,
        llm_response: str | Mapping[str, Any],
        output_model: None = None,
    ) -> BaseModel: ...

    def validate_output(
        self,
        prompt_id: PromptId | str,
        llm_response: str | Mapping[str, Any],
        output_model: type[BaseModel] | None = None,
    ) -> BaseModel:
        """The reply's JSON, extracted in the contract's order (FR-013A..F) and validated.

        `output_model` defaults to the prompt's own; passing one validates a reply against
        another contract (a repaired reply against the original prompt's model). Raises
        NoOutputModelError for a free-form prompt without an explicit model, JSONExtractionError
        when no JSON is found, and pydantic's ValidationError when the JSON does not fit.
        """
        definition = self.get_definition(prompt_id)
        model = _output_model(definition, output_model)
        return validate_model(model, extract_json(llm_response, definition.prompt_id))

    @overload
    def validate_value(
        self, prompt_id: PromptId | str, value: Any, output_model: type[ModelT]
    ) -> ModelT: ...

    @overload
    def validate_value(
        self, prompt_id: PromptId | str, value: Any, output_model: None = None
    ) -> BaseModel: ...

    def validate_value(
        self, prompt_id: PromptId | str, value: Any, output_model: type[BaseModel] | None = None
    ) -> BaseModel:
        """A JSON value already extracted (by `extract_json`) validated as `validate_output`
        validates it: against `output_model`, else the prompt's own. What `validate_output`
        does after extracting, so a caller that extracts once (llm.reply, which also validates
        the local repairs of the value) validates exactly as the contract does."""
        definition = self.get_definition(prompt_id)
        return validate_model(_output_model(definition, output_model), value)


def _output_model(
    definition: PromptDefinition, output_model: type[BaseModel] | None
) -> type[BaseModel]:
    """The model a reply to `definition` is validated against; NoOutputModelError for a
    free-form prompt given none."""
    model = output_model or definition.output_model
    if model is None:
        raise NoOutputModelError(definition.prompt_id)
    return model


@lru_cache(maxsize=1)
def default_registry() -> PromptRegistry:
    """The process-wide registry of every definition in this module."""
    return PromptRegistry()


def validate_output(
    prompt_id: PromptId | str,
    llm_response: str | Mapping[str, Any],
    output_model: type[BaseModel] | None = None,
) -> BaseModel:
    """`PromptRegistry.validate_output` on the default registry."""
    return default_registry().validate_output(prompt_id, llm_response, output_model)
