"""Conversations: a request with the earlier turns it follows, from the shapes callers send.

A request may carry earlier turns (`Turn`: `{role: user|assistant, content}`), which the
prompts that profile, plan, run the steps and answer take as context (llm.session). Callers
speak of a conversation in two ways, and both end here as one request and its turns:

- a list of chat messages, as OpenAI's Chat Completions API takes them (`split_messages`):
  the last user message is what to answer, the messages before it are the turns;
- a stored run to follow up (`aeon ask --continue ID`, `turns_after`): the run's own turns,
  then its request and its answer.

Gateways check the turns against AEON_MAX_TURNS and AEON_MAX_TURNS_CHARS
(gateway.validation.check_turns) before publishing, as they check attached files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aeonloop.contracts import Turn
from aeonloop.exceptions import BadInput

__all__ = ["Turn", "split_messages", "turns_after"]

#: Roles whose messages carry instructions rather than a side of the dialogue. They are kept,
#: as user turns in their place, so what they ask still reaches the prompts as context.
_INSTRUCTION_ROLES = frozenset({"system", "developer"})


def split_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[Turn]]:
    """The request (the last message, which must be the user's) and the earlier turns.

    Each message is a mapping with `role` and `content`; content is a string, or a list of
    parts as the Chat Completions API has them, whose `text` parts are joined (a part of
    another type, an image, is BadInput: Aeon reads text). `system` and `developer` messages
    become user turns in their place; `tool` messages and other roles are BadInput, each with
    one line naming the message at fault. The request is not checked here beyond being there:
    gateways check it, and the turns, as every request (gateway.validation)."""
    if not messages:
        raise BadInput("messages is empty: send at least one user message to answer")
    *earlier, last = messages
    if _role(last, len(messages) - 1) != "user":
        raise BadInput(
            f"the last message is the {_role(last, len(messages) - 1)}'s: the last message "
            "must be the user's, the request to answer"
        )
    turns = [
        Turn(role=_turn_role(_role(message, index), index), content=_text(message, index))
        for index, message in enumerate(earlier)
    ]
    return _text(last, len(messages) - 1), turns


def turns_after(turns: Sequence[Turn], request: str, answer: str) -> list[Turn]:
    """The turns of a follow-up to a run: the run's own earlier turns, then its request and its
    answer (`aeon ask --continue ID`)."""
    return [*turns, Turn(role="user", content=request), Turn(role="assistant", content=answer)]


def _role(message: Mapping[str, Any], index: int) -> str:
    role = message.get("role") if isinstance(message, Mapping) else None
    if not isinstance(role, str):
        raise BadInput(f"message {index} has no role: give each message a role and content")
    return role


def _turn_role(role: str, index: int) -> str:
    if role in ("user", "assistant"):
        return role
    if role in _INSTRUCTION_ROLES:
        return "user"
    raise BadInput(
        f"message {index} has role {role!r}: Aeon takes user, assistant, system and developer "
        "messages"
    )


def _text(message: Mapping[str, Any], index: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text"):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise BadInput(
                    f"message {index} has a content part of type {kind!r}: send text parts only"
                )
            if not isinstance(part.get("text"), str):
                raise BadInput(f"message {index} has a text part without text")
            parts.append(part["text"])
        return "".join(parts)
    raise BadInput(f"message {index} has no text content: give it a string or text parts")
