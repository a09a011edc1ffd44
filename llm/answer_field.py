"""The answer inside a JSON reply, written as the reply is: one string field, decoded as it comes.

Phase E's synthesis asks for JSON (FinalAnswerOutput), whose `answer_text` is the answer; the
reply's other fields (confidence, notes) and its JSON syntax are not. An adapter writes what
the model sends (llm.base.TextSink), so the synthesis's sink is a `FieldSink`: it reads the
reply as it grows, finds the field's opening quote, and writes the field's characters on as
far as they are whole (an escape cut in two, or half of a surrogate pair, waits for the rest).
A reply that never has the field (not JSON, another shape) writes nothing: the answer then
reaches the reader when it is published (bus.answer_text's settlement).
"""

from __future__ import annotations

import re

from aeonloop.llm.base import TextSink

#: A stretch of characters that stand for themselves in a JSON string.
_PLAIN = re.compile(r'[^"\\]+')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class FieldSink:
    """Writes to `inner` the text of the JSON string field `name` of the reply written here."""

    def __init__(self, inner: TextSink, name: str) -> None:
        self._inner = inner
        self._opening = re.compile(rf'"{re.escape(name)}"\s*:\s*"')
        self._start()

    def _start(self) -> None:
        self._raw = ""
        #: Where decoding goes on in `_raw` (None: the field's opening quote not found yet).
        self._at: int | None = None
        self._closed = False

    async def write(self, text: str) -> None:
        self._raw += text
        if self._closed:
            return
        if self._at is None:
            found = self._opening.search(self._raw)
            if found is None:
                return
            self._at = found.end()
        decoded, self._at, self._closed = decode_some(self._raw, self._at)
        if decoded:
            await self._inner.write(decoded)

    async def reset(self) -> None:
        self._start()
        await self._inner.reset()


def decode_some(raw: str, at: int) -> tuple[str, int, bool]:
    """The JSON string characters of `raw` from `at` that are whole, where decoding stopped,
    and whether the string's closing quote was reached. Plain characters are taken a stretch
    at a time (`_PLAIN`): a character at a time was the largest share of a worker's own CPU
    that reading a streamed answer took (`python -m bench`, concurrency, profiled)."""
    out: list[str] = []
    while at < len(raw):
        plain = _PLAIN.match(raw, at)
        if plain is not None:
            out.append(plain.group())
            at = plain.end()
            continue
        if raw[at] == '"':
            return "".join(out), at + 1, True
        escaped, used = _escape(raw, at)
        if escaped is None:
            break  # cut in two: the rest comes with the next write
        out.append(escaped)
        at += used
    return "".join(out), at, False


def _escape(raw: str, at: int) -> tuple[str | None, int]:
    """The character the escape at `at` stands for and its length; None while it is cut."""
    if at + 1 >= len(raw):
        return None, 0
    kind = raw[at + 1]
    if kind != "u":
        return _ESCAPES.get(kind, kind), 2
    code = _hex(raw, at + 2)
    if code is None:
        return None, 0
    if 0xD800 <= code < 0xDC00:  # a surrogate pair's first half: the second must follow
        if at + 12 > len(raw):
            return None, 0
        low = _hex(raw, at + 8) if raw[at + 6 : at + 8] == "\\u" else None
        if low is not None and 0xDC00 <= low < 0xE000:
            return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), 12
        return "\ufffd", 6
    return chr(code), 6


def _hex(raw: str, at: int) -> int | None:
    digits = raw[at : at + 4]
    if len(digits) < 4:
        return None
    try:
        return int(digits, 16)
    except ValueError:
        return 0xFFFD
