"""How a check's details quote what they name: the text a check found, a pattern, a phrase.

A detail is read by a person (the run page, `aeon ask`) and by the model that critiques an
answer, so a quotation is cut at QUOTE_LIMIT characters: a long pattern or a long answer must not
fill a detail.
"""

from __future__ import annotations

#: Where a detail quotes the text or a pattern, at most this many characters.
QUOTE_LIMIT = 80


def quote(text: str) -> str:
    """The text, cut at QUOTE_LIMIT, in quotes."""
    return repr(clip(text, QUOTE_LIMIT))


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """The text cut at `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[:limit] + "…"
