"""Replies the host recognises by their words: a step the model says it cannot do, refusals, and
a plan step's tool named as no tool at all.

These are the other half of the prompts' protocol (REASONING_STEP_USER asks for "BLOCKED:"), and
they are language, so they live with the prompts rather than in the phases.
"""

from __future__ import annotations

import re

#: How REASONING_STEP_USER asks a model to say a step cannot be done (a reply protocol, not text
#: sent to the model).
BLOCKED_MARKER = "BLOCKED:"
#: How models word a refusal when the server has no `refusal` field for it (replies, not
#: prompts). Only a short reply that opens this way counts: a long answer that starts "I can't
#: give exact figures, but..." is work.
_REFUSAL = re.compile(
    r"^\W*(?:(?:i'?m|i am)\s+(?:very\s+|so\s+)?sorry|sorry|i\s+apologi[sz]e|unfortunately)?"
    r"[\s,.!]*(?:but\s+)?(?:as an ai[^,.]*,\s*)?"
    r"(?:i|we)\s+(?:can(?:'?t|not)|won'?t|will not|am (?:not able|unable)|must decline)"
    r"(?:\s+\w+){0,3}?\s+(?:help|assist|comply|provide|do|fulfil|fulfill|complete|answer"
    r"|create|write|support|continue|engage|generate|that|this|with)\b",
    re.IGNORECASE,
)
REFUSAL_MAX_CHARS = 600
#: How models name "no tool" in a plan step's `tool` instead of leaving it out or null (SmolLM2
#: wrote `"tool": "none"`): each means the step is reasoning, compared ignoring case, spaces,
#: `_` and `-`.
_NO_TOOL = frozenset({"", "none", "null", "nil", "n/a", "na", "no", "notool", "nothing"})


def is_blocked_reply(output: str) -> bool:
    """The model said the step cannot be done with what it has: the step is blocked."""
    return output.lstrip().upper().startswith(BLOCKED_MARKER)


def is_refusal(output: str) -> bool:
    """A short reply that opens by declining the work (see _REFUSAL)."""
    text = output.strip().replace("\u2019", "'")
    return len(text) <= REFUSAL_MAX_CHARS and _REFUSAL.match(text) is not None


def names_no_tool(tool: str | None) -> bool:
    """Whether a plan step's `tool` says the step uses none (None, empty, "none", "null",
    "n/a", "no tool"...): a reasoning step, not a call to an unknown tool."""
    if tool is None:
        return True
    return re.sub(r"[\s_-]+", "", tool).casefold() in _NO_TOOL
