"""The offline model's way with tools: the tools a request asks for, with the arguments it
gives them, and a tool call repaired as a model would repair it.

A request asks for a tool by saying "tool" and the tool's name ("use the tool add with a=2
b=3"), each argument as a `name=value` pair. The texts here are model *replies*, i.e. data, not
prompts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aeonloop.prompts.registry import RepairToolCallInput, ToolOffer

TOOL_WORD = re.compile(r"\btools?\b", re.IGNORECASE)
# name=value, the value bare or quoted: how a request gives a tool its arguments offline.
_PAIR = re.compile(r"\b([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|[^\s,;]+)")


def requested_tools(request: str, tools: list[ToolOffer]) -> list[tuple[ToolOffer, dict[str, Any]]]:
    """The listed tools a request asks for, each with its arguments.

    A request asks for a tool by saying "tool" and the tool's name ("use the tool add with
    a=2 b=3"). Each argument is the request's `name=value` pair for it (`_argument`), else the
    schema's default; one with neither is left out (the schema check then says what is
    missing).
    """
    if not TOOL_WORD.search(request):
        return []
    words = set(lower_words(request))
    pairs = dict(_PAIR.findall(request))
    found = []
    for offer in tools:
        if offer.name.lower() not in words:
            continue
        schema = first_json_object(offer.input_schema) or {}
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        arguments = {}
        for name, spec in properties.items():
            spec = spec if isinstance(spec, dict) else {}
            if name in pairs:
                arguments[name] = _argument(pairs[name], spec.get("type"))
            elif "default" in spec:
                arguments[name] = spec["default"]
        found.append((offer, arguments))
    return found


def _argument(raw: str, kind: Any) -> Any:
    """A `name=value` pair's value as a plan writes it: a quoted one as the string it quotes
    (whatever the schema says: the repair of the call reads it as the schema's type), a bare
    one as the schema's type."""
    if raw[:1] in ("'", '"'):
        return raw[1:-1]
    return _typed(raw, kind)


def lower_words(text: str) -> list[str]:
    return [word.lower() for word in re.findall(r"[\w.-]+", text)]


def _typed(value: str, kind: Any) -> Any:
    """A `name=value` pair's value as the schema's type: what a model would write."""
    try:
        if kind == "integer":
            number = float(value)
            return int(number) if number.is_integer() else value
        if kind == "number":
            return float(value)
    except ValueError:
        return value
    if kind == "boolean":
        return value.lower() in ("true", "yes", "1")
    return value


def repair_tool_call(data: RepairToolCallInput) -> str:
    """The call as written with its unclosed brackets closed, and, given the tool's argument
    schema, each argument read as the type the schema says (a "2" or "2.0" where an integer
    belongs is 2) and a missing one given the schema's default: the fixes that need no
    model."""
    found = first_json_object(data.malformed_call)
    if found is None:
        return data.malformed_call.strip() + _missing_closers(data.malformed_call)
    arguments = found.get("arguments")
    schema = first_json_object(data.argument_schema)
    if isinstance(arguments, dict) and schema is not None:
        found["arguments"] = _as_schema_says(arguments, schema)
    return json.dumps(found, ensure_ascii=False)


def _as_schema_says(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return arguments
    fixed = dict(arguments)
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        if name in fixed:
            fixed[name] = _typed(str(fixed[name]), spec.get("type"))
        elif "default" in spec:
            fixed[name] = spec["default"]
    return fixed


def _missing_closers(text: str) -> str:
    pairs = {"(": ")", "[": "]", "{": "}"}
    open_brackets: list[str] = []
    for char in text:
        if char in pairs:
            open_brackets.append(pairs[char])
        elif open_brackets and char == open_brackets[-1]:
            open_brackets.pop()
    return "".join(reversed(open_brackets))


def first_json_object(text: str) -> dict[str, Any] | None:
    """What a model repairing JSON would do: the first object, trailing commas forgiven.

    This is the offline model's reply logic, not the host's extraction (`validate_output`).
    """
    decoder = json.JSONDecoder()
    for candidate in (text, re.sub(r",\s*([}\]])", r"\1", text)):
        for match in re.finditer(r"\{", candidate):
            try:
                value, _ = decoder.raw_decode(candidate, match.start())
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None
