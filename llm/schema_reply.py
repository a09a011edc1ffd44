"""The offline model's reply to any prompt, made from the prompt's contract alone.

A JSON prompt's reply is the smallest value its output model's JSON schema allows, filled in
field by field: a default where the schema gives one, the first member of an enum, the lower
bound of a range, as many items as a list must have, and a short text for a required string.
A free-form prompt's reply is one sentence that says no LLM was called. So a prompt added to the
registry gets a valid offline reply with nothing written for it (`llm/offline.py` keeps
readable replies only for the prompts the main job shows; `tests/llm/test_llm_offline.py::
test_every_prompt_gets_a_valid_reply_from_its_schema`).

The texts are data, not prompts: no field's description is copied (a reply repeating its
prompt's own words is unusable, prompts.echo), and an id field gets an id as a plan gives one.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from aeonloop.llm.lenient import schema_of
from aeonloop.prompts.echo import is_id_field
from aeonloop.prompts.registry import PromptInput

Schema = dict[str, Any]

#: What a required text field holds: says where it came from, in words of no prompt.
OFFLINE_TEXT = "Offline model (no LLM was called)."
#: What a required id field holds: an id as a plan writes one.
OFFLINE_ID = "s1"


def schema_reply(model: type[BaseModel]) -> dict[str, Any]:
    """The smallest JSON object `model`'s schema allows, as the offline model's reply."""
    schema = schema_of(model)
    value = _value(schema, schema.get("$defs", {}), "")
    return value if isinstance(value, dict) else {}


def free_form_reply(data: PromptInput) -> str:
    """A free-form prompt's reply: what the offline model was asked, and that it called no LLM."""
    request = " ".join(str(getattr(data, "request", "") or "").split())
    return f"{OFFLINE_TEXT} Asked: {request}" if request else f"{OFFLINE_TEXT} Nothing was asked."


def _value(schema: Schema, defs: Schema, name: str) -> Any:
    """The smallest value `schema` allows for the field `name`."""
    schema = _resolved(schema, defs)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        typed = [b for b in branches if _resolved(b, defs).get("type") != "null"]
        return _value(typed[0], defs, name) if typed else None
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return _object(schema, defs)
    if kind == "array":
        item = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return [_value(item, defs, name) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return OFFLINE_ID if is_id_field(name) else OFFLINE_TEXT


def _object(schema: Schema, defs: Schema) -> dict[str, Any]:
    """Every property the schema names (its default where it has one): a reply says all a
    phase reads, as a model's would."""
    properties = schema.get("properties", {})
    return {key: _value(spec, defs, key) for key, spec in properties.items()}


def _resolved(schema: Schema, defs: Schema) -> Schema:
    ref = schema.get("$ref", "")
    return defs.get(ref.rsplit("/", 1)[-1], schema) if ref else schema
