"""Seed 000 FR-014/FR-014A: the prompt contracts work the same under Pydantic 1.10 and 2.x.

This suite imports only `prompts`, pydantic, the standard library and pytest, so CI runs it as
is in a Pydantic-1.10 environment too; these tests pin the behaviour both runs must share.
"""

from __future__ import annotations

import json

import pydantic
import pytest
from prompt_samples import SAMPLE_INPUTS
from pydantic import ValidationError

from aeonloop.prompts.compat import (
    PYDANTIC_V2,
    dump_model,
    json_schema,
    model_fields,
    validate_model,
)
from aeonloop.prompts.registry import (
    PlanGenerationInput,
    PromptDefinition,
    PromptId,
    PromptInput,
    PromptRegistry,
    TaskProfileOutput,
)

REGISTRY = PromptRegistry()
EXAMPLES = [
    (p, REGISTRY.get_definition(p))
    for p in PromptId
    if REGISTRY.get_definition(p).example_output is not None
]

#: A valid TaskProfileOutput reply.
PROFILE = {
    "reasoning_depth": 2,
    "information_sufficiency": 0.5,
    "expected_tool_usage": "none",
    "output_breadth": "narrow",
    "confidence_requirement": "low",
}


def test_the_version_switch_matches_the_installed_pydantic() -> None:
    assert pydantic.VERSION.startswith("2.") is PYDANTIC_V2


@pytest.mark.parametrize("input_model", list(SAMPLE_INPUTS), ids=lambda m: m.__name__)
def test_every_input_model_round_trips(input_model: type[PromptInput]) -> None:
    data = SAMPLE_INPUTS[input_model]
    instance = validate_model(input_model, data)
    assert dump_model(validate_model(input_model, dump_model(instance))) == dump_model(instance)
    assert set(data) <= set(model_fields(input_model))


@pytest.mark.parametrize(("prompt_id", "definition"), EXAMPLES, ids=[p for p, _ in EXAMPLES])
def test_every_output_model_validates_and_describes_itself(
    prompt_id: PromptId, definition: PromptDefinition
) -> None:
    assert definition.prompt_id is prompt_id
    output = validate_model(definition.output_model, definition.example_output)
    assert dump_model(output) == definition.example_output
    schema = json_schema(definition.output_model)
    assert json.loads(json.dumps(schema))["type"] == "object"


def test_inputs_refuse_unknown_fields_and_outputs_ignore_them() -> None:
    with pytest.raises(ValidationError):
        validate_model(PlanGenerationInput, {"request": "x", "surprise": 1})
    profile = {**PROFILE, "chatter": "ignored"}
    assert "chatter" not in dump_model(validate_model(TaskProfileOutput, profile))


@pytest.mark.parametrize(
    "bad",
    [
        {"reasoning_depth": 6},
        {"information_sufficiency": 1.5},
        {"expected_tool_usage": "lots"},
        {"output_breadth": None},
    ],
)
def test_constraints_hold_in_both_versions(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        validate_model(TaskProfileOutput, {**PROFILE, **bad})
