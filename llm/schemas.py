"""Schemas a grammar can enforce, for servers that turn a JSON schema into a grammar.

llama.cpp's server and llama-cpp-python's constrain generation to a schema sent with
`{"type": "json_object", "schema": ...}`: structure, required fields and enums hold in every
reply. Numeric ranges do not: their grammar builders skip `minimum` and `maximum`, and a small
model then answers on a scale of its own (measured with SmolLM2-135M on llama-cpp-python 0.3:
5 of 6 profile and convergence replies out of range). So each bounded number is sent as the
enum of the values it may take, which the grammar does enforce:

- an integer range of at most `MAX_INTEGERS` values, as those integers;
- a bounded number, as `NUMBER_STEPS + 1` evenly spaced values from bound to bound (0.0, 0.05,
  ..., 1.0 for a score), which is finer than anything the loop distinguishes.

The reply is still validated against the output model unchanged; this only narrows what the
server lets the model write. Servers that take the schema as a hint get the original schema.
"""

from __future__ import annotations

from typing import Any

MAX_INTEGERS = 32
NUMBER_STEPS = 20


def enforceable(schema: Any) -> Any:
    """`schema` with each bounded integer or number replaced by the enum of its values."""
    if isinstance(schema, list):
        return [enforceable(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: enforceable(value) for key, value in schema.items()}
    values = _values(out)
    if values is None:
        return out
    kept = {k: v for k, v in out.items() if k not in ("type", "minimum", "maximum")}
    return {**kept, "enum": values}


def _values(schema: dict[str, Any]) -> list[float] | list[int] | None:
    kind, low, high = schema.get("type"), schema.get("minimum"), schema.get("maximum")
    if kind not in ("integer", "number") or low is None or high is None or high < low:
        return None
    if kind == "integer":
        first, last = int(low), int(high)
        return list(range(first, last + 1)) if last - first < MAX_INTEGERS else None
    return [round(low + (high - low) * step / NUMBER_STEPS, 6) for step in range(NUMBER_STEPS + 1)]
