"""Repairs on the host: the lossless fixes a failed check has, made without a model call.

A small model often writes the right answer in the wrong form: in mixed case where all lower
case was asked, without the exact closing phrase, with its JSON inside prose or a fence. Each
check type that has a fix which leaves the meaning as it was declares it here (`REPAIRS`); each
that has none says why (`LEFT_TO_THE_MODEL`), and a test holds the two to the vocabulary:

- `case`: the text recased;
- `starts_with`, `ends_with`: the exact text asked added at the start or the end (so is a
  wrapping in quotes, which the host reads as both); never a verdict word ("Yes", "No"), which
  would answer for the model;
- `json`: the one JSON object or array in the text taken out of its prose or fence and written
  again as JSON;
- `pattern`, the host's own patterns only: for its title pattern (`stated.TITLE_PATTERN`), a
  first line that is a title (a Markdown heading, or a short line with no full stop before a
  blank line) marked `<<title>>`; for a first line asked to be a given text (`stated.line_form`),
  that text put first, in place of a first line that says it in other words ("Title: The
  Painter"); for a heading asked (the same), a line that opens with it and runs on ("**For:**
  it is safer") split in two, the heading alone above the rest.

Never a cut, a deletion or an invention: a word limit is not met by cutting mid-sentence,
forbidden words are not deleted, a missing keyword or postscript is not written by the host.

`repair(text, checks)` runs each failed check's fix in turn and keeps it only when, on the
fixed text, that check holds and every check that held before still holds: a repair that
breaks another check is dropped. Pure: no model, no I/O (docs/verified-answers.md, "Repairs
on the host").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import regex

from aeonloop.checks.running import run_check
from aeonloop.checks.stated import TITLE_PATTERN, line_form
from aeonloop.checks.types import (
    CaseCheck,
    Check,
    EndsWithCheck,
    JsonCheck,
    PatternCheck,
    StartsWithCheck,
)
from aeonloop.checks.wording import quote
from aeonloop.limits import DEFAULT_PATTERN_TIMEOUT_S

#: A fix of one check type (it takes a check of that type): the text changed so the check may
#: hold, and the repair's name; None: no lossless fix.
_Fix = Callable[[Any, str], tuple[str, str] | None]

#: Openings and endings that answer a question: the host adding one would answer for the model.
_VERDICT_WORDS = frozenset({"yes", "no", "true", "false", "maybe", "correct", "incorrect"})
#: Where an added opening or ending needs no space to join the text: quotes and brackets.
_JOINS_BARE_AFTER = "\"'“‘([{<"
_JOINS_BARE_BEFORE = "\"'”’)]}>"


def _recase(check: CaseCheck, text: str) -> tuple[str, str] | None:
    if check.case == "lower":
        return text.lower(), "lower-cased by the host"
    return text.upper(), "upper-cased by the host"


def _is_verdict(wanted: str) -> bool:
    return wanted.strip(" .,!?:;\"'").casefold() in _VERDICT_WORDS


#: What may differ between the text asked and a near copy of it the model wrote.
_LOOSE = " .,!?:;\"'“”‘’"


def _add_opening(check: StartsWithCheck, text: str) -> tuple[str, str] | None:
    """The opening asked, put before the text; or in place of a near copy of it the text opens
    with (the same words in another case, or with other punctuation: "my answer is" for "My
    answer is:"), which would otherwise be said twice."""
    if _is_verdict(check.text):
        return None
    body = text.lstrip()
    core = check.text.strip(_LOOSE)
    if core and body.casefold().startswith(core.casefold()):
        body = body[len(core) :].lstrip(_LOOSE.replace('"', "").replace("“", ""))
    joint = "" if check.text[-1] in _JOINS_BARE_AFTER or check.text[-1].isspace() else " "
    return f"{check.text}{joint}{body}", f"opening {quote(check.text)} added by the host"


def _add_ending(check: EndsWithCheck, text: str) -> tuple[str, str] | None:
    """The ending asked, put after the text; or in place of a near copy of it the text ends
    with ("any other questions." for "Any other questions?")."""
    if _is_verdict(check.text):
        return None
    body = text.rstrip()
    core = check.text.strip(_LOOSE)
    loose_end = body.rstrip(_LOOSE)
    if core and loose_end.casefold().endswith(core.casefold()):
        body = loose_end[: len(loose_end) - len(core)].rstrip()
    joint = "" if check.text[0] in _JOINS_BARE_BEFORE or check.text[0].isspace() else " "
    joint = joint if body else ""
    return f"{body}{joint}{check.text}", f"ending {quote(check.text)} added by the host"


_FENCED = regex.compile(r"^\s*(```|~~~)[^\n]*\n(.*?)^\s*\1\s*$", regex.MULTILINE | regex.DOTALL)


def _json_out(check: JsonCheck, text: str) -> tuple[str, str] | None:
    """The one JSON object or array the text holds (in a fence, or in prose), written again;
    None when it holds none, or more than one (which one was meant is not the host's to say)."""
    found: list[object] | None = [
        v for m in _FENCED.finditer(text) if isinstance(v := _parsed(m.group(2)), dict | list)
    ]
    if not found:
        found = _values_in(text)
    if found is None or len(found) != 1:
        return None
    written = json.dumps(found[0], ensure_ascii=False, indent=2)
    return written, "JSON taken out of the text by the host"


def _parsed(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to read
        return None


#: The most `{` or `[` a text's prose is read from for JSON: each may read to the text's end, so
#: a text with more (a long run of brackets) is not searched, and is not repaired.
MAX_JSON_OPENINGS = 200


def _values_in(text: str) -> list[object] | None:
    """The top-level JSON objects and arrays in prose, left to right (one inside another is
    part of it, not a second); None when the text has more openings than MAX_JSON_OPENINGS or
    one nested too deeply to read (which value was meant cannot be told)."""
    decoder, found, at, tried = json.JSONDecoder(), [], 0, 0
    while (at := _next_opening(text, at)) >= 0:
        tried += 1
        if tried > MAX_JSON_OPENINGS:
            return None
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        except RecursionError:
            return None
        found.append(value)
        at = end
    return found


def _next_opening(text: str, start: int) -> int:
    openings = [i for i in (text.find("{", start), text.find("[", start)) if i >= 0]
    return min(openings, default=-1)


_HEADING = regex.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_TITLE_WORDS = 12


def _own_pattern(check: PatternCheck, text: str) -> tuple[str, str] | None:
    """The fix of a pattern the host writes itself; a pattern from anywhere else has none."""
    if not check.present:
        return None
    if check.pattern == TITLE_PATTERN:
        return _mark_title(text)
    form = line_form(check.pattern)
    if form is None:
        return None
    where, asked = form
    return _first_line(asked, text) if where == "first" else _heading_apart(asked, text)


def _mark_title(text: str) -> tuple[str, str] | None:
    """The first line marked `<<...>>` when it is a title already: a Markdown heading, or a short
    line (at most _TITLE_WORDS words) with no full stop, followed by a blank line and more text.
    Any other text has no title to mark, and the host does not write one."""
    lines = text.strip().split("\n")
    first = lines[0].strip()
    heading = _HEADING.match(first)
    if heading:
        title = heading.group(1)
    elif (
        len(lines) > 2
        and not lines[1].strip()
        and len(first.split()) <= _TITLE_WORDS
        and first[-1:] not in ".!?:;,"
    ):
        title = first
    else:
        return None
    title = title.strip("*_ ").strip()
    if not title or "<" in title or ">" in title:
        return None
    marked = "\n".join([f"<<{title}>>", *lines[1:]])
    return marked, f"title marked <<{title}>> by the host"


#: A first line that says a title in other words: a "Title:" label, markup, another case.
_LABELLED = regex.compile(r"^[^\w\n]*(?:title\s*:\s*)?(?P<said>.*?)[^\w\n]*$", regex.IGNORECASE)


def _first_line(asked: str, text: str) -> tuple[str, str] | None:
    """The text asked for the first line put first: in place of a first line that is it in
    other words, else above the text (as an opening asked is added: the words are the
    request's, not the host's)."""
    lines = text.strip("\n").split("\n")
    labelled = _LABELLED.match(lines[0].strip())
    if labelled is not None and labelled.group("said").casefold() == asked.casefold():
        lines = lines[1:]
    return "\n".join([asked, *lines]), f"first line {quote(asked)} put first by the host"


def _heading_apart(asked: str, text: str) -> tuple[str, str] | None:
    """The first line that opens with the heading asked and runs on after a colon or a dash
    ("**For:** it is safer", "Against - cost"), split: the heading alone on its line, then the
    rest. None when no line opens so: where a heading would go is the model's to say."""
    opening = regex.compile(
        r"^[^\w\n]*(?i:"
        + regex.escape(asked)
        + r")[*_]*\s*(?::|\s[-–—])[*_]*\s*(?P<rest>\S[^\n]*)$",
        regex.MULTILINE,
    )
    found = opening.search(text)
    if found is None:
        return None
    split = f"{asked}\n{found.group('rest')}"
    fixed = text[: found.start()] + split + text[found.end() :]
    return fixed, f"heading {quote(asked)} put on a line of its own by the host"


#: The lossless fix each check type declares (a `pattern` check: the host's own patterns only).
REPAIRS: dict[str, _Fix] = {
    "case": _recase,
    "starts_with": _add_opening,
    "ends_with": _add_ending,
    "json": _json_out,
    "pattern": _own_pattern,
}
#: The check types with no lossless fix, and why: these are left to the model.
LEFT_TO_THE_MODEL: dict[str, str] = {
    "count": "meeting a length or a shape means cutting or writing text: a word limit is never "
    "met by cutting mid-sentence, and a missing item is not the host's to write",
    "phrase_count": "a missing keyword would be the host's words, and cutting one changes what "
    "was said",
    "forbidden_words": "forbidden words are never deleted: the sentence they stood in would "
    "say something else",
    "language": "a translation is the model's work",
}
#: The order fixes are tried in: JSON first (it replaces the whole text; an opening added before
#: it would be cut away), then the host's own line patterns (a title, a first line, a heading),
#: the openings and endings, and recasing last, so an ending asked in any case ("Any other
#: questions?", matched in any case by default) takes the case the text is asked to be in; one
#: asked in its own case keeps it, and the recase that would break it is dropped.
_ORDER = ("json", "pattern", "starts_with", "ends_with", "case")


def repair(
    text: str, checks: Sequence[Check], *, timeout: float = DEFAULT_PATTERN_TIMEOUT_S
) -> tuple[str, list[str]]:
    """The text with the lossless fixes of the checks it fails, and the names of the repairs
    applied, in order. A fix is kept only when, on the fixed text, its check holds and every
    check that held before still holds; else it is dropped and the text stays as it was. Each
    check runs under `timeout`, as the host runs it (running.run_check): all of them once,
    and again for each fix tried."""
    held = _holding(checks, text, timeout)
    applied: list[str] = []
    for index in sorted(range(len(checks)), key=lambda i: _rank(checks[i])):
        fix = REPAIRS.get(checks[index].type)
        if fix is None or index in held:
            continue
        fixed = fix(checks[index], text)
        if fixed is None or fixed[0] == text:
            continue
        now = _holding(checks, fixed[0], timeout)
        if index in now and held <= now:
            text, held = fixed[0], now
            applied.append(fixed[1])
    return text, applied


def _rank(check: Check) -> int:
    return _ORDER.index(check.type) if check.type in _ORDER else len(_ORDER)


def _holding(checks: Sequence[Check], text: str, timeout: float) -> set[int]:
    """The indexes of the checks that hold on `text`."""
    return {i for i, check in enumerate(checks) if run_check(check, text, timeout=timeout).held}
