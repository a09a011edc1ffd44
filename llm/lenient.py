"""Cheap local repairs of a JSON reply, tried before the one repair call to the LLM.

The strict reading (llm.reply: the contract's extraction, docs/requirements.md FR-013A..FR-013K,
then validation) raises, it never repairs. Real models miss it in small, mechanical
ways that cost a whole LLM call to fix: trailing commas, single-quoted Python dicts,
`True`/`None`, an unclosed fence, `"Moderate"` where the schema says `moderate`, `"add"` for
`ADD`. This layer fixes exactly those, locally:

1. the JSON value: what the strict extraction found, and what `json-repair` makes of the reply
   (it parses lenient JSON and Python literals, and finds the object inside prose or fences);
2. enum values folded to the schema's spelling when they match it ignoring case and white space;
3. a number outside the schema's range moved to the nearest bound (`reasoning_depth` 0 becomes
   1, a `coherence_score` of 2.5 becomes 1.0). Grammar-constrained servers (llama.cpp's,
   llama-cpp-python's, Ollama's `format`) enforce a schema's structure and enums but not its
   numeric ranges, and small models answer on scales of their own; the adapter sends those
   servers ranges they can enforce (llm.schemas), and this catches the servers that take the
   schema as it is.

The values are handed back to llm.reply, which validates them as it validated the strict find, so
extraction and validation stay in one place and a value that still does not fit fails there,
loudly.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import json_repair
from pydantic import BaseModel

from aeonloop.prompts.compat import json_schema

Schema = dict[str, Any]


def repaired_values(found: Any, reply: str, model: type[BaseModel]) -> list[dict[str, Any]]:
    """The reply's JSON object with mechanical faults fixed, best guess first.

    Two readings, because each can be right where the other is wrong: `found`, the strict
    extraction's value (right when only enum case is off, and when prose around the object has
    braces), and json-repair's (right when the outer object is broken, where the strict search
    would settle on an inner object that parses).
    """
    schema = schema_of(model)
    values: list[dict[str, Any]] = []
    for value in (found, _repaired(reply)):
        if isinstance(value, dict):
            folded = fold_to_schema(value, schema, schema.get("$defs", {}))
            if folded not in values:
                values.append(folded)
    return values


@lru_cache(maxsize=64)
def schema_of(model: type[BaseModel]) -> Schema:
    """The output model's JSON schema (each model's once: it never changes in a process)."""
    return json_schema(model)


def _repaired(reply: str) -> Any:
    try:
        return json_repair.loads(reply)
    except (ValueError, RecursionError):  # json-repair gives up on some inputs by raising
        return None


def fold_to_schema(value: Any, schema: Schema, defs: Schema) -> Any:
    """`value` with each string where the schema allows an enum spelled as the enum spells it,
    and each number the schema bounds moved inside its bounds."""
    schema = _resolve(schema, defs)
    if isinstance(value, str):
        return _enum_member(value, schema, defs)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _within_bounds(value, schema, defs)
    if isinstance(value, dict):
        properties = _properties(schema, defs)
        return {
            key: fold_to_schema(item, properties[key], defs) if key in properties else item
            for key, item in value.items()
        }
    if isinstance(value, list):
        items = _items(schema, defs)
        return [fold_to_schema(item, items, defs) for item in value] if items else value
    return value


def _resolve(schema: Schema, defs: Schema) -> Schema:
    ref = schema.get("$ref", "")
    return defs.get(ref.rsplit("/", 1)[-1], schema) if ref else schema


def _variants(schema: Schema, defs: Schema) -> list[Schema]:
    """The schema itself, or each branch of an anyOf/oneOf (Optional fields are anyOf)."""
    branches = schema.get("anyOf") or schema.get("oneOf")
    return [_resolve(branch, defs) for branch in branches] if branches else [schema]


def _enum_member(text: str, schema: Schema, defs: Schema) -> str:
    wanted = text.strip().casefold()
    for variant in _variants(schema, defs):
        members = variant.get("enum") or ([variant["const"]] if "const" in variant else [])
        for member in members:
            if isinstance(member, str) and member.casefold() == wanted:
                return member
    return text


def _within_bounds(number: float, schema: Schema, defs: Schema) -> float:
    for variant in _variants(schema, defs):
        if variant.get("type") in ("integer", "number"):
            low, high = variant.get("minimum"), variant.get("maximum")
            if low is not None and number < low:
                return low
            if high is not None and number > high:
                return high
            return number
    return number


def _properties(schema: Schema, defs: Schema) -> Schema:
    for variant in _variants(schema, defs):
        if "properties" in variant:
            return variant["properties"]
    return {}


def _items(schema: Schema, defs: Schema) -> Schema | None:
    for variant in _variants(schema, defs):
        if isinstance(variant.get("items"), dict):
            return variant["items"]
    return None
