"""Text units: what a count check counts, in the Markdown an LLM writes, read line by line.

- a *line* is a line with something other than whitespace on it;
- a *bullet* is a line whose first non-blank character is `-`, `*`, `+` or `•`, followed by
  whitespace and text, at any indentation (nested bullets count); a horizontal rule (`---`,
  `* * *`) is not one;
- a *numbered item* is a line starting, at any indentation, with digits and `.` or `)` followed
  by whitespace and text (`1. `, `2) `);
- a *section* is a Markdown ATX heading: a line starting with one to six `#` and a space (the
  underlined "setext" headings are not counted);
- lines inside a fenced code block (between ``` or ~~~ lines) are never bullets, numbered items
  or sections: a `# comment` in code is not a heading;
- a *paragraph* is a block of non-blank lines between blank lines or horizontal rules (`***`,
  `---`), unless the block is only headings;
- a *word* is a run of letters, digits or `_`, joined across an inner apostrophe or hyphen
  (`don't`, `well-known` are one word each); a number with a decimal point or thousands
  separator (`3.14`, `1,000`) is one word; punctuation and Markdown markers are not words;
- a *sentence* ends at `.`, `!`, `?` or `…` (repeated or not, with closing quotes or brackets)
  followed by whitespace or the end of its block; a `.` after a common abbreviation (`e.g.`,
  `Dr.`, `Inc.`; `ABBREVIATIONS`), after a single letter (an initial) or before a lower-case
  word does not end one. A paragraph's, a bullet's or a numbered item's last words are a sentence
  even without a full stop; headings and fenced code are not sentences. A sentence has at least
  one word;
- a *placeholder* is text in square brackets, `[name]`, that is not a Markdown link or image
  (`[text](url)`), a link reference (`[id]: url`) or a task-list box (`[ ]`, `[x]`);
- a *highlight* is text in single or double asterisks on one line (`*key point*`, `**key
  point**`: Markdown emphasis, as IFEval counts highlighted sections), with something other than
  whitespace in it; a bullet's leading `*` is not one, nor is anything in fenced code;
- *characters* are Unicode code points of the text without its leading and trailing whitespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import regex

#: What a count check may count (its `unit`), each named above.
Unit = Literal[
    "words",
    "sentences",
    "paragraphs",
    "lines",
    "bullets",
    "numbered_items",
    "sections",
    "placeholders",
    "highlights",
    "characters",
]
#: Each unit as a check's details name it.
UNIT_NAMES: dict[str, str] = {
    "words": "word(s)",
    "sentences": "sentence(s)",
    "paragraphs": "paragraph(s)",
    "lines": "non-blank line(s)",
    "bullets": "bullet line(s)",
    "numbered_items": "numbered item(s)",
    "sections": "section(s) (Markdown headings)",
    "placeholders": "placeholder(s) ([...])",
    "highlights": "highlight(s) (*...*)",
    "characters": "character(s)",
}

_FENCE = regex.compile(r"^\s{0,3}(```|~~~)")
_HEADING = regex.compile(r"^\s{0,3}#{1,6}(?:\s|$)")
_RULE_LINE = regex.compile(r"^\s{0,3}(?:(?:\*\s*){3,}|(?:-\s*){3,}|(?:_\s*){3,})$")
_BULLET = regex.compile(r"^\s*[-*+•]\s+\S")
_NUMBERED = regex.compile(r"^\s*\d{1,9}[.)]\s+\S")
_LIST_MARKER = regex.compile(r"^\s*(?:[-*+•]|\d{1,9}[.)])\s+")
_WORD = regex.compile(r"\d+(?:[.,]\d+)+|\w+(?:['’\-]\w+)*")
_PLACEHOLDER = regex.compile(r"(?<!!)\[([^\[\]\n]+)\](?![(:\[])")
_HIGHLIGHT = regex.compile(r"\*\*([^\n*]+)\*\*|\*([^\n*]+)\*")
_TASK_BOX = regex.compile(r"^\s*[-*+]\s+\[[ xX]\]")
_SENTENCE_END = regex.compile(r"[.!?…]+['\"”’)\]]*(?=\s|$)")
#: Words a `.` follows without ending a sentence (lower case, without their final `.`).
ABBREVIATIONS = frozenset(
    (
        *("e.g", "i.e", "vs", "cf", "approx", "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr"),
        *("inc", "ltd", "corp", "fig", "figs", "vol", "pp", "dept", "mt", "u.s", "u.k", "a.m"),
        "p.m",
    )
)


@dataclass(frozen=True)
class _Line:
    text: str
    in_code: bool


def _lines(text: str) -> list[_Line]:
    """The text's lines, each marked as inside a fenced code block or not (fences included)."""
    lines, in_code = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            lines.append(_Line(line, True))
            in_code = not in_code
            continue
        lines.append(_Line(line, in_code))
    return lines


def count_units(unit: Unit, text: str) -> int:
    """How many of `unit` the text has (the semantics are in the module docstring)."""
    if unit == "characters":
        return len(text.strip())
    if unit == "words":
        return len(_WORD.findall(text))
    if unit == "sentences":
        return len(sentences(text))
    if unit == "paragraphs":
        return len(_paragraphs(text))
    if unit == "placeholders":
        return sum(_placeholders(line.text) for line in _lines(text) if not line.in_code)
    if unit == "highlights":
        return sum(_highlights(line.text) for line in _lines(text) if not line.in_code)
    lines = _lines(text)
    if unit == "lines":
        return sum(1 for line in lines if line.text.strip())
    markdown = [line.text for line in lines if not line.in_code]
    if unit == "bullets":
        return sum(1 for line in markdown if _BULLET.match(line) and not _RULE_LINE.match(line))
    if unit == "numbered_items":
        return sum(1 for line in markdown if _NUMBERED.match(line))
    return sum(1 for line in markdown if _HEADING.match(line))  # sections


def _highlights(line: str) -> int:
    rest = line[m.end() :] if (m := _LIST_MARKER.match(line)) else line
    return sum(1 for m in _HIGHLIGHT.finditer(rest) if (m.group(1) or m.group(2)).strip())


def _placeholders(line: str) -> int:
    box = _TASK_BOX.match(line)
    rest = line[box.end() :] if box else line
    return sum(1 for m in _PLACEHOLDER.finditer(rest) if m.group(1).strip())


def _blocks(text: str) -> Iterator[list[_Line]]:
    """Runs of non-blank lines between blank lines or horizontal rules (a rule ends a paragraph
    in Markdown: IFEval's paragraphs are separated by `***` lines)."""
    block: list[_Line] = []
    for line in _lines(text):
        if not line.in_code and _RULE_LINE.match(line.text):
            if block:
                yield block
                block = []
        elif line.text.strip():
            block.append(line)
        elif block:
            yield block
            block = []
    if block:
        yield block


def _paragraphs(text: str) -> list[list[_Line]]:
    return [
        block
        for block in _blocks(text)
        if not all(not line.in_code and _HEADING.match(line.text) for line in block)
    ]


def sentences(text: str) -> list[str]:
    """The text's sentences, in order (the rules are in the module docstring)."""
    found: list[str] = []
    for chunk in _prose_chunks(text):
        found += [s for s in _split_sentences(chunk) if _WORD.search(s)]
    return found


def _prose_chunks(text: str) -> Iterator[str]:
    """Runs of prose a sentence cannot cross: a paragraph, a bullet or a numbered item (list
    markers dropped); headings, horizontal rules and fenced code are left out."""
    chunk: list[str] = []
    for line in _lines(text):
        raw = line.text
        skip = line.in_code or not raw.strip() or bool(_HEADING.match(raw) or _RULE_LINE.match(raw))
        item = None if skip else _LIST_MARKER.match(raw)
        if (skip or item) and chunk:
            yield " ".join(chunk)
            chunk = []
        if not skip:
            chunk.append(raw[item.end() :].strip() if item else raw.strip())
    if chunk:
        yield " ".join(chunk)


def _split_sentences(chunk: str) -> list[str]:
    pieces, start = [], 0
    for end in _SENTENCE_END.finditer(chunk):
        if end.group(0)[0] == "." and end.group(0).rstrip("'\"”’)]") == "." and _no_end(chunk, end):
            continue
        pieces.append(chunk[start : end.end()].strip())
        start = end.end()
    pieces.append(chunk[start:].strip())
    return [p for p in pieces if p]


def _no_end(chunk: str, end: regex.Match[str]) -> bool:
    """Whether a single `.` here is not a sentence's end: after an abbreviation or an initial,
    or before a word in lower case."""
    before = regex.search(r"[\w.]+$", chunk[: end.start()])
    word = before.group(0).lower().rstrip(".") if before else ""
    if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return True
    after = chunk[end.end() :].lstrip()
    return bool(after) and after[0].islower()
