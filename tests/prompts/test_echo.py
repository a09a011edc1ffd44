"""prompts.echo: a reply that is Aeon's own text is found, and a reply that is the model's is not
(issue 32: SmolLM2 answered with the answer format's example, planned with its example goal,
and wrote the step id `s2,`).

This suite imports only `prompts`, pydantic, the standard library and pytest, so it runs under
Pydantic 1.10 too (FR-014A).
"""

from __future__ import annotations

from typing import Any

import pytest

from aeonloop.prompts.compat import json_schema, validate_model
from aeonloop.prompts.echo import (
    MIN_WORDS,
    clean_id,
    copied_placeholder,
    instruction_echo,
    is_id_field,
    quoted_instruction,
    unusable_reply,
)
from aeonloop.prompts.registry import (
    FinalAnswerOutput,
    PlanGenerationInput,
    PlanGenerationOutput,
    PromptDefinition,
    PromptId,
    PromptRegistry,
    default_registry,
)
from aeonloop.prompts.replies import names_no_tool
from aeonloop.prompts.unified import TEMPLATES_DIR

REGISTRY = default_registry()
JSON_IDS = [p for p in PromptId if REGISTRY.get_definition(p).example_output is not None]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _long(texts: list[str]) -> list[str]:
    return [t for t in texts if len(t.split()) >= MIN_WORDS]


# ---- What Aeon shows a model is found when it comes back ----------------------------------------


@pytest.mark.parametrize("prompt_id", JSON_IDS)
def test_every_example_value_of_a_reply_format_is_found(prompt_id: PromptId) -> None:
    example = REGISTRY.get_definition(prompt_id).example_output
    values = _long(_strings(example))
    assert values, f"{prompt_id} shows no example text worth checking"
    for value in values:
        assert instruction_echo(value) is not None, value


@pytest.mark.parametrize("prompt_id", JSON_IDS)
def test_every_field_description_of_a_reply_schema_is_found(prompt_id: PromptId) -> None:
    model = REGISTRY.get_definition(prompt_id).output_model
    assert model is not None
    descriptions = _long(_described(json_schema(model)))
    assert descriptions, f"{prompt_id}'s schema says what no field is"
    for description in descriptions:
        assert instruction_echo(description) is not None, description


def _described(schema: Any) -> list[str]:
    if isinstance(schema, list):
        return [d for item in schema for d in _described(item)]
    if not isinstance(schema, dict):
        return []
    said = schema.get("description")
    own = [said] if isinstance(said, str) else []
    return own + [
        d for key, item in schema.items() if key != "description" for d in _described(item)
    ]


def test_a_copied_instruction_is_found_and_named() -> None:
    step_prompt = REGISTRY.get_definition(PromptId.REASONING_STEP_USER).template
    opening = step_prompt.split("\n\n", 1)[0]  # the step prompt's instructions, as sent
    echoed = instruction_echo(opening)
    assert echoed is not None and echoed in opening


def test_a_system_template_copied_back_is_found() -> None:
    text = (TEMPLATES_DIR / "BASE-answer_synthesis.md").read_text(encoding="utf-8")
    paragraph = text.split("\n\n")[-1]  # its last paragraph (issue 40 left it one)
    assert instruction_echo(paragraph) is not None


def test_punctuation_and_case_do_not_hide_a_copy() -> None:
    goal = REGISTRY.get_definition(PromptId.PLAN_GENERATION_USER).example_output["plan"]["goal"]
    assert instruction_echo(goal.upper().replace(",", "").rstrip(".") + "!") is not None


def test_a_prompt_added_to_the_registry_is_covered_without_a_list() -> None:
    sentence = "Write the tidal constants of every harbour along the northern coast"
    definition = PromptDefinition(
        prompt_id=PromptId.PLAN_GENERATION_USER,
        template=sentence + ".\n\nRequest:\n{request}",
        input_model=PlanGenerationInput,
        output_model=None,
        description="test",
    )
    registry = PromptRegistry([definition])
    assert instruction_echo(sentence, registry) == sentence + "."
    assert instruction_echo(sentence, default_registry()) is None


# ---- The model's own words are not -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Paris",
        "The capital of France is Paris.",
        "Tides happen because the Moon's gravity pulls the oceans towards it, and the Earth "
        "turns beneath the two bulges this raises, so most coasts see two high tides a day.",
        "BLOCKED: the request does not say which year the costs are for.",
        "s1",
        "moderate",
        "1. Preheat the oven to 200 degrees.\n2. Mix the flour and the butter.\n3. Bake it.",
    ],
)
def test_the_models_own_words_are_not_an_echo(text: str) -> None:
    assert instruction_echo(text) is None
    assert quoted_instruction(text) is None


def test_work_that_quotes_one_instruction_is_still_work_but_not_publishable() -> None:
    goal = REGISTRY.get_definition(PromptId.PLAN_GENERATION_USER).example_output["plan"]["goal"]
    work = (
        "The Moon's gravity pulls the ocean on the side of the Earth facing it, and inertia "
        "leaves a second bulge on the far side; as the Earth turns, a coast passes through "
        "both bulges, which is why most places see two high tides and two low tides a day."
    )
    assert instruction_echo(f"{work} {goal}") is None  # mostly the model's
    # A paragraph of its own that is a copy is what a published answer is held to.
    assert quoted_instruction(f"{work}\n\n{goal}") == goal


def test_a_host_opening_does_not_hide_a_copied_answer() -> None:
    example = REGISTRY.get_definition(PromptId.ANSWER_SYNTHESIS_USER).example_output
    copied = example["answer_text"]
    published = (
        "Degraded answer: the loop stopped after 2 passes without converging; step s1 failed. "
        "What follows rests only on the data that was available and may be incomplete.\n\n"
        f"{copied}"
    )
    assert quoted_instruction(published) is not None


def test_words_the_request_has_are_the_users_not_aeons() -> None:
    """A user whose request is what an example happens to be about gets steps in its words."""
    steps = REGISTRY.get_definition(PromptId.PLAN_GENERATION_USER).example_output["plan"]["steps"]
    step = steps[0]["description"]
    assert instruction_echo(step) is not None
    assert instruction_echo(step, request=f"First, {step.lower()} Then compare.") is None
    plan = validate_model(
        PlanGenerationOutput,
        {"plan": {"goal": "Compare the two.", "steps": [{"step_id": "s1", "description": step}]}},
    )
    assert unusable_reply(plan) is not None
    assert unusable_reply(plan, request=step) is None


# ---- Ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["s1", "s2.1", "r-1", "step_3", "no swearing", "S10"])
def test_clean_ids(value: str) -> None:
    assert clean_id(value)


@pytest.mark.parametrize(
    "value", ["", "s2,", " s2", "s2 ", '"s2"', "s1, s2", "[s1]", "s2.", "s3:", "s1;s2", "s1\ns2"]
)
def test_ids_that_are_not_clean(value: str) -> None:
    assert not clean_id(value)


def test_id_fields_are_those_named_for_ids() -> None:
    assert all(map(is_id_field, ["step_id", "target_step_id", "rule_id", "used_step_ids"]))
    assert is_id_field("depends_on")
    assert not any(map(is_id_field, ["description", "goal", "idea", "tool"]))


# ---- A validated reply that is still unusable --------------------------------------------------


def _plan(**step: Any) -> PlanGenerationOutput:
    first = {"step_id": "s1", "description": "Find the tide tables for Brest.", **step}
    second = {"step_id": "s2", "description": "Explain the spring tides at Brest."}
    return validate_model(
        PlanGenerationOutput,
        {"plan": {"goal": "Explain the tides at Brest.", "steps": [first, second]}},
    )


def test_a_plan_of_the_models_own_is_usable() -> None:
    assert unusable_reply(_plan(depends_on=[])) is None


def test_an_unclean_dependency_makes_the_reply_unusable_and_names_it() -> None:
    said = unusable_reply(_plan(depends_on=["s2,"]))
    assert said is not None
    assert "plan.steps[0].depends_on[0]" in said and "'s2,'" in said and "clean id" in said


def test_an_empty_entry_in_a_list_of_ids_names_nothing_and_is_let_be() -> None:
    """SmolLM2 wrote `"used_step_ids": [""]` for "none" (CI, issue 32): the host keeps only the
    ids it knows, so the empty entry costs no repair call; an id beside it is still held to
    being clean."""
    answer = validate_model(
        FinalAnswerOutput,
        {"answer_text": "Paris.", "confidence": 0.9, "used_step_ids": ["", "s1"]},
    )
    assert unusable_reply(answer) is None
    said = unusable_reply(_plan(depends_on=["s2", "s2,"]))
    assert said is not None and "depends_on[1]" in said


def test_a_copied_goal_makes_the_reply_unusable_and_names_it_without_quoting_it() -> None:
    """The reason reaches notes and host-made answers: it must not carry the copy on."""
    example = REGISTRY.get_definition(PromptId.PLAN_GENERATION_USER).example_output
    plan = validate_model(PlanGenerationOutput, example)
    said = unusable_reply(plan)
    assert said is not None and said.startswith("plan.goal repeats")
    assert example["plan"]["goal"] not in said


def test_a_copied_answer_is_unusable() -> None:
    example = REGISTRY.get_definition(PromptId.ANSWER_SYNTHESIS_USER).example_output
    answer = validate_model(FinalAnswerOutput, {**example, "used_step_ids": []})
    said = unusable_reply(answer)
    assert said is not None and said.startswith("answer_text repeats")


def test_a_tools_arguments_are_its_data_not_the_models_words() -> None:
    assert unusable_reply(_plan(tool="lookup", arguments={"harbour_id": "FR, Brest"})) is None


# ---- A tool named as no tool -------------------------------------------------------------------


@pytest.mark.parametrize("tool", [None, "", " ", "none", "None", "NULL", "n/a", "N/A", "no tool"])
def test_a_tool_named_as_none_is_no_tool(tool: str | None) -> None:
    assert names_no_tool(tool)


@pytest.mark.parametrize("tool", ["search", "none_such", "nonexistent", "calculator"])
def test_a_real_tool_name_is_a_tool(tool: str) -> None:
    assert not names_no_tool(tool)


@pytest.mark.parametrize(
    ("rule_id", "said", "copied"),
    [
        ("request.example-bullets", "Explain tides in a table.", "example"),
        ("request.your-code.example", "Write a SQL query.", "example"),
        ("request.bullets", "Explain tides in three bullet points.", None),
        ("request.example", "Give an example of a table.", None),  # the request's own word
    ],
)
def test_an_id_built_from_the_examples_placeholder_is_a_copy(
    rule_id: str, said: str, copied: str | None
) -> None:
    """PREPARE's example names its check `request.example-bullets`; "example" is said nowhere
    else in the example, so it is a placeholder; "request" is said by the request text given."""
    found = copied_placeholder(rule_id, PromptId.CHECKS_PREPARE_USER, said=f"request. {said}")
    assert found == copied
