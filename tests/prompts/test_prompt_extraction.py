"""`validate_output`: seed 000's extraction order and edge cases (FR-013A..K, SC-003A, SC-003B)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from aeonloop.prompts.compat import dump_model
from aeonloop.prompts.errors import JSONExtractionError, NoOutputModelError, PromptNotFoundError
from aeonloop.prompts.extraction import (
    DICT_TEXT_KEY,
    DIRECT_PARSE,
    EMBEDDED_JSON_OBJECT,
    MARKDOWN_CODE_BLOCK,
    extract_json,
)
from aeonloop.prompts.registry import (
    ConvergenceAssessmentOutput,
    CritiqueOutput,
    PromptId,
    PromptRegistry,
    validate_output,
)

REGISTRY = PromptRegistry()
CRITIQUE = PromptId.RULE_CRITIQUE_USER
ISSUE = {"rule_id": "r1", "problem": "p", "fix_instruction": "f", "expected_effect": "e"}
GOOD = {"issues": [ISSUE]}
GOOD_TEXT = json.dumps(GOOD)
OTHER = {"issues": []}
ALL_STRING_METHODS = [MARKDOWN_CODE_BLOCK, EMBEDDED_JSON_OBJECT, DIRECT_PARSE]


def issues(response: str | dict[str, Any]) -> list[dict[str, Any]]:
    """The critique issues validate_output reads from `response`."""
    output = REGISTRY.validate_output(CRITIQUE, response)
    assert isinstance(output, CritiqueOutput)
    return dump_model(output)["issues"]


def no_json(response: Any) -> JSONExtractionError:
    with pytest.raises(JSONExtractionError) as caught:
        REGISTRY.validate_output(CRITIQUE, response)
    assert not isinstance(caught.value, ValidationError)
    assert caught.value.prompt_id is CRITIQUE
    return caught.value


# ---- 1. dictionary "text" key (FR-013C, FR-013K) ---------------------------------------------


def test_a_dict_reply_is_read_from_its_text_key() -> None:
    assert issues({"text": GOOD_TEXT, "usage": {"tokens": 3}}) == [ISSUE]


def test_nested_json_in_the_text_key_goes_through_the_whole_pipeline() -> None:
    assert issues({"text": f"Here you go:\n```json\n{GOOD_TEXT}\n```"}) == [ISSUE]
    assert issues({"text": f"Result: {GOOD_TEXT} done"}) == [ISSUE]


def test_a_dict_without_a_text_key_is_an_extraction_error() -> None:
    error = no_json({"content": GOOD_TEXT})
    assert error.extraction_methods_attempted == [DICT_TEXT_KEY]
    assert '"text" key' in str(error)


@pytest.mark.parametrize("value", [None, 42, GOOD, [GOOD_TEXT]])
def test_a_non_string_text_value_is_an_extraction_error(value: object) -> None:
    error = no_json({"text": value})
    assert error.extraction_methods_attempted == [DICT_TEXT_KEY]
    assert "must hold a string" in str(error)


def test_an_empty_text_value_is_tried_by_every_method_then_fails() -> None:
    error = no_json({"text": ""})
    assert error.extraction_methods_attempted == [DICT_TEXT_KEY, *ALL_STRING_METHODS]


@pytest.mark.parametrize("response", [None, 12, [GOOD_TEXT], b"{}"])
def test_a_reply_that_is_neither_string_nor_dict_is_an_extraction_error(response: object) -> None:
    assert no_json(response).extraction_methods_attempted == []


# ---- 2. Markdown code blocks (FR-013D) -------------------------------------------------------


@pytest.mark.parametrize("tag", ["json", "JSON", "", "javascript", "jsonc "])
def test_a_fenced_block_is_read_with_or_without_a_language_tag(tag: str) -> None:
    assert issues(f"Sure! Here it is:\n```{tag}\n{GOOD_TEXT}\n```\nAnything else?") == [ISSUE]


def test_a_fenced_block_on_one_line_is_read() -> None:
    assert issues(f"```{GOOD_TEXT}```") == [ISSUE]


def test_a_pretty_printed_fenced_block_is_read() -> None:
    assert issues(f"```json\n{json.dumps(GOOD, indent=4)}\n```") == [ISSUE]


def test_the_first_of_several_fenced_blocks_wins() -> None:
    text = f"```json\n{GOOD_TEXT}\n```\nor\n```json\n{json.dumps(OTHER)}\n```"
    assert issues(text) == [ISSUE]


def test_a_fenced_block_beats_an_object_earlier_in_the_prose() -> None:
    text = f"The old value was {json.dumps(OTHER)}; the new one:\n```\n{GOOD_TEXT}\n```"
    assert issues(text) == [ISSUE]


def test_a_fenced_block_with_a_comment_line_yields_its_object() -> None:
    assert issues(f"```json\n// the critique\n{GOOD_TEXT}\n```") == [ISSUE]


def test_an_unclosed_fence_is_skipped_for_the_next_method() -> None:
    assert issues(f"```json\n{GOOD_TEXT}\n") == [ISSUE]
    error = no_json("```json\nnot json at all")
    assert error.extraction_methods_attempted == ALL_STRING_METHODS


def test_a_fenced_block_without_json_falls_through_to_the_prose() -> None:
    assert issues(f"```python\nprint('hi')\n```\nand the answer is {GOOD_TEXT}") == [ISSUE]


# ---- 3. embedded object (FR-013E, FR-013K) ---------------------------------------------------


def test_an_object_embedded_in_prose_is_found() -> None:
    assert issues(f"After reviewing the output, my critique is {GOOD_TEXT} Hope this helps.") == [
        ISSUE
    ]


def test_nested_objects_are_matched_as_a_whole() -> None:
    nested = {"issues": [ISSUE], "meta": {"a": {"b": {"c": [1, {"d": 2}]}}}}
    assert issues(f"prefix {json.dumps(nested)} suffix") == [ISSUE]


def test_braces_and_escaped_quotes_inside_strings_do_not_confuse_matching() -> None:
    tricky = dict(ISSUE, problem='uses "{" and "}" and \\" and {"fake": 1}')
    text = "Critique: " + json.dumps({"issues": [tricky]}) + " } trailing brace"
    assert issues(text) == [tricky]


def test_the_first_of_several_objects_wins() -> None:
    assert issues(f"first {GOOD_TEXT} then {json.dumps(OTHER)}") == [ISSUE]


def test_trailing_text_after_the_object_is_ignored() -> None:
    assert issues(GOOD_TEXT + "\n\nLet me know if you need more.") == [ISSUE]


def test_a_brace_group_that_is_not_json_is_skipped() -> None:
    assert issues(f"Use {{curly}} braces; {{'single': 'quotes'}}; real: {GOOD_TEXT}") == [ISSUE]


def test_an_unbalanced_object_yields_the_complete_one_inside_it() -> None:
    assert issues('{"broken": ' + GOOD_TEXT) == [ISSUE]


# ---- 4. the whole text (FR-013F) -------------------------------------------------------------


def test_raw_json_is_parsed() -> None:
    assert issues(GOOD_TEXT) == [ISSUE]
    assert issues(f"\n\n  {json.dumps(GOOD, indent=2)}  \n") == [ISSUE]


def test_the_whole_text_is_the_last_resort() -> None:
    # No fence and no object: only direct parsing finds this (a list), and it does not fit.
    assert extract_json("[1, 2]") == [1, 2]
    with pytest.raises(ValidationError):
        REGISTRY.validate_output(CRITIQUE, "[1, 2]")


# ---- nothing found vs. wrong JSON (FR-013G, FR-013J, SC-003B) --------------------------------


@pytest.mark.parametrize(
    "response",
    [
        "",
        "   \n ",
        "I could not produce a critique.",
        "{not json}",
        '{"issues": [',
        "```\n```",
        "{" * 5000,
        '{"a":' * 3000,
    ],
)
def test_no_extractable_json_is_an_extraction_error_naming_the_methods(response: str) -> None:
    error = no_json(response)
    assert error.extraction_methods_attempted == ALL_STRING_METHODS
    for method in ALL_STRING_METHODS:
        assert method in str(error)
    assert CRITIQUE.value in str(error)


@pytest.mark.parametrize(
    "response",
    [
        '{"issues": "not a list"}',
        '```json\n{"issues": [{"rule_id": "r1"}]}\n```',
        {"text": '{"issues": [{"problem": 1}]}'},
        "null",
    ],
)
def test_json_that_does_not_fit_is_a_validation_error(response: str | dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        REGISTRY.validate_output(CRITIQUE, response)
    assert not isinstance(caught.value, JSONExtractionError)


def test_a_validation_error_names_the_bad_field() -> None:
    reply = json.dumps(
        {
            "converged": "maybe",
            "completeness_score": 2,
            "coherence_score": 0.5,
            "consistency": {"plan_aligned": True, "step_aligned": True, "answer_aligned": True},
        }
    )
    with pytest.raises(ValidationError) as caught:
        REGISTRY.validate_output(PromptId.CONVERGENCE_ASSESSMENT_USER, reply)
    fields = {error["loc"][0] for error in caught.value.errors()}
    assert fields == {"converged", "completeness_score"}


def test_fields_the_contract_does_not_name_are_ignored() -> None:
    assert issues(json.dumps({"issues": [ISSUE], "confidence": "high"})) == [ISSUE]


# ---- which model ------------------------------------------------------------------------------


def test_a_free_form_prompt_has_no_output_model() -> None:
    with pytest.raises(NoOutputModelError) as caught:
        REGISTRY.validate_output(PromptId.REASONING_STEP_USER, GOOD_TEXT)
    assert caught.value.prompt_id is PromptId.REASONING_STEP_USER


def test_an_explicit_model_is_used_instead_of_the_prompts_own() -> None:
    output = REGISTRY.validate_output(PromptId.REASONING_STEP_USER, GOOD_TEXT, CritiqueOutput)
    assert isinstance(output, CritiqueOutput)
    reply = {
        "converged": True,
        "completeness_score": 1.0,
        "coherence_score": 1.0,
        "consistency": {"plan_aligned": True, "step_aligned": True, "answer_aligned": True},
    }
    repaired = REGISTRY.validate_output(
        PromptId.SUPERVISOR_REPAIR_JSON_USER, json.dumps(reply), ConvergenceAssessmentOutput
    )
    assert isinstance(repaired, ConvergenceAssessmentOutput)
    assert repaired.converged is True


def test_an_unknown_prompt_is_not_found() -> None:
    with pytest.raises(PromptNotFoundError):
        REGISTRY.validate_output("NO_SUCH_PROMPT", GOOD_TEXT)


def test_the_module_level_function_uses_the_default_registry() -> None:
    assert isinstance(validate_output(CRITIQUE, GOOD_TEXT), CritiqueOutput)
    with pytest.raises(JSONExtractionError):
        validate_output(CRITIQUE, "nothing here")


def test_validate_value_validates_a_found_value_as_validate_output_does() -> None:
    """`validate_output` is `extract_json` then `validate_value`: a caller that extracts once
    (llm/reply.py) validates exactly as the contract does, the same model and the same errors."""
    found = extract_json(f"Here: {GOOD_TEXT} done", CRITIQUE)
    assert dump_model(REGISTRY.validate_value(CRITIQUE, found)) == GOOD
    assert REGISTRY.validate_value(CRITIQUE, found) == REGISTRY.validate_output(CRITIQUE, GOOD_TEXT)
    with pytest.raises(ValidationError):
        REGISTRY.validate_value(CRITIQUE, {"issues": "none"})
    with pytest.raises(NoOutputModelError):
        REGISTRY.validate_value(PromptId.REASONING_STEP_USER, found)
    assert isinstance(
        REGISTRY.validate_value(PromptId.REASONING_STEP_USER, found, CritiqueOutput), CritiqueOutput
    )
