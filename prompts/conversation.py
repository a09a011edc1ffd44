"""How earlier turns of a conversation are named in a prompt's context, and the marker that
says some were left out to fit the context window (llm.session.turn_context). Prompt text, so
it lives here with the rest of it."""

from __future__ import annotations

#: The name of the context artifact holding one earlier turn; numbered from the first turn of
#: the conversation, so the numbers stay the same when older turns are left out.
TURN_NAME = "conversation turn {number} ({role})"
#: The name of the artifact that stands for the turns left out, and what it says.
TURNS_LEFT_OUT_NAME = "conversation turns left out"
TURNS_LEFT_OUT = (
    "[… the {count} oldest turn(s) of the conversation were left out to fit the context window …]"
)
