"""Separating a reasoning model's thinking from its answer.

Reasoning models (DeepSeek-R1, Qwen3, QwQ, Magistral, gpt-oss behind some servers) put their
thinking into the reply itself unless the server splits it out into `reasoning_content`. The
thinking often holds a draft of the answer, a JSON object included, so it must go before the
extraction rules look for the first object, and before a reply is stored or shown to a later
prompt: a draft is not the answer, and the thinking is usually longer than the answer.

Forms handled, tags matched case-insensitively:

- closed blocks anywhere: `<think>…</think>`, `<thinking>…</thinking>`, `<reasoning>…</reasoning>`;
- a block opened at the start and never closed (the reply was cut, or the model never closed
  it): all of the reply is thinking;
- a closing tag with no opening one: chat templates of R1 and Qwen3 put the opening `<think>` in
  the prompt, so the reply starts inside the block and everything up to the first closing tag is
  thinking.

A tag elsewhere in running prose (a model explaining what `<think>` means) is left alone unless
it forms one of the blocks above.

Servers that split the thinking out put it in a field of its own (`reasoning_field`), in a whole
reply's message and in each streamed chunk's delta alike.
"""

from __future__ import annotations

import re
from typing import Any

TAGS = ("think", "thinking", "reasoning")
_NAMES = "|".join(TAGS)
_CLOSED = re.compile(rf"<({_NAMES})>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_OPEN_AT_START = re.compile(rf"\A\s*<({_NAMES})>", re.IGNORECASE)
_CLOSE = re.compile(rf"</({_NAMES})\s*>", re.IGNORECASE)


def split_reasoning(reply: str) -> tuple[str, str]:
    """(answer, thinking) of a reply; the answer is stripped of surrounding white space."""
    thinking: list[str] = []
    close = _CLOSE.search(reply)
    opening = re.search(rf"<({_NAMES})>", reply, re.IGNORECASE)
    if close and (opening is None or opening.start() > close.start()):
        thinking.append(reply[: close.start()])
        reply = reply[close.end() :]

    def keep(match: re.Match[str]) -> str:
        thinking.append(match.group(0))
        return ""

    answer = _CLOSED.sub(keep, reply)
    unterminated = _OPEN_AT_START.match(answer)
    if unterminated:
        thinking.append(answer)
        answer = ""
    return answer.strip(), "\n".join(part.strip() for part in thinking if part.strip())


def reasoning_field(message: Any) -> str:
    """The thinking a server split out of the content (vLLM, DeepSeek, llama.cpp, OpenRouter),
    from a message or a streamed delta."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return ""
