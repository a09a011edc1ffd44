"""Sample input for every prompt input model, and the JSON/free-form contract of every PromptId.

Every value is distinctive (markers, unusual numbers) so a test can tell that each field reached
the rendered prompt, and that nothing else printed a field by accident.
"""

from __future__ import annotations

from typing import Any

from aeonloop.prompts.registry import (
    AnswerSynthesisInput,
    ConvergenceAssessmentInput,
    ConvergenceAssessmentOutput,
    CritiqueInput,
    CritiqueOutput,
    DraftAnswerInput,
    FinalAnswerOutput,
    PassEvaluationInput,
    PassEvaluationOutput,
    PlanGenerationInput,
    PlanGenerationOutput,
    PrepareChecksInput,
    PrepareChecksOutput,
    PromptId,
    PromptInput,
    PromptOutput,
    ReasoningStepInput,
    RecursivePlanInput,
    RecursiveSubplanInput,
    RefinementInput,
    RefinementOutput,
    RepairedJSONOutput,
    RepairJSONInput,
    RepairMissingToolInput,
    RepairPlanInput,
    RepairToolCallInput,
    RewriteAnswerInput,
    SemanticValidationInput,
    SemanticValidationOutput,
    SystemPromptInput,
    TaskProfileInferenceInput,
    TaskProfileOutput,
    TaskProfileUpdateInput,
)

SAMPLE_INPUTS: dict[type[PromptInput], dict[str, Any]] = {
    SystemPromptInput: {"agent": "openai"},
    TaskProfileInferenceInput: {"request": "REQUEST-MARK", "rules_summary": "RULES-MARK"},
    TaskProfileUpdateInput: {
        "request": "REQUEST-MARK",
        "current_profile": '{"reasoning_depth": 2, "mark": "PROFILE-MARK"}',
        "evidence": "EVIDENCE-MARK",
    },
    PlanGenerationInput: {
        "request": "REQUEST-MARK",
        "profile_summary": "PROFILE-MARK",
        "rules_summary": "RULES-MARK",
    },
    SemanticValidationInput: {
        "request": "REQUEST-MARK",
        "artifact_kind": "plan",
        "artifact": "ARTIFACT-MARK",
    },
    RefinementInput: {
        "request": "REQUEST-MARK",
        "plan": '{"goal": "PLAN-MARK", "steps": [{"step_id": "s1"}]}',
        "issues": "ISSUES-MARK",
        "executed_step_ids": ["EXEC-1", "EXEC-2"],
        "max_actions": 4713,
    },
    ReasoningStepInput: {
        "request": "REQUEST-MARK",
        "goal": "GOAL-MARK",
        "step_id": "STEPID-MARK",
        "step_description": "STEPDESC-MARK",
        "prior_outputs": "PRIOR-MARK",
        "pass_number": 4711,
    },
    ConvergenceAssessmentInput: {
        "request": "REQUEST-MARK",
        "goal": "GOAL-MARK",
        "pass_number": 4711,
        "step_outputs": "OUTPUTS-MARK",
        "rules_summary": "RULES-MARK",
    },
    PassEvaluationInput: {
        "request": "REQUEST-MARK",
        "goal": "GOAL-MARK",
        "pass_number": 4711,
        "step_outputs": "OUTPUTS-MARK",
        "rules_summary": "RULES-MARK",
    },
    CritiqueInput: {
        "request": "REQUEST-MARK",
        "artifact": "ARTIFACT-MARK",
        "failed_rules": "r1, fail, FAILED-MARK",
    },
    RepairJSONInput: {
        "request": "REQUEST-MARK",
        "expected_schema": '{"type": "object", "title": "SCHEMA-MARK"}',
        "malformed_output": "{'MALFORMED-MARK': }",
        "error": "ERROR-MARK",
    },
    RepairToolCallInput: {
        "tool_name": "TOOL-MARK",
        "malformed_call": "CALL-MARK(",
        "error": "ERROR-MARK",
    },
    RepairPlanInput: {"request": "REQUEST-MARK", "plan": "PLAN-MARK", "error": "ERROR-MARK"},
    RepairMissingToolInput: {
        "tool_name": "TOOL-MARK",
        "available_tools": ["TOOL-A", "TOOL-B"],
        "step_description": "STEPDESC-MARK",
    },
    RecursivePlanInput: {"request": "REQUEST-MARK", "parent_goal": "GOAL-MARK", "depth": 4712},
    RecursiveSubplanInput: {
        "request": "REQUEST-MARK",
        "parent_step_id": "PARENTID-MARK",
        "parent_step_description": "PARENTDESC-MARK",
    },
    PrepareChecksInput: {
        "request": "REQUEST-MARK",
        "rules_in_words": "- r1: WORDS-MARK",
        "check_types": "- CHECKTYPES-MARK",
    },
    DraftAnswerInput: {"request": "REQUEST-MARK"},
    RewriteAnswerInput: {
        "request": "REQUEST-MARK",
        "answer": "ANSWER-MARK",
        "failed_checks": "- [r1] ISSUES-MARK",
    },
    AnswerSynthesisInput: {
        "request": "REQUEST-MARK",
        "convergence_status": "STATUS-MARK",
        "total_passes": 4714,
        "total_refinements": 4715,
        "ttl_remaining": 4716,
        "last_pass_score": 0.4717,
        "plan_summary": "PLAN-MARK",
        "results_summary": "RESULTS-MARK",
        "assessment_summary": "ASSESSMENT-MARK",
        "missing_fields": ["MISSING-1", "MISSING-2"],
    },
}

#: The contract of seed 000 FR-005 plus the project's decision (registry docstring): the output
#: model of every JSON prompt. Every PromptId not listed here is free-form.
JSON_PROMPTS: dict[PromptId, type[PromptOutput]] = {
    PromptId.PLAN_GENERATION_SYSTEM: PlanGenerationOutput,
    PromptId.PLAN_GENERATION_USER: PlanGenerationOutput,
    PromptId.RECURSIVE_SUBPLAN_GENERATION_USER: PlanGenerationOutput,
    PromptId.RECURSIVE_REFINEMENT_SYSTEM: RefinementOutput,
    PromptId.RECURSIVE_REFINEMENT_USER: RefinementOutput,
    PromptId.CONVERGENCE_ASSESSMENT_SYSTEM: ConvergenceAssessmentOutput,
    PromptId.CONVERGENCE_ASSESSMENT_USER: ConvergenceAssessmentOutput,
    PromptId.SUPERVISOR_REPAIR_JSON_USER: RepairedJSONOutput,
    PromptId.ANSWER_SYNTHESIS_SYSTEM: FinalAnswerOutput,
    PromptId.ANSWER_SYNTHESIS_USER: FinalAnswerOutput,
    # Beyond the seed's list: the loop acts on their structure.
    PromptId.TASKPROFILE_INFERENCE_SYSTEM: TaskProfileOutput,
    PromptId.TASKPROFILE_INFERENCE_USER: TaskProfileOutput,
    PromptId.TASKPROFILE_UPDATE_SYSTEM: TaskProfileOutput,
    PromptId.TASKPROFILE_UPDATE_USER: TaskProfileOutput,
    PromptId.VALIDATION_SEMANTIC_SYSTEM: SemanticValidationOutput,
    PromptId.VALIDATION_SEMANTIC_USER: SemanticValidationOutput,
    PromptId.RULE_CRITIQUE_SYSTEM: CritiqueOutput,
    PromptId.RULE_CRITIQUE_USER: CritiqueOutput,
    PromptId.CHECKS_PREPARE_SYSTEM: PrepareChecksOutput,
    PromptId.CHECKS_PREPARE_USER: PrepareChecksOutput,
    # Issue 33: one call judges and validates a pass.
    PromptId.PASS_EVALUATION_SYSTEM: PassEvaluationOutput,
    PromptId.PASS_EVALUATION_USER: PassEvaluationOutput,
}
