"""llm.lenient: local repairs of a JSON reply before the repair call to the LLM, as llm.reply's
pipeline reads a reply with them."""

from __future__ import annotations

from enum import Enum
from typing import Literal

import pytest
from pydantic import BaseModel, ValidationError

from aeonloop.llm.lenient import fold_to_schema, repaired_values, schema_of
from aeonloop.llm.reply import Reply, read_json
from aeonloop.prompts.errors import JSONExtractionError
from aeonloop.prompts.extraction import extract_json
from aeonloop.prompts.registry import (
    ConvergenceAssessmentOutput,
    PlanGenerationOutput,
    PromptId,
    RefinementOutput,
    SemanticValidationOutput,
    TaskProfileOutput,
    default_registry,
)

PROFILE = (
    '{"reasoning_depth": 3, "information_sufficiency": 0.5, "expected_tool_usage": "%s", '
    '"output_breadth": "%s", "confidence_requirement": "%s"}'
)


def first_valid(prompt_id: PromptId, reply: str, model: type[BaseModel]) -> BaseModel:
    """The reply as llm.reply's pipeline reads it, which must have taken a local repair."""
    read = read_json(default_registry(), prompt_id, Reply(reply), model, request="")
    assert read.repaired, "the strict reading was expected to fail"
    return read.output


def lenient_candidates(reply: str, model: type[BaseModel]) -> list[dict]:
    """The local repairs of `reply`, from the strict extraction's find as the pipeline has it."""
    try:
        found = extract_json(reply)
    except JSONExtractionError:
        found = None
    return repaired_values(found, reply, model)


# Replies the strict reading rejects and the local repairs make valid.
BROKEN = {
    "trailing commas": (
        PromptId.TASKPROFILE_INFERENCE_USER,
        '{"reasoning_depth": 2, "information_sufficiency": 0.9, "expected_tool_usage": "none",'
        ' "output_breadth": "narrow", "confidence_requirement": "low",}',
        TaskProfileOutput,
    ),
    "python dict with True": (
        PromptId.CONVERGENCE_ASSESSMENT_USER,
        "{'converged': True, 'completeness_score': 0.9, 'coherence_score': 0.8, "
        "'consistency': {'plan_aligned': True, 'step_aligned': False, 'answer_aligned': True}}",
        ConvergenceAssessmentOutput,
    ),
    "python dict with None": (
        PromptId.RECURSIVE_REFINEMENT_USER,
        "{'actions': [{'action_type': 'REMOVE', 'target_step_id': 's2', 'new_step': None}]}",
        RefinementOutput,
    ),
    "fenced with trailing comma in prose": (
        PromptId.PLAN_GENERATION_USER,
        "Here is the plan you asked for:\n```json\n"
        '{"plan": {"goal": "g", "steps": [{"step_id": "s1", "description": "d"}],},}\n'
        "```\nLet me know if it needs changes.",
        PlanGenerationOutput,
    ),
    "broken outer object around a valid inner one": (
        PromptId.PLAN_GENERATION_USER,
        '{"plan": {"goal": "g", "steps": [{"step_id": "s1", "description": "d"},]}}',
        PlanGenerationOutput,
    ),
}


@pytest.mark.parametrize(("prompt_id", "reply", "model"), BROKEN.values(), ids=BROKEN.keys())
def test_strict_reading_rejects_the_broken_reply(
    prompt_id: PromptId, reply: str, model: type[BaseModel]
) -> None:
    with pytest.raises((JSONExtractionError, ValidationError)):
        default_registry().validate_output(prompt_id, reply, model)


@pytest.mark.parametrize(("prompt_id", "reply", "model"), BROKEN.values(), ids=BROKEN.keys())
def test_some_candidate_of_the_broken_reply_validates(
    prompt_id: PromptId, reply: str, model: type[BaseModel]
) -> None:
    assert isinstance(first_valid(prompt_id, reply, model), model)


def test_python_literals_keep_their_meaning() -> None:
    _, reply, model = BROKEN["python dict with True"]

    output = first_valid(PromptId.CONVERGENCE_ASSESSMENT_USER, reply, model)

    assert output.converged is True
    assert output.consistency.step_aligned is False


def test_python_none_becomes_null() -> None:
    _, reply, model = BROKEN["python dict with None"]

    output = first_valid(PromptId.RECURSIVE_REFINEMENT_USER, reply, model)

    assert output.actions[0].new_step is None
    assert output.actions[0].target_step_id == "s2"


def test_broken_outer_object_keeps_the_whole_plan() -> None:
    _, reply, model = BROKEN["broken outer object around a valid inner one"]

    output = first_valid(PromptId.PLAN_GENERATION_USER, reply, model)

    assert output.plan.goal == "g"
    assert [step.step_id for step in output.plan.steps] == ["s1"]


def test_enum_values_in_the_wrong_case_are_folded() -> None:
    reply = PROFILE % ("Moderate", "BROAD", "High")

    candidate = lenient_candidates(reply, TaskProfileOutput)[0]

    assert candidate["expected_tool_usage"] == "moderate"
    assert candidate["output_breadth"] == "broad"
    assert candidate["confidence_requirement"] == "high"


def test_enum_value_with_surrounding_white_space_is_folded() -> None:
    reply = PROFILE % (" minimal ", "narrow", "low")

    candidate = lenient_candidates(reply, TaskProfileOutput)[0]

    assert candidate["expected_tool_usage"] == "minimal"


def test_folded_enum_reply_validates_with_the_registry() -> None:
    reply = PROFILE % ("Moderate", "Narrow", "MEDIUM")
    with pytest.raises(ValidationError):
        default_registry().validate_output(
            PromptId.TASKPROFILE_INFERENCE_USER, reply, TaskProfileOutput
        )

    output = first_valid(PromptId.TASKPROFILE_INFERENCE_USER, reply, TaskProfileOutput)

    assert output.expected_tool_usage == "moderate"
    assert output.confidence_requirement == "medium"


def test_enum_nested_in_a_list_of_objects_is_folded() -> None:
    reply = (
        '{"actions": [{"action_type": "add", "new_step": {"step_id": "s3", "description": "d"}},'
        ' {"action_type": "Remove", "target_step_id": "s1"}]}'
    )

    output = first_valid(PromptId.RECURSIVE_REFINEMENT_USER, reply, RefinementOutput)

    assert [action.action_type for action in output.actions] == ["ADD", "REMOVE"]


def test_enum_inside_a_list_in_a_fenced_reply_with_trailing_comma_is_folded() -> None:
    reply = (
        "I found one issue.\n```json\n"
        '{"issues": [{"description": "step 2 is vague", "severity": "High"},],}\n```'
    )

    output = first_valid(PromptId.VALIDATION_SEMANTIC_USER, reply, SemanticValidationOutput)

    assert output.issues[0].severity == "high"


def test_strings_that_are_not_enums_keep_their_case() -> None:
    reply = '{"actions": [{"action_type": "modify", "target_step_id": "s1", "reason": "add"}]}'

    candidate = lenient_candidates(reply, RefinementOutput)[0]

    assert candidate["actions"][0] == {
        "action_type": "MODIFY",
        "target_step_id": "s1",
        "reason": "add",
    }


def test_unknown_enum_value_is_left_for_validation_to_reject() -> None:
    reply = PROFILE % ("urgent", "broad", "high")

    [candidate] = lenient_candidates(reply, TaskProfileOutput)

    assert candidate["expected_tool_usage"] == "urgent"
    with pytest.raises(ValidationError):
        default_registry().validate_value(
            PromptId.TASKPROFILE_INFERENCE_USER, candidate, TaskProfileOutput
        )


def test_text_without_json_gives_no_candidates() -> None:
    assert lenient_candidates("I could not produce a profile for this.", TaskProfileOutput) == []


def test_empty_reply_gives_no_candidates() -> None:
    assert lenient_candidates("", TaskProfileOutput) == []


def test_json_that_is_not_an_object_gives_no_candidates() -> None:
    assert lenient_candidates("[1, 2, 3]", TaskProfileOutput) == []


def test_both_readings_agreeing_give_one_candidate() -> None:
    reply = PROFILE % ("Moderate", "broad", "high")

    assert len(lenient_candidates(reply, TaskProfileOutput)) == 1


def test_braces_in_surrounding_prose_do_not_hide_the_object() -> None:
    reply = "Sets are written {a, b}. " + PROFILE % ("Extensive", "broad", "high") + " Done."

    output = first_valid(PromptId.TASKPROFILE_INFERENCE_USER, reply, TaskProfileOutput)

    assert output.expected_tool_usage == "extensive"


def test_non_ascii_text_survives_as_is() -> None:
    # A plan needs a step (PlanBody.steps, minItems 1); the trailing comma is the fault to repair.
    reply = (
        '{"plan": {"goal": "Café – naïve", "steps": [{"step_id": "s1", "description": "Zürich"}],}}'
    )

    output = first_valid(PromptId.PLAN_GENERATION_USER, reply, PlanGenerationOutput)

    assert output.plan.goal == "Café – naïve"
    assert output.plan.steps[0].description == "Zürich"


# fold_to_schema on its own, with schemas that hold the shapes the registry's models do not.


class Colour(Enum):
    RED = "Red"
    GREEN = "Green"


class Inner(BaseModel):
    mode: Literal["FAST", "SLOW"]


class Outer(BaseModel):
    level: Literal["LOW", "HIGH"] | None = None
    inner: Inner | None = None
    inners: list[Inner] = []
    colour: Colour | None = None
    note: str = ""


def fold(value: object, model: type[BaseModel] = Outer) -> object:
    schema = schema_of(model)
    return fold_to_schema(value, schema, schema.get("$defs", {}))


def test_fold_optional_literal() -> None:
    assert fold({"level": "high"}) == {"level": "HIGH"}


def test_fold_leaves_null_in_optional_field() -> None:
    assert fold({"level": None, "inner": None}) == {"level": None, "inner": None}


def test_fold_enum_inside_optional_nested_model() -> None:
    assert fold({"inner": {"mode": "fast"}}) == {"inner": {"mode": "FAST"}}


def test_fold_enum_inside_list_of_nested_models() -> None:
    assert fold({"inners": [{"mode": "slow"}, {"mode": "Fast"}]}) == {
        "inners": [{"mode": "SLOW"}, {"mode": "FAST"}]
    }


def test_fold_python_enum_defined_in_defs() -> None:
    assert fold({"colour": "GREEN"}) == {"colour": "Green"}


def test_fold_leaves_free_text_and_unknown_keys_alone() -> None:
    value = {"note": "high", "extra": "low"}

    assert fold(value) == value


def test_folded_value_validates_against_the_model() -> None:
    folded = fold({"level": "low", "inner": {"mode": "slow"}, "colour": "red"})

    assert Outer.model_validate(folded) == Outer(
        level="LOW", inner=Inner(mode="SLOW"), colour=Colour.RED
    )


def test_fold_does_not_change_its_input() -> None:
    value = {"inner": {"mode": "fast"}}

    fold(value)

    assert value == {"inner": {"mode": "fast"}}


# Numbers outside the schema's range: what grammar-constrained servers let through (issue 24:
# SmolLM2 on llama-cpp-python answered reasoning_depth 0, information_sufficiency 3.0 and
# coherence scores of 2.5, 2 and 3).


def test_out_of_range_profile_numbers_move_to_the_nearest_bound() -> None:
    reply = PROFILE.replace('"reasoning_depth": 3', '"reasoning_depth": 0').replace(
        '"information_sufficiency": 0.5', '"information_sufficiency": 3.0'
    ) % ("none", "narrow", "low")

    output = first_valid(PromptId.TASKPROFILE_INFERENCE_USER, reply, TaskProfileOutput)

    assert (output.reasoning_depth, output.information_sufficiency) == (1, 1.0)


def test_out_of_range_scores_in_a_nested_reply_move_inside() -> None:
    reply = (
        '{"converged": false, "completeness_score": -0.5, "coherence_score": 2.5, '
        '"consistency": {"plan_aligned": true, "step_aligned": true, "answer_aligned": true}}'
    )

    output = first_valid(PromptId.CONVERGENCE_ASSESSMENT_USER, reply, ConvergenceAssessmentOutput)

    assert (output.completeness_score, output.coherence_score) == (0.0, 1.0)


def test_numbers_in_range_and_booleans_are_left_alone() -> None:
    schema = schema_of(ConvergenceAssessmentOutput)
    value = {"converged": True, "completeness_score": 0.25, "coherence_score": 1}
    assert fold_to_schema(value, schema, schema["$defs"]) == value
