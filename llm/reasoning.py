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
_OPEN = re.compile(rf"<({_NAMES})>", re.IGNORECASE)
#: Every way a tag can start, for a reply that ends part way into one (`<thi`).
_TAG_STARTS = tuple(f"<{slash}{name}" for slash in ("", "/") for name in TAGS)


def split_reasoning(reply: str) -> tuple[str, str]:
    """(answer, thinking) of a reply; the answer is stripped of surrounding white space."""
    thinking: list[str] = []
    close = opened_in_prompt(reply)
    if close:
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


def opened_in_prompt(reply: str) -> re.Match[str] | None:
    """The closing tag of a reply that started inside a block its prompt opened (a closing tag
    with no opening one before it, as R1's and Qwen3's chat templates make); else None."""
    close = _CLOSE.search(reply)
    opening = _OPEN.search(reply)
    if close and (opening is None or opening.start() > close.start()):
        return close
    return None


def answer_so_far(reply: str, opens_in_prompt: bool = False) -> str:
    """The part of a reply still being written that is sure to be answer, by split_reasoning's
    rules: a block opened and not yet closed, and a tag not yet whole, are held back (they may
    be thinking); so is everything, when the model's prompt opens a block (`opens_in_prompt`,
    learnt from its earlier replies), until its closing tag comes. The answer the whole reply
    makes can still differ (a block never closed is answer after all, and a closing tag with no
    opening one makes thinking of what came before it): whoever shows this settles on the whole
    reply's answer at the end."""
    if opens_in_prompt and not _CLOSE.search(reply):
        return ""
    answer, _ = split_reasoning(reply)
    opening = _OPEN.search(answer)
    if opening:
        answer = answer[: opening.start()]
    start = answer.rfind("<")
    if start >= 0 and _tag_begun(answer[start:].lower()):
        answer = answer[:start]
    return answer.rstrip()


def _tag_begun(tail: str) -> bool:
    """Whether `tail`, from a reply's last `<` on, may be a tag not yet whole."""
    return any(
        tag.startswith(tail) or (tail.startswith(tag) and not tail[len(tag) :].strip())
        for tag in _TAG_STARTS
    )


def reasoning_field(message: Any) -> str:
    """The thinking a server split out of the content (vLLM, DeepSeek, llama.cpp, OpenRouter),
    from a message or a streamed delta."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return ""
