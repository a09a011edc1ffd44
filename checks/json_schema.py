"""A JSON check's reading of a text: one JSON value, judged against a JSON Schema under the
time bound every pattern has.

The whole text is one JSON value (strict JSON: no comments, no trailing commas), with surrounding
whitespace and one enclosing Markdown code fence allowed. A JSON Schema (its own `$schema`, or
Draft 2020-12) is checked as sound and no deeper than MAX_SCHEMA_DEPTH when a check is made
(`check_schema`); its `pattern` and `patternProperties` run under the check's time bound
(patterns.TimeBudget), and a `$ref` is resolved within the schema alone, never fetched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import regex

from aeonloop.checks.patterns import TimeBudget, bounded_search, compile_pattern
from aeonloop.checks.wording import clip, quote

_FENCED = regex.compile(r"\A\s*(?:```|~~~)[\w+-]*[ \t]*\n(.*?)\n\s*(?:```|~~~)\s*\Z", regex.S)


def _unfenced(text: str) -> str:
    fenced = _FENCED.match(text)
    return fenced.group(1) if fenced else text.strip()


def _validator_class(schema: dict[str, Any]) -> Any:
    """jsonschema's validator class for the schema's dialect (its `$schema`, else Draft 2020-12).
    jsonschema is imported here alone: about 10 MB, which a worker whose runs check no JSON
    never needs."""
    import jsonschema

    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


#: How deeply a check's JSON Schema may nest: far beyond any schema written for an answer, and
#: well within what jsonschema can check without running out of Python's stack.
MAX_SCHEMA_DEPTH = 32


def check_schema(schema: dict[str, Any]) -> None:
    """ValueError when the schema is nested too deeply, is not a sound JSON Schema, or has a
    pattern that does not compile."""
    import jsonschema

    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError(f"'json_schema' nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH}")
    try:
        _validator_class(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"'json_schema' is not a sound JSON Schema: {exc.message}") from None
    for pattern in _schema_patterns(schema):
        compile_pattern(pattern)


def _depth(value: Any) -> int:
    """How many objects and arrays deep `value` nests (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _schema_patterns(schema: Any) -> Iterator[str]:
    """Every `pattern` and `patternProperties` key in the schema, at any depth."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from (k for k in value if isinstance(k, str))
            yield from _schema_patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_patterns(item)


def _bounded_validator(schema: dict[str, Any], budget: TimeBudget) -> Any:
    """A validator whose `pattern` and `patternProperties` run under the check's time bound
    (jsonschema's own use Python's `re`, unbounded). Running out of time raises
    `PatternTimedOut` out of the validation, failing the whole check: an error yielded instead
    would read as "valid" under a `not`."""
    import jsonschema

    cls = _validator_class(schema)

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "string"):
            return
        if bounded_search(patrn, instance, timeout=budget.left()) is None:
            yield jsonschema.ValidationError(f"{quote(instance)} does not match /{clip(patrn)}/")

    def pattern_properties(
        validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if bounded_search(patrn, key, timeout=budget.left()) is not None:
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    bounded = jsonschema.validators.extend(
        cls, {"pattern": pattern, "patternProperties": pattern_properties}
    )
    return bounded(schema)


def _unresolvable() -> type[Exception]:
    """What jsonschema raises for a `$ref` it cannot resolve: a pointer to nowhere, or another
    document, which it never fetches."""
    from referencing.exceptions import Unresolvable

    return Unresolvable


def _best_error(validator: Any, value: Any) -> Any:
    import jsonschema

    return jsonschema.exceptions.best_match(validator.iter_errors(value))


def json_verdict(text: str, schema: dict[str, Any] | None, budget: TimeBudget) -> tuple[bool, str]:
    """Whether the text is one JSON value that `schema` (None: any) accepts, and what was found.
    A pattern of the schema that runs out of `budget` raises `PatternTimedOut`."""
    body = _unfenced(text)
    try:
        value = json.loads(body)
    except ValueError as exc:
        return False, f"not valid JSON: {exc}"
    except RecursionError:
        return False, "not valid JSON here: nested too deeply to read"
    if schema is None:
        return True, f"valid JSON ({type(value).__name__})"
    try:
        error = _best_error(_bounded_validator(schema, budget), value)
    except RecursionError:
        return False, "valid JSON, but nested too deeply to check against the schema"
    except _unresolvable() as exc:  # a $ref to another document: nothing is fetched
        return False, f"the schema cannot be used: {clip(str(exc))}"
    if error is None:
        return True, "valid JSON matching the schema"
    where = "/".join(str(p) for p in error.absolute_path) or "the value"
    return False, f"valid JSON, but at {where}: {clip(error.message)}"
