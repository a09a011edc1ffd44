"""checks/json_schema.py: a text read as one JSON value and judged by a JSON Schema, whose
patterns run under the time bound and whose `$ref`s are never fetched."""

from __future__ import annotations

import json
from typing import Any

import pytest
from checks_support import CATASTROPHIC, LONG_TEXT, holds

from aeonloop.checks.running import run_check
from aeonloop.checks.types import (
    JsonCheck,
    parse_check,
)

# ---- json ---------------------------------------------------------------------------------------


def test_json_valid_fenced_and_invalid() -> None:
    assert holds({"type": "json"}, ' {"a": [1, 2]} ')
    assert holds({"type": "json"}, '```json\n{"a": 1}\n```')
    assert not holds({"type": "json"}, '{"a": 1,}')
    assert not holds({"type": "json"}, 'Here it is: {"a": 1}')
    assert not holds({"type": "json"}, "")


def test_json_schema() -> None:
    schema = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "pattern": "^[A-Z]"}},
    }
    check = {"type": "json", "json_schema": schema}
    assert holds(check, '{"name": "Ann"}')
    missing = run_check(parse_check(check), '{"age": 3}')
    assert not missing.held and "'name' is a required property" in missing.details
    wrong = run_check(parse_check(check), '{"name": "ann"}')
    assert not wrong.held and wrong.details.startswith("valid JSON, but at name:")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": CATASTROPHIC},
        # Under a `not`, a timed-out pattern must not read as a mismatch, hence "valid".
        {"not": {"type": "string", "pattern": CATASTROPHIC}},
        {"type": "object", "patternProperties": {CATASTROPHIC: {"type": "integer"}}},
    ],
)
def test_a_json_schemas_patterns_are_bounded_too(schema: dict[str, Any]) -> None:
    text = json.dumps({LONG_TEXT: 1}) if "patternProperties" in schema else json.dumps(LONG_TEXT)
    outcome = run_check(JsonCheck(json_schema=schema), text, timeout=0.05)
    assert not outcome.held
    assert outcome.details.endswith("ran out of its 0.05 s time bound; the check fails")


def test_json_refs_are_resolved_in_the_schema_alone() -> None:
    inner = {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}
    assert run_check(JsonCheck(json_schema=inner), '{"a": 1}').held
    assert not run_check(JsonCheck(json_schema=inner), '{"a": "x"}').held
    for ref in ("https://example.org/schema.json", "#/$defs/nowhere"):
        outcome = run_check(JsonCheck(json_schema={"$ref": ref}), '{"a": 1}')
        assert not outcome.held and outcome.details.startswith("the schema cannot be used")


def test_json_nested_past_the_interpreters_depth_fails_without_raising() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    outcome = run_check(JsonCheck(), deep)
    assert not outcome.held and "nested too deeply" in outcome.details


def test_a_json_schema_nested_too_deeply_is_a_value_error() -> None:
    schema: dict[str, Any] = {}
    inner = schema
    for _ in range(1000):
        inner["items"] = {}
        inner = inner["items"]
    with pytest.raises(ValueError, match="'json_schema' nests 1001 levels deep; at most 32"):
        parse_check({"type": "json", "json_schema": schema})


def test_an_unsound_json_schema_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a sound JSON Schema"):
        parse_check({"type": "json", "json_schema": {"type": 5}})
    with pytest.raises(ValueError, match=r"not a sound JSON Schema: '\(' is not a 'regex'"):
        parse_check({"type": "json", "json_schema": {"pattern": "("}})
