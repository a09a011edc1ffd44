"""Replies the host recognises by their words: a step the model says it cannot do, and refusals.

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


def is_blocked_reply(output: str) -> bool:
    """The model said the step cannot be done with what it has: the step is blocked."""
    return output.lstrip().upper().startswith(BLOCKED_MARKER)


def is_refusal(output: str) -> bool:
    """A short reply that opens by declining the work (see _REFUSAL)."""
    text = output.strip().replace("\u2019", "'")
    return len(text) <= REFUSAL_MAX_CHARS and _REFUSAL.match(text) is not None
