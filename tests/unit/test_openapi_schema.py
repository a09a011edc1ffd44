"""The HTTP API's OpenAPI document says what the API accepts: a plan given to it (a fork's, an
approval's) takes any step id a person writes, while the model's reply schema, which a
server's grammar enforces, keeps the step id's pattern (prompts.registry.STEP_ID_PATTERN).
The fuzzer in CI (.ci/run) sends what the document allows and fails on a mismatch."""

from __future__ import annotations

from typing import Any

import jsonschema

from aeonloop.gateway.http.openapi import openapi_document
from aeonloop.prompts.registry import STEP_ID_PATTERN, PlanGenerationOutput

PLAN = {"goal": "g", "steps": [{"step_id": "intro", "description": "d", "depends_on": ["x"]}]}


def _valid(document: dict[str, Any], model: str, body: object) -> bool:
    schema = {"$ref": f"#/components/schemas/{model}", "components": document["components"]}
    return jsonschema.Draft202012Validator(schema).is_valid(body)


def test_a_plan_given_to_the_api_takes_any_step_id_a_person_writes() -> None:
    document = openapi_document()
    assert _valid(document, "ForkRequest", {"plan": PLAN})
    assert _valid(document, "Approval", {"plan": PLAN})
    assert not _valid(document, "ForkRequest", {"plan": {"goal": "g", "steps": []}})
    assert STEP_ID_PATTERN not in str(document)


def test_the_models_reply_schema_keeps_the_step_id_pattern() -> None:
    schema = PlanGenerationOutput.model_json_schema()
    assert not jsonschema.Draft202012Validator(schema).is_valid({"plan": PLAN})
    sound = {"goal": "g", "steps": [{"step_id": "s1", "description": "d", "depends_on": []}]}
    assert jsonschema.Draft202012Validator(schema).is_valid({"plan": sound})
