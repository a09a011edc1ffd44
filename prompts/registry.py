"""The prompt registry: every prompt Aeon sends, its typed input, and (for JSON prompts) its output.

Seeds 000/001 are the contract: one PromptId per prompt, an input model for every prompt, an output
model exactly for the JSON-producing ones, rendering by f-string field access on the validated
input, and `validate_output` as the only place JSON is pulled out of an LLM reply.
"""

from __future__ import annotations

from enum import Enum
from typing import List, Literal, Optional

from pydantic import Field

from prompts.compat import LenientModel, StrictModel


class PromptId(str, Enum):
    # Seed 000 FR-005.
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
    # What the C-loop needs beyond FR-005: seed 004's CRITIQUE step.
    RULE_CRITIQUE_SYSTEM = "RULE_CRITIQUE_SYSTEM"
    RULE_CRITIQUE_USER = "RULE_CRITIQUE_USER"


# --------------------------------------------------------------------------------------------
# Base classes (seed 000 Key Entities).
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

    agent: str = Field("BASE", min_length=1, description="model family, e.g. 'openai'; BASE is the fallback")


class TaskProfileInferenceInput(PromptInput):
    request: str = Field(..., min_length=1)
    rules_summary: str = ""


class TaskProfileUpdateInput(PromptInput):
    request: str = Field(..., min_length=1)
    current_profile: str = Field(..., description="the profile now in force, as JSON")
    evidence: str = Field(..., description="what the last pass showed: convergence, issues, blocked steps")


class PlanGenerationInput(PromptInput):
    request: str = Field(..., min_length=1)
    profile_summary: str = ""
    rules_summary: str = ""


class SemanticValidationInput(PromptInput):
    request: str = Field(..., min_length=1)
    artifact_kind: Literal["plan", "pass"]
    artifact: str = Field(..., description="the plan, or the pass's step outputs, as text")


class RefinementInput(PromptInput):
    request: str = Field(..., min_length=1)
    plan: str = Field(..., description="the current plan as JSON")
    issues: str = Field(..., description="the issues the refinement must address, one per line")
    executed_step_ids: List[str] = Field(default_factory=list)
    max_actions: int = Field(5, ge=1)


class ReasoningStepInput(PromptInput):
    request: str = Field(..., min_length=1)
    goal: str
    step_id: str
    step_description: str
    prior_outputs: str = Field("", description="outputs of the steps before this one")
    pass_number: int = Field(..., ge=1)


class ConvergenceAssessmentInput(PromptInput):
    request: str = Field(..., min_length=1)
    goal: str
    pass_number: int = Field(..., ge=1)
    step_outputs: str
    validation_summary: str = ""
    rules_summary: str = ""


class CritiqueInput(PromptInput):
    request: str = Field(..., min_length=1)
    artifact: str
    failed_rules: str = Field(..., description="the failed rules, one per line: id, severity, message")


class RepairJSONInput(PromptInput):
    expected_schema: str = Field(..., description="JSON schema the reply must satisfy")
    malformed_output: str
    error: str


class RepairToolCallInput(PromptInput):
    tool_name: str
    malformed_call: str
    error: str


class RepairPlanInput(PromptInput):
    request: str = Field(..., min_length=1)
    plan: str
    error: str


class RepairMissingToolInput(PromptInput):
    tool_name: str
    available_tools: List[str] = Field(default_factory=list)
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
    """What Phase E tells the model, derived from PhaseEInput (seed 000 FR-041)."""

    request: str = Field(..., min_length=1)
    convergence_status: str
    total_passes: int = Field(..., ge=0)
    total_refinements: int = Field(..., ge=0)
    ttl_remaining: int = Field(..., ge=0)
    plan_summary: str = ""
    results_summary: str = ""
    assessment_summary: str = ""
    missing_fields: List[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Output models (JSON prompts only).
# --------------------------------------------------------------------------------------------


class TaskProfileOutput(PromptOutput):
    reasoning_depth: int = Field(..., ge=1, le=5)
    information_sufficiency: float = Field(..., ge=0.0, le=1.0)
    expected_tool_usage: Literal["none", "minimal", "moderate", "extensive"]
    output_breadth: Literal["narrow", "moderate", "broad"]
    confidence_requirement: Literal["low", "medium", "high"]
    raw_inference: str = ""


class PlanStepOutput(PromptOutput):
    step_id: str = Field(..., min_length=1)
    description: str = Field(..., min_length=1)


class PlanBody(PromptOutput):
    goal: str
    steps: List[PlanStepOutput] = Field(default_factory=list)


class PlanGenerationOutput(PromptOutput):
    plan: PlanBody


class SemanticIssueOutput(PromptOutput):
    kind: str = "semantic"
    severity: Literal["low", "medium", "high"] = "medium"
    description: str = Field(..., min_length=1)
    step_id: Optional[str] = None


class SemanticValidationOutput(PromptOutput):
    issues: List[SemanticIssueOutput] = Field(default_factory=list)
    summary: str = ""


class RefinementActionOutput(PromptOutput):
    action_type: Literal["ADD", "MODIFY", "REMOVE", "REPLACE"]
    target_step_id: Optional[str] = None
    new_step: Optional[PlanStepOutput] = None
    reason: str = ""


class RefinementOutput(PromptOutput):
    actions: List[RefinementActionOutput] = Field(default_factory=list)


class ConsistencyOutput(PromptOutput):
    plan_aligned: bool
    step_aligned: bool
    answer_aligned: bool


class ConvergenceAssessmentOutput(PromptOutput):
    converged: bool
    completeness_score: float = Field(..., ge=0.0, le=1.0)
    coherence_score: float = Field(..., ge=0.0, le=1.0)
    consistency: ConsistencyOutput
    reason_codes: List[str] = Field(default_factory=list)
    summary: str = ""


class CritiqueIssueOutput(PromptOutput):
    rule_id: str
    problem: str
    fix_instruction: str
    expected_effect: str = ""


class CritiqueOutput(PromptOutput):
    issues: List[CritiqueIssueOutput] = Field(default_factory=list)


class RepairedJSONOutput(PromptOutput):
    """A repaired reply is any JSON object; the caller validates it against the original model."""


class FinalAnswerOutput(PromptOutput):
    """The model's part of a FinalAnswer; the host adds ttl_exhausted and metadata (FR-041)."""

    answer_text: str = Field(..., min_length=1)
    confidence: Optional[float] = Field(None, ge=0.0, le=1.0)
    used_step_ids: Optional[List[str]] = None
    notes: Optional[str] = None
