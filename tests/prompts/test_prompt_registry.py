"""Level 1 prompt tests (seed 000 FR-047): registration, schema, rendering and input validation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prompt_samples import JSON_PROMPTS, SAMPLE_INPUTS
from pydantic import ValidationError

from aeonloop.prompts import registry as registry_module
from aeonloop.prompts.compat import dump_model, model_fields, validate_model
from aeonloop.prompts.errors import (
    NoOutputModelError,
    PromptNotFoundError,
    RenderingError,
    TemplateNotFound,
)
from aeonloop.prompts.registry import (
    NONE_TEXT,
    PlanGenerationInput,
    PlanGenerationOutput,
    PromptDefinition,
    PromptId,
    PromptInput,
    PromptOutput,
    PromptRegistry,
    ReasoningStepInput,
    SystemPromptInput,
    default_registry,
)
from aeonloop.prompts.unified import TEMPLATES_DIR

REGISTRY = PromptRegistry()
USER_IDS = [p for p in PromptId if REGISTRY.get_definition(p).system_phase is None]
SYSTEM_IDS = [p for p in PromptId if REGISTRY.get_definition(p).system_phase is not None]
JSON_USER_IDS = [p for p in USER_IDS if p in JSON_PROMPTS]
# A format placeholder left in the text: `{name}`, `{name.attr}` or `{name[0]}`.
PLACEHOLDER = re.compile(r"\{[A-Za-z_][\w.\[\]]*\}")


def sample(prompt_id: PromptId) -> PromptInput:
    input_model = REGISTRY.get_definition(prompt_id).input_model
    return validate_model(input_model, SAMPLE_INPUTS[input_model])


# ---- Registration Invariant (FR-018) --------------------------------------------------------


@pytest.mark.parametrize("prompt_id", list(PromptId))
def test_every_prompt_id_is_registered(prompt_id: PromptId) -> None:
    definition = default_registry().get_definition(prompt_id)
    assert definition.prompt_id is prompt_id
    assert definition.description


def test_ids_resolve_by_their_string_value_too() -> None:
    assert REGISTRY.get_definition("PLAN_GENERATION_USER").prompt_id is (
        PromptId.PLAN_GENERATION_USER
    )


def test_unknown_id_is_prompt_not_found() -> None:
    with pytest.raises(PromptNotFoundError) as caught:
        REGISTRY.get_prompt("NO_SUCH_PROMPT", {})
    assert caught.value.prompt_id == "NO_SUCH_PROMPT"


def test_a_registry_without_the_definition_reports_it_missing() -> None:
    partial = PromptRegistry([REGISTRY.get_definition(PromptId.REASONING_STEP_USER)])
    with pytest.raises(PromptNotFoundError):
        partial.get_prompt(PromptId.PLAN_GENERATION_USER, PlanGenerationInput(request="x"))
    with pytest.raises(PromptNotFoundError):
        partial.validate_output(PromptId.PLAN_GENERATION_USER, "{}")


def test_an_id_cannot_be_defined_twice() -> None:
    definition = REGISTRY.get_definition(PromptId.REASONING_STEP_USER)
    with pytest.raises(ValueError, match="twice"):
        PromptRegistry([definition, definition])


# ---- Schema Invariant (FR-017) ----------------------------------------------------------------


@pytest.mark.parametrize("prompt_id", list(PromptId))
def test_every_prompt_has_an_input_model_and_json_ones_an_output_model(
    prompt_id: PromptId,
) -> None:
    definition = REGISTRY.get_definition(prompt_id)
    assert issubclass(definition.input_model, PromptInput)
    if prompt_id in JSON_PROMPTS:
        assert definition.output_model is JSON_PROMPTS[prompt_id]
        assert issubclass(definition.output_model, PromptOutput)
        assert definition.is_json
    else:
        assert definition.output_model is None, "free-form prompts have no output model"
        assert not definition.is_json


@pytest.mark.parametrize(
    "prompt_id", [p for p in SYSTEM_IDS if p is not PromptId.SUPERVISOR_REPAIR_SYSTEM]
)
def test_a_system_prompt_carries_the_output_model_of_its_user_prompt(prompt_id: PromptId) -> None:
    user_id = PromptId(prompt_id.value.replace("_SYSTEM", "_USER"))
    system = REGISTRY.get_definition(prompt_id)
    assert system.input_model is SystemPromptInput
    assert system.output_model is REGISTRY.get_definition(user_id).output_model


def test_the_supervisor_repair_system_prompt_frames_free_form_repairs() -> None:
    # SUPERVISOR_REPAIR_SYSTEM has no single user partner; the seed lists it as free-form.
    assert REGISTRY.get_definition(PromptId.SUPERVISOR_REPAIR_SYSTEM).output_model is None


@pytest.mark.parametrize("prompt_id", list(PromptId))
def test_output_schema_is_json_text_for_json_prompts_only(prompt_id: PromptId) -> None:
    output_model = REGISTRY.get_definition(prompt_id).output_model
    if output_model is None:
        with pytest.raises(NoOutputModelError):
            REGISTRY.output_schema(prompt_id)
        return
    schema = json.loads(REGISTRY.output_schema(prompt_id))
    assert set(schema.get("properties", {})) == set(model_fields(output_model))


# ---- Rendering (FR-007, FR-012) ----------------------------------------------------------------


@pytest.mark.parametrize("prompt_id", USER_IDS)
def test_every_user_prompt_renders_every_field_and_no_placeholder(prompt_id: PromptId) -> None:
    data = sample(prompt_id)
    text = REGISTRY.get_prompt(prompt_id, data)
    assert not PLACEHOLDER.search(text), PLACEHOLDER.findall(text)
    for name, value in SAMPLE_INPUTS[type(data)].items():
        for item in value if isinstance(value, list) else [value]:
            assert str(item) in text, f"field {name} does not reach the prompt"


@pytest.mark.parametrize("prompt_id", USER_IDS)
def test_a_dict_renders_like_the_model_instance(prompt_id: PromptId) -> None:
    data = sample(prompt_id)
    assert REGISTRY.get_prompt(prompt_id, dump_model(data)) == REGISTRY.get_prompt(prompt_id, data)


def test_lists_are_joined_and_empty_values_say_none() -> None:
    text = REGISTRY.get_prompt(
        PromptId.RECURSIVE_REFINEMENT_USER,
        {"request": "r", "plan": "{}", "issues": "i", "executed_step_ids": ["s1", "s2"]},
    )
    assert "must not be changed or removed: s1, s2" in text
    text = REGISTRY.get_prompt(
        PromptId.RECURSIVE_REFINEMENT_USER, {"request": "r", "plan": "{}", "issues": "i"}
    )
    assert f"must not be changed or removed: {NONE_TEXT}" in text


def test_braces_in_input_values_are_text_not_placeholders() -> None:
    text = REGISTRY.get_prompt(
        PromptId.PLAN_GENERATION_USER, {"request": "print {request} and {0} and {"}
    )
    assert "print {request} and {0} and {" in text


@pytest.mark.parametrize("prompt_id", SYSTEM_IDS)
def test_every_system_prompt_is_its_base_template_file(prompt_id: PromptId) -> None:
    phase = REGISTRY.get_definition(prompt_id).system_phase
    base = (TEMPLATES_DIR / f"BASE-{phase}.md").read_text(encoding="utf-8").strip()
    assert REGISTRY.get_prompt(prompt_id, SystemPromptInput(agent="openai")) == base
    assert REGISTRY.get_prompt(prompt_id, {}) == base  # agent defaults to BASE
    assert not PLACEHOLDER.search(base)


def test_system_phases_are_the_ids_in_lower_case() -> None:
    phases = {REGISTRY.get_definition(p).system_phase for p in SYSTEM_IDS}
    assert phases == {
        "plan_generation",
        "reasoning_step",
        "validation_semantic",
        "convergence_assessment",
        "pass_evaluation",
        "taskprofile_inference",
        "taskprofile_update",
        "recursive_refinement",
        "supervisor_repair",
        "answer_synthesis",
        "rule_critique",
        "checks_prepare",
        "answer_draft",
        "answer_rewrite",
    }
    shipped = {path.name for path in TEMPLATES_DIR.glob("BASE-*.md")}
    assert shipped == {f"BASE-{phase}.md" for phase in phases}


def test_a_system_prompt_prefers_the_agent_template(tmp_path: Path) -> None:
    (tmp_path / "BASE-plan_generation.md").write_text("base text\n")
    (tmp_path / "openai-plan_generation.md").write_text("openai text\n")
    registry = PromptRegistry(templates_dir=tmp_path)
    prompt_id = PromptId.PLAN_GENERATION_SYSTEM
    assert registry.get_prompt(prompt_id, SystemPromptInput(agent="openai")) == "openai text"
    assert registry.get_prompt(prompt_id, SystemPromptInput(agent="offline")) == "base text"


def test_a_system_prompt_without_a_template_file_is_an_error(tmp_path: Path) -> None:
    registry = PromptRegistry(templates_dir=tmp_path)
    with pytest.raises(TemplateNotFound) as caught:
        registry.get_prompt(PromptId.ANSWER_SYNTHESIS_SYSTEM, SystemPromptInput(agent="openai"))
    assert caught.value.phase == "answer_synthesis"


# ---- JSON prompts say exactly what they want ---------------------------------------------------


@pytest.mark.parametrize("prompt_id", JSON_USER_IDS)
def test_a_json_prompt_shows_a_valid_example_with_every_field(prompt_id: PromptId) -> None:
    definition = REGISTRY.get_definition(prompt_id)
    text = REGISTRY.get_prompt(prompt_id, sample(prompt_id))
    assert "Reply with only the JSON object" in text
    if prompt_id is PromptId.SUPERVISOR_REPAIR_JSON_USER:
        # Its shape is the schema it is given, which the prompt shows instead of an example.
        assert SAMPLE_INPUTS[definition.input_model]["expected_schema"] in text
        return
    example = definition.example_output
    assert example is not None
    assert json.dumps(example, separators=registry_module.EXAMPLE_SEPARATORS) in text
    # Validating and dumping gives the example back only if it names every field, nested too.
    assert dump_model(validate_model(definition.output_model, example)) == example
    # And the registry's own extraction reads the example as the reply it asks for.
    assert dump_model(REGISTRY.validate_output(prompt_id, json.dumps(example))) == example


@pytest.mark.parametrize("prompt_id", [p for p in USER_IDS if p not in JSON_PROMPTS])
def test_a_free_form_prompt_has_no_example_and_asks_for_no_json_object(
    prompt_id: PromptId,
) -> None:
    definition = REGISTRY.get_definition(prompt_id)
    assert definition.example_output is None
    assert "JSON object" not in REGISTRY.get_prompt(prompt_id, sample(prompt_id))


# ---- Input validation (FR-012) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt_id", "bad_input"),
    [
        (PromptId.PLAN_GENERATION_USER, {}),  # missing request
        (PromptId.PLAN_GENERATION_USER, {"request": ""}),  # empty request
        (PromptId.PLAN_GENERATION_USER, {"request": "x", "reqest": "typo"}),  # unknown field
        (PromptId.REASONING_STEP_USER, {**SAMPLE_INPUTS[ReasoningStepInput], "pass_number": 0}),
        (PromptId.VALIDATION_SEMANTIC_USER, {"request": "x"}),  # missing artifact fields
        (
            PromptId.VALIDATION_SEMANTIC_USER,
            {"request": "x", "artifact_kind": "poem", "artifact": "a"},  # not an allowed kind
        ),
        (PromptId.ANSWER_SYNTHESIS_SYSTEM, {"agent": ""}),
        (PromptId.PLAN_GENERATION_USER, "just a string"),
    ],
)
def test_bad_input_is_a_validation_error_before_rendering(
    prompt_id: PromptId, bad_input: object
) -> None:
    with pytest.raises(ValidationError):
        REGISTRY.get_prompt(prompt_id, bad_input)  # type: ignore[arg-type]


def test_another_prompts_input_model_is_refused() -> None:
    with pytest.raises(ValidationError):
        REGISTRY.get_prompt(PromptId.REASONING_STEP_USER, PlanGenerationInput(request="x"))


def test_an_instance_of_exactly_the_input_model_is_not_validated_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated: list[type] = []

    def counting(model: type, data: object) -> object:
        validated.append(model)
        return validate_model(model, data)

    monkeypatch.setattr(registry_module, "validate_model", counting)
    data = sample(PromptId.REASONING_STEP_USER)
    text = REGISTRY.get_prompt(PromptId.REASONING_STEP_USER, data)
    assert validated == []
    assert REGISTRY.get_prompt(PromptId.REASONING_STEP_USER, dump_model(data)) == text
    assert validated == [ReasoningStepInput]


def test_bad_input_is_still_refused_in_every_form() -> None:
    bad = {**SAMPLE_INPUTS[ReasoningStepInput], "pass_number": 0}

    class Looser(ReasoningStepInput):  # a subclass may loosen a field, so it is validated again
        pass_number: int = 0

    with pytest.raises(ValidationError):
        REGISTRY.get_prompt(PromptId.REASONING_STEP_USER, Looser(**bad))
    with pytest.raises(ValidationError):
        REGISTRY.get_prompt(PromptId.REASONING_STEP_USER, bad)
    # An instance of exactly the input model cannot hold bad data: building one validates it,
    # and it is frozen afterwards.
    with pytest.raises(ValidationError):
        ReasoningStepInput(**bad)
    data = sample(PromptId.REASONING_STEP_USER)
    with pytest.raises((TypeError, ValidationError)):  # Pydantic 1 raises TypeError
        data.pass_number = 0  # type: ignore[misc]


# ---- Definitions check themselves at import --------------------------------------------------


def _definition(template: str, **overrides: object) -> PromptDefinition:
    fields: dict[str, object] = {
        "prompt_id": PromptId.PLAN_GENERATION_USER,
        "template": template,
        "input_model": PlanGenerationInput,
        "output_model": None,
        "description": "test",
    }
    fields.update(overrides)
    return PromptDefinition(**fields)  # type: ignore[arg-type]


def test_a_template_naming_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fields"):
        _definition("Goal: {goal}")


def test_an_unescaped_brace_in_a_template_is_refused() -> None:
    with pytest.raises(ValueError):
        _definition('Reply like {"plan": 1}')


def test_a_system_prompt_takes_its_text_from_a_file_only() -> None:
    with pytest.raises(ValueError, match="template file"):
        _definition("inline", input_model=SystemPromptInput, system_phase="plan_generation")


def test_an_example_must_fit_the_output_model() -> None:
    with pytest.raises(ValidationError):
        _definition("{request}", output_model=PlanGenerationOutput, example_output={"plan": {}})
    with pytest.raises(ValueError, match="free-form"):
        _definition("{request}", example_output={"plan": {"goal": "g"}})


def test_a_template_that_fails_to_render_is_a_rendering_error() -> None:
    registry = PromptRegistry([_definition("Request: {request:d}")])
    with pytest.raises(RenderingError) as caught:
        registry.get_prompt(PromptId.PLAN_GENERATION_USER, {"request": "x"})
    assert caught.value.prompt_id is PromptId.PLAN_GENERATION_USER
    assert isinstance(caught.value.error, ValueError)


def test_every_user_prompt_has_a_reply_budget() -> None:
    """Issue 24: every call sends a reply budget, so every user prompt's contract names one."""
    registry = PromptRegistry()
    for prompt_id in PromptId:
        definition = registry.get_definition(prompt_id)
        if definition.system_phase is None:
            assert 100 <= registry.reply_tokens(prompt_id) <= 4_000, prompt_id
        else:
            with pytest.raises(ValueError):
                registry.reply_tokens(prompt_id)


#: Fields whose values are a closed list: the other value there.
_OTHER_CHOICE = {"artifact_kind": "pass"}
#: Fields the host gives alike in every call of the prompt, in every run: PREPARE's check
#: vocabulary (the phases pass what aeonloop.checks writes from its types). They belong to the
#: fixed text, before the data.
_HOST_CONSTANTS = frozenset({"check_types"})


def _other(name: str, value: object) -> object:
    """Another value of the same kind, for a second call of the same prompt."""
    if name in _OTHER_CHOICE:
        return _OTHER_CHOICE[name]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2
    if isinstance(value, list):
        return [*value, *value]
    return f"{value} again"


@pytest.mark.parametrize("prompt_id", [p for p in USER_IDS if p in JSON_PROMPTS])
def test_a_json_prompt_gives_its_fixed_text_first_and_its_data_last(prompt_id: PromptId) -> None:
    """Issue 33: every call of a JSON prompt, in every run, begins with the same bytes up to
    its data (the task, the reply's shape and its field rules), so a server that caches prompt
    prefixes processes them once. Two calls whose every field differs (but the host's constants)
    share all of that, the host's constants included."""
    given = SAMPLE_INPUTS[REGISTRY.get_definition(prompt_id).input_model]
    first = REGISTRY.get_prompt(prompt_id, given)
    other = {n: v if n in _HOST_CONSTANTS else _other(n, v) for n, v in given.items()}
    second = REGISTRY.get_prompt(prompt_id, other)
    fixed = first[: first.index("and no Markdown fences.")]
    assert second.startswith(fixed)
    assert all(str(given[name]) in fixed for name in _HOST_CONSTANTS.intersection(given))


# ---- What the schema carries (issue 40) ------------------------------------------------------


def _step_id_schemas(schema: object) -> list[dict]:
    """Every schema of a field named like a step id (step_id, target_step_id, depends_on,
    used_step_ids) in `schema`, nested ones included."""
    found: list[dict] = []
    if isinstance(schema, dict):
        for name, field in schema.get("properties", {}).items():
            if name in {"step_id", "target_step_id", "depends_on", "used_step_ids"}:
                found.append(field)
        for value in schema.values():
            found += _step_id_schemas(value)
    elif isinstance(schema, list):
        for item in schema:
            found += _step_id_schemas(item)
    return found


def _patterns(schema: object) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["pattern"]] if "pattern" in schema else []
        return own + [p for value in schema.values() for p in _patterns(value)]
    if isinstance(schema, list):
        return [p for item in schema for p in _patterns(item)]
    return []


@pytest.mark.parametrize(
    "prompt_id",
    [
        PromptId.PLAN_GENERATION_USER,
        PromptId.RECURSIVE_SUBPLAN_GENERATION_USER,
        PromptId.RECURSIVE_REFINEMENT_USER,
        PromptId.VALIDATION_SEMANTIC_USER,
        PromptId.PASS_EVALUATION_USER,
        PromptId.ANSWER_SYNTHESIS_USER,
    ],
)
def test_step_ids_are_patterned_in_the_schema_a_server_enforces(prompt_id: PromptId) -> None:
    """Issue 40: a server that makes a grammar of the schema (llama.cpp) lets a model write a
    step id only as s1, s2, ... (a sub-plan's s2.1): never `][`, on which outside slices'
    plans failed. Every step-id field of the reply carries the pattern."""
    fields = _step_id_schemas(json.loads(REGISTRY.output_schema(prompt_id)))
    assert fields
    for field in fields:
        (pattern,) = set(_patterns(field))
        assert pattern == registry_module.STEP_ID_PATTERN
    allowed = re.compile(registry_module.STEP_ID_PATTERN)
    assert all(allowed.search(good) for good in ("s1", "s12", "s2.1", "s2.1.3"))
    assert not any(allowed.search(bad) for bad in ("][", "s1,", "step 1", "s", "s2.", ""))


def test_the_pattern_narrows_the_server_not_the_host() -> None:
    """The host still takes any id of a reply from a server that does not enforce the schema
    (prompts.echo judges whether it is a clean one), so the pattern is the schema's alone."""
    plan = {"plan": {"goal": "g", "steps": [{"step_id": "collect", "description": "d"}]}}
    parsed = REGISTRY.validate_output(PromptId.PLAN_GENERATION_USER, json.dumps(plan))
    assert parsed.plan.steps[0].step_id == "collect"


def test_the_schema_as_text_comes_after_the_system_prompt_without_titles() -> None:
    schema = json.loads(REGISTRY.output_schema(PromptId.PLAN_GENERATION_USER))
    text = registry_module.schema_in_text("SYSTEM", schema)
    assert text.startswith("SYSTEM\n\n")
    shown = json.loads(text[text.index("{") :])
    assert '"title"' not in json.dumps(shown)
    assert shown == registry_module._untitled(schema)
    assert _patterns(shown)
