"""Reading one JSON reply, top-down, in one place: extract → validate → repair → validate → judge.

`read_json` is the whole path a reply takes before a phase may use it:

1. **whole**: a reply cut at the length limit is never read as complete (`TruncatedReply`);
2. **extract**: its JSON value, found once, by the contract's rules (`prompts.extraction.
   extract_json`, FR-013A..G: the prompt registry's extraction, used nowhere else);
3. **validate**: that value against the output model (`PromptRegistry.validate_value`, which is
   what `validate_output` does after the same extraction, FR-013/FR-013J);
4. **repair locally**, when the value is missing or does not fit: json-repair's reading of the
   reply and the found value, each folded to the schema (llm.lenient), validated in turn the
   same way; a repair that fits is counted (`Usage.local_repairs`);
5. **judge**: a reply that fits its model but whose words are Aeon's own (prompts.echo: a field
   repeating the prompt's instruction or example text, an id that is not clean) is unusable.

Each failure is one of `UNUSABLE`; the session then makes the one repair call (built by
`repair_input`) and reads its reply with `read_json` again. prompts/ is only called, never
calls back: extraction, validation and the echo judgement stay where the seed puts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from aeonloop.exceptions import JSONExtractionError, TruncatedReply, UnusableReply
from aeonloop.llm.lenient import repaired_values
from aeonloop.prompts.echo import unusable_reply
from aeonloop.prompts.extraction import extract_json
from aeonloop.prompts.registry import PromptId, PromptRegistry, RepairJSONInput

T = TypeVar("T", bound=BaseModel)

#: What makes a JSON reply unusable: each gets the one repair call.
UNUSABLE = (TruncatedReply, JSONExtractionError, ValidationError, UnusableReply)
#: The longest error text the repair prompt is shown.
ERROR_CHARS = 1_000


@dataclass(frozen=True)
class Reply:
    """A reply's answer text (reasoning removed) and how the model ended it."""

    text: str
    truncated: bool = False
    refused: bool = False

    def to_memo(self) -> str:
        return orjson.dumps(
            {"text": self.text, "truncated": self.truncated, "refused": self.refused}
        ).decode()

    @classmethod
    def from_memo(cls, value: str) -> Reply:
        try:
            data = orjson.loads(value)
            return cls(str(data["text"]), bool(data["truncated"]), bool(data["refused"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return cls(value)  # memoised as bare text before the flags existed


@dataclass(frozen=True)
class Read(Generic[T]):
    """A reply read as its output model, and whether a local repair made it fit."""

    output: T
    repaired: bool


def read_json(
    registry: PromptRegistry, prompt_id: PromptId, reply: Reply, model: type[T], request: str
) -> Read[T]:
    """`reply` as `model` (see the module's steps); one of UNUSABLE when it cannot be used."""
    if reply.truncated:
        raise TruncatedReply(prompt_id)
    read = _validated(registry, prompt_id, reply.text, model)
    problem = unusable_reply(read.output, registry, request=request)
    if problem is not None:
        raise UnusableReply(prompt_id, problem)
    return read


def repair_input(
    registry: PromptRegistry, prompt_id: PromptId, request: str, reply: Reply, error: Exception
) -> RepairJSONInput:
    """What the one repair call is shown: the request too, since a field that repeats the
    prompt's own text can only be rewritten by a model that knows what it was written for."""
    text = str(error)
    return RepairJSONInput(
        request=request,
        expected_schema=registry.output_schema(prompt_id),
        malformed_output=reply.text or "(empty)",
        error=text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "…",
    )


def _validated(registry: PromptRegistry, prompt_id: PromptId, text: str, model: type[T]) -> Read[T]:
    """Extract, validate strictly; else repair locally and validate each repair; else the
    strict reading's error (no JSON found, or JSON that does not fit)."""
    found: Any = None
    try:
        found = extract_json(text, prompt_id)
        return Read(registry.validate_value(prompt_id, found, model), repaired=False)
    except (JSONExtractionError, ValidationError) as error:
        strict_error = error
    for value in repaired_values(found, text, model):
        try:
            return Read(registry.validate_value(prompt_id, value, model), repaired=True)
        except ValidationError:
            continue
    raise strict_error
