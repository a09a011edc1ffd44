"""llm/reply.py: one JSON reply read top-down (extract → validate → repair → validate → judge)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from aeonloop.exceptions import JSONExtractionError, TruncatedReply, UnusableReply
from aeonloop.llm.reply import UNUSABLE, Reply, read_json, repair_input
from aeonloop.prompts.registry import (
    PromptId,
    RefinementOutput,
    TaskProfileOutput,
    default_registry,
)

REGISTRY = default_registry()
PROFILE_ID = PromptId.TASKPROFILE_INFERENCE_USER
PROFILE = {
    "reasoning_depth": 2,
    "information_sufficiency": 0.9,
    "expected_tool_usage": "none",
    "output_breadth": "narrow",
    "confidence_requirement": "low",
    "raw_inference": "Two short steps on facts the request gives.",
}


def read(text: str, *, truncated: bool = False, model=TaskProfileOutput, prompt_id=PROFILE_ID):
    return read_json(REGISTRY, prompt_id, Reply(text, truncated=truncated), model, request="")


def test_a_reply_that_fits_is_read_strictly_with_no_repair() -> None:
    result = read(f"Sure:\n```json\n{json.dumps(PROFILE)}\n```")

    assert result.repaired is False
    assert result.output.reasoning_depth == 2


def test_a_reply_with_mechanical_faults_is_repaired_locally_and_said_so() -> None:
    text = json.dumps({**PROFILE, "output_breadth": "Narrow", "reasoning_depth": 0})[:-1] + ",}"

    result = read(text)

    assert result.repaired is True
    assert (result.output.output_breadth, result.output.reasoning_depth) == ("narrow", 1)


def test_a_cut_reply_is_never_read_even_when_it_would_fit() -> None:
    with pytest.raises(TruncatedReply):
        read(json.dumps(PROFILE), truncated=True)


@pytest.mark.parametrize(
    ("text", "error"),
    [("no JSON here", JSONExtractionError), ('{"actions": "none"}', ValidationError)],
)
def test_the_strict_readings_error_is_raised_when_no_repair_fits(text, error) -> None:
    with pytest.raises(error):
        read(text, model=RefinementOutput, prompt_id=PromptId.RECURSIVE_REFINEMENT_USER)
    assert issubclass(error, UNUSABLE)


def test_a_reply_that_fits_but_copies_the_prompt_is_judged_unusable() -> None:
    example = REGISTRY.get_definition(PromptId.TASKPROFILE_INFERENCE_USER).example_output
    assert example is not None

    with pytest.raises(UnusableReply):
        read(json.dumps(example))


def test_the_repair_call_is_shown_the_request_the_schema_and_the_error() -> None:
    shown = repair_input(REGISTRY, PROFILE_ID, "Explain tides", Reply(""), ValueError("x" * 2_000))

    assert shown.request == "Explain tides"
    assert shown.malformed_output == "(empty)"
    assert json.loads(shown.expected_schema)["properties"].keys() >= PROFILE.keys()
    assert len(shown.error) == 1_001 and shown.error.endswith("…")
