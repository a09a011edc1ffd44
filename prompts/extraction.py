"""Pulling the JSON value out of an LLM reply, for `validate_output` only.

The contract is docs/requirements.md, FR-013A..FR-013K.

Models wrap JSON in many ways: an adapter's `{"text": ...}` dict, a Markdown fence with or without
a language tag, prose around the object, or nothing at all. The methods run in the contract's
fixed order and the first that yields JSON wins, so the same reply always gives the same value:

1. `dict_text_key`: a dict reply must carry a string under "text"; that string is the candidate.
2. `markdown_code_block`: the first complete fenced block (an unclosed fence does not count).
3. `embedded_json_object`: the first complete `{...}` object in the text.
4. `direct_parse`: the whole text as JSON.

Nothing here validates the value: a found value that does not fit the output model is the
caller's ValidationError, which is how "no JSON" and "wrong JSON" stay distinguishable (SC-003B).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from aeonloop.exceptions import JSONExtractionError

DICT_TEXT_KEY = "dict_text_key"
MARKDOWN_CODE_BLOCK = "markdown_code_block"
EMBEDDED_JSON_OBJECT = "embedded_json_object"
DIRECT_PARSE = "direct_parse"

FENCE = "```"
# What may follow an opening fence on its line: a language tag such as json, JSON, jsonc, or none.
_LANGUAGE_TAG = re.compile(r"[A-Za-z0-9_+.#-]*")
# JSON's `null` is a legitimate find, so "nothing found" needs its own marker.
_NOTHING: Any = object()
_DECODER = json.JSONDecoder()


def extract_json(llm_response: str | Mapping[str, Any], prompt_id: object = None) -> Any:
    """The first JSON value the extraction methods find in `llm_response`.

    Raises JSONExtractionError, naming every method tried and the prompt, when none finds one.
    """
    attempted: list[str] = []
    if isinstance(llm_response, Mapping):
        attempted.append(DICT_TEXT_KEY)
        if "text" not in llm_response:
            raise JSONExtractionError(
                'a dictionary response must contain a "text" key', attempted, prompt_id
            )
        text = llm_response["text"]
        if not isinstance(text, str):
            raise JSONExtractionError(
                f'the "text" key must hold a string, not {type(text).__name__}',
                attempted,
                prompt_id,
            )
    elif isinstance(llm_response, str):
        text = llm_response
    else:
        raise JSONExtractionError(
            f"a response must be a string or a dictionary, not {type(llm_response).__name__}",
            attempted,
            prompt_id,
        )
    for method, extract in _METHODS:
        attempted.append(method)
        value = extract(text)
        if value is not _NOTHING:
            return value
    raise JSONExtractionError("no JSON could be extracted from the response", attempted, prompt_id)


def _code_block(text: str) -> Any:
    """JSON in the first complete fenced block: the whole block, else the first object in it."""
    opening = text.find(FENCE)
    if opening < 0:
        return _NOTHING
    closing = text.find(FENCE, opening + len(FENCE))
    if closing < 0:
        return _NOTHING
    body = text[opening + len(FENCE) : closing]
    first_line, newline, rest = body.partition("\n")
    if newline and _LANGUAGE_TAG.fullmatch(first_line.strip()):
        body = rest
    value = _direct(body)
    return value if value is not _NOTHING else _embedded_object(body)


def _embedded_object(text: str) -> Any:
    """The first `{` from which a complete JSON object parses; any text after it is ignored.

    The decoder does the brace matching, so nesting, braces inside strings and escaped quotes
    are handled exactly as JSON defines them.
    """
    start = text.find("{")
    while start >= 0:
        try:
            value, _end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
        else:
            return value
    return _NOTHING


def _direct(text: str) -> Any:
    """The whole text as one JSON value."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOTHING


_METHODS: tuple[tuple[str, Callable[[str], Any]], ...] = (
    (MARKDOWN_CODE_BLOCK, _code_block),
    (EMBEDDED_JSON_OBJECT, _embedded_object),
    (DIRECT_PARSE, _direct),
)
