"""The checkable constraints a text states in so many words ("three bullet points", "under 100
words", "mention Paris twice"), read as the host's checks (types.py's vocabulary, in the JSON
form PREPARE writes them).

Two readers use it. The host takes what it reads as PREPARE's floor: a small model often prepares
no checks at all, and a constraint the request spells out this plainly needs no model to check
(phases/verification.py). The offline model prepares and refines from it (llm/offline.py). It
reads text and runs nothing; what it writes, the host parses as any prepared check
(`types.parse_check`).

What it reads is designed from what requests ask: IFEval's catalogue of verifiable instructions
(Zhou et al., 2023; docs/verified-answers.md has the table of all 25). A wrong check is worse
than none (it picks a worse sample, steers a rewrite, repairs an answer away from what was
asked), so each phrase is read only where it asks something of the answer: never inside quotes
(`_masked`), and not where the clause describes ("variable names are written in lower case",
"why do people list 3 items"); tests/checks/test_stated.py holds the near misses.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any, Literal

import regex

from aeonloop.checks.language import LANGUAGE_NAMES

#: One constraint read: (a name, what it asks in words, the check as PREPARE writes it).
Constraint = tuple[str, str, dict[str, Any]]
_Maker = Callable[[regex.Match[str], str], list[Constraint]]

_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a single": 1,
}
_N = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten|a single)"
_TIMES = {"once": 1, "twice": 2, "thrice": 3}
_QUOTED = r"[\"'“‘]([^\"'”’]+)[\"'”’]"
#: Where an instruction may begin: the text's or a line's start, after a clause's punctuation,
#: or after a word that leads an instruction ("and", "then", "please"; "should"/"must" after a
#: subject; "you" in "can you list"). A phrase met elsewhere ("words that start with 'th'",
#: "why do people list 3 items") describes something else, and is left alone.
_LEAD = r"(?:^|(?<=[.!?;:,(\n])|(?<=\b(?:and|then|please|also|must|should|always|to|you))\s)\s*"
#: The answer, as a request names it ("your entire response", "the answer").
_ANSWER = r"(?:(?:your|the)\s+)?(?:entire\s+|whole\s+)?(?:answer|response|reply|output)"
#: Not after a negation: "do not include the word 'x'" asks the opposite of "include".
_NOT_NEGATED = r"(?<!\b(?:not|n't|never|nor)\s+)"
#: Quoted text: double quotes, curly quotes, and single quotes that are not apostrophes.
_QUOTE_SPANS = regex.compile(r"\"[^\"\n]*\"|“[^”\n]*”|‘[^’\n]*’|(?<!\w)'[^'\n]*'(?!\w)")
#: Each reading: its pattern, what it makes of a match, and a word one of which any match
#: holds (None: no such word), looked for first (`_phrases`).
_STATED: list[tuple[regex.Pattern[str], _Maker, re.Pattern[str] | None]] = []


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]


def _stated(pattern: str, *, needs: str | None = None) -> Callable[[_Maker], _Maker]:
    """Register a reading. `needs`: words (a regex alternation) one of which every match of
    `pattern` holds, so a text without any is passed over by one plain search: the patterns
    that try look-behinds at every position (JSON, commas, case) were most of the CPU a
    worker spent reading a request (`python -m bench`, concurrency, profiled), and most
    requests say none of their words."""

    def register(make: _Maker) -> _Maker:
        compiled = regex.compile(pattern, regex.IGNORECASE | regex.MULTILINE)
        gate = re.compile(needs, re.IGNORECASE) if needs else None
        _STATED.append((compiled, make, gate))
        return make

    return register


def _masked(text: str) -> str:
    """The text with what is inside quotes blanked (same length, so a match's span reads the
    original): an instruction inside a quoted example ("fix 'use no commas here'") is not one."""
    return _QUOTE_SPANS.sub(
        lambda m: m.group(0)[0] + "\0" * (len(m.group(0)) - 2) + m.group(0)[-1], text
    )


#: Where one clause of a request ends and the next begins (`clauses`).
_CLAUSE_BREAK = regex.compile(r"[,;.!?:\n]+|\s+(?:and|then|but)\s+", regex.IGNORECASE)


def clauses(text: str) -> list[str]:
    """The clauses of `text`, stripped, empty ones left out: split at punctuation and at "and",
    "then", "but", never inside quotes ("with lines starting 'Pro:' and 'Con:'" is one)."""
    masked, cuts, start = _masked(text), [], 0
    for brk in _CLAUSE_BREAK.finditer(masked):
        cuts.append(text[start : brk.start()])
        start = brk.end()
    cuts.append(text[start:])
    return [clause.strip() for clause in cuts if clause.strip()]


def _quoted_in(text: str, start: int, end: int) -> list[str]:
    """The quoted texts between `start` and `end` of the original text, in order."""
    return [m.group(0)[1:-1] for m in _QUOTE_SPANS.finditer(text, start, end) if m.group(0)[1:-1]]


def _original(m: regex.Match[str], text: str, group: int | str) -> str:
    return text[m.start(group) : m.end(group)]


# Counts: "three bullet points", "under 100 words", "at least 2 paragraphs".

_UNITS = {
    "words": r"words?",
    "sentences": r"sentences?",
    "paragraphs": r"paragraphs?",
    "lines": r"lines?",
    "bullets": r"(?:bullet(?:ed)?(?:[\s-]+(?:points?|items?))?s?)",
    "numbered_items": r"numbered[\s-]+(?:items?|points?)",
    "placeholders": r"placeholders?",
    "highlights": r"highlighted\s+(?:sections?|parts?|phrases?|words?|points?)",
}
_UNIT_SAID = {"numbered_items": "numbered items"}


@_stated(
    r"\b(?:(under|fewer than|less than|at most|no more than|up to|more than|at least|exactly|in)"
    r"\s+|(?:between\s+)?(?P<from>\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
    r"\s*(?:and|to|or|-|–)\s*)?\b(?P<n>"
    + _N
    + r")[\s-]+(?:"
    + "|".join(f"(?P<{unit}>{said})" for unit, said in _UNITS.items())
    + r")\b(?:\s+or\s+(?P<tail>fewer|less|more))?(?!\s+(?:are|is|was|were|make|makes|of\s+the)\b)"
)
def _counted(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "in three bullet points", "under 100 words", "at least 2 paragraphs", "between 3 and 5
    sentences", "5 sentences or fewer". A count with no bound word is read only after a word
    that asks ("use 3 bullet points", "write two paragraphs": `_asks_before`), and a bare count
    of words never ("write 100 words about tea": about, exactly or at least?)."""
    unit = next(u for u in _UNITS if m.group(u))
    bound, n = (m.group(1) or "").lower(), _number(m.group("n"))
    tail = (m.group("tail") or "").lower()
    low: int | None
    high: int | None
    if not bound and not _asks_before(text, m.start()):
        return []  # "it takes 2 to 3 words", "a regex that matches two sentences", "the three
        # paragraphs below": how long something else is, not the answer
    if m.group("from"):
        low, high = sorted((_number(m.group("from")), n))
    elif tail:
        low, high = (n, None) if tail == "more" else (None, n)
    elif not bound:
        if unit == "words":
            return []
        low, high = n, n
    elif bound in ("under", "fewer than", "less than"):
        low, high = None, n - 1
    elif bound in ("at most", "no more than", "up to") or (bound == "in" and unit == "words"):
        low, high = None, n
    elif bound == "more than":
        low, high = n + 1, None
    elif bound == "at least":
        low, high = n, None
    else:  # exactly; "in three sentences"
        low, high = n, n
    if high is not None and high < (low or 0):
        return []  # "under 0 words": no text holds it
    return [(unit, _count_said(unit, low, high), _count(unit, low, high))]


#: Words after which a count with no bound word asks for the answer's length ("use 3 bullet
#: points", "in 3 to 5 sentences", "write 5 sentences or fewer").
_ASKING_BEFORE = frozenset(
    {"in", "within", "with", "use", "using", "write", "give", "answer", "respond", "reply"}
    | {"provide", "list", "contain", "containing", "of", "into", "be", "have", "as", "me"}
    | {"a", "an"}  # "a three-sentence summary"
)


def _asks_before(text: str, at: int) -> bool:
    """Whether the words before `at` ask for what follows: a clause's start, or an asking word."""
    before = text[max(0, at - 40) : at]
    words = before.split()
    return (
        not before.strip()
        or before.rstrip()[-1] in ".!?;:,(\n"
        or (bool(words) and words[-1].lower() in _ASKING_BEFORE)
    )


def _count_said(unit: str, low: int | None, high: int | None) -> str:
    said = _UNIT_SAID.get(unit, "bullet points" if unit == "bullets" else unit)
    if low is not None and high is not None and low != high:
        return f"between {low} and {high} {said}"
    if low == high:
        bound, n = "exactly", low
    elif low is None:
        bound, n = "at most", high
    else:
        bound, n = "at least", low
    return f"{bound} {n} {said if n != 1 else said[:-1]}"


@_stated(
    _LEAD
    + r"highlight\s+(?:(at least|exactly|at most)\s+)?"
    + _N
    + r"\s+(?:\w+\s+)?(?:sections?|parts?|phrases?|words?|points?|sentences?)\b"
)
def _highlighted(m: regex.Match[str], text: str) -> list[Constraint]:
    """IFEval's "Highlight at least 2 sections in your answer with markdown, i.e. *highlighted
    section*": at least, unless the bound says otherwise."""
    bound, n = (m.group(1) or "at least").lower(), _number(m.group(2))
    low, high = {"exactly": (n, n), "at most": (None, n)}.get(bound, (n, None))
    said = _count_said("highlights", low, high)
    return [("highlights", said, _count("highlights", low, high))]


@_stated(
    r"\b(?:have|has|contain|in|into|with|write)\s+"
    + _N
    + r"\s+sections?\b[^\n]{0,60}?\bmark\s+the\s+beginning\s+of\s+each\s+section\s+with\s+"
    r"(?:the\s+word\s+)?(\w+)\s+X\b"
)
def _marked_sections(m: regex.Match[str], text: str) -> list[Constraint]:
    """IFEval's "Your response must have 3 sections. Mark the beginning of each section with
    SECTION X.": the marker, as written, at least so often."""
    n, marker = _number(m.group(1)), _original(m, text, 2)
    check = {"type": "phrase_count", "phrase": marker, "min": n, "max": None}
    check["case_sensitive"] = True
    return [(f"sections-{_slug(marker)}", f"at least {n} sections marked {marker}", check)]


#: A list's kind, as a request names it.
_LIST_KIND = r"(?P<kind>bullet(?:ed)?|bullet[\s-]points?|numbered|markdown)\s+list"


@_stated(
    _LEAD + r"(?:list|give|name|write|provide|suggest|share|offer|outline|describe|state|present)"
    r"\s+(?:me\s+)?"
    + _N
    + r"\s+(?P<what>[^\n.;:!?,\"“]{1,80}?)\s+(?:as|in|using|with)\s+(?:a\s+)?(?:"
    + _LIST_KIND
    + r"|(?P<points>bullet[\s-]?points|bullets))\b"
)
def _list_of(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "List three benefits of exercise as a bulleted list": the count is the list's, stated
    apart from its unit. Only when what is counted is one thing: "three benefits and two
    drawbacks as a bulleted list" asks for five items, or for two lists."""
    what = m.group("what").lower().split()
    if len(what) > 10 or any(
        w in ("and", "or", "plus") or w.isdigit() or w in _NUMBER_WORDS for w in what
    ):
        return []
    return _list_items(m.group("kind") or "bulleted", _number(m.group(1)))


@_stated(
    r"\b"
    + _LIST_KIND
    + r"\s+(?:of|with)\s+(?:exactly\s+)?"
    + _N
    + r"\s+(?!or\b|to\b|and\b|more\b)\w+"
)
def _list_with(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "a bulleted list of three items", "a numbered list with five steps"."""
    return _list_items(m.group("kind"), _number(m.group(2)))


def _list_items(kind: str, n: int) -> list[Constraint]:
    unit = "numbered_items" if kind.lower() == "numbered" else "bullets"
    return [(unit, _count_said(unit, n, n), _count(unit, n, n))]


# Words that must or must not occur.


@_stated(
    _NOT_NEGATED
    + r"\b(?:mention(?:s|ing)?|nam(?:e|es|ing)|includ(?:e|es|ing)|contain(?:s|ing)?)\s+"
    r"(?:the\s+(?:word|name|phrase)\s+)?(?:"
    + _QUOTED
    + r"|(?-i:([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)))(?:\s+(once|twice|thrice))?"
)
def _mention(m: regex.Match[str], text: str) -> list[Constraint]:
    phrase = _original(m, text, 1) if m.group(1) else m.group(2)
    return [_mentions(phrase, _TIMES.get((m.group(3) or "once").lower(), 1))]


def _mentions(phrase: str, least: int, most: int | None = None) -> Constraint:
    check = {"type": "phrase_count", "phrase": phrase, "min": least, "max": most}
    if most is not None:
        said = f"mentions {phrase} {_count_said('times', least or None, most)}"
    else:
        said = f"mentions {phrase}" + ("" if least == 1 else f" at least {least} times")
    return f"mentions-{_slug(phrase)}", said, check


#: A list of quoted words: "'a'", "'a' and 'b'", "'a', 'b' or 'c'".
_QUOTED_LIST = _QUOTED + r"(?:\s*(?:,\s*(?:and\s+|or\s+)?|and\s+|or\s+)" + _QUOTED + r")*"
#: A list of bare keywords, as IFEval writes them: "keywords cat, dog in the response".
_BARE_LIST = r"(?P<bare>[\w'-]+(?:\s+[\w'-]+)?(?:\s*,\s*(?:and\s+)?[\w'-]+(?:\s+[\w'-]+)?)*)"


def _listed(m: regex.Match[str], text: str) -> list[str]:
    if m.groupdict().get("bare"):
        return [w.strip() for w in regex.split(r",|\band\b", m.group("bare")) if w.strip()]
    return _quoted_in(text, m.start(), m.end())


@_stated(
    _NOT_NEGATED
    + r"\b(?:include|including|use|using|mention|contain|containing|with)\s+(?:the\s+)?"
    r"(?:key)?words?\s+(?:" + _QUOTED_LIST + r"|" + _BARE_LIST + r"\s+in\s+" + _ANSWER + r")"
)
def _keywords(m: regex.Match[str], text: str) -> list[Constraint]:
    return [_mentions(word, 1) for word in _listed(m, text)]


@_stated(
    r"\b(?:avoid(?:\s+using)?|without(?:\s+using)?|never\s+(?:use|say)|(?:do\s+not|don't)\s+"
    r"(?:use|include|say|mention))\s+(?:the\s+|any\s+(?:of\s+the\s+)?)?(?:key)?words?\s+(?:"
    + _QUOTED_LIST
    + r"|"
    + _BARE_LIST
    + r"\s+in\s+"
    + _ANSWER
    + r")"
)
def _forbidden(m: regex.Match[str], text: str) -> list[Constraint]:
    words = _listed(m, text)
    listed = ", ".join(repr(w) for w in words)
    return [
        (
            f"avoids-{_slug(' '.join(words))}",
            f"never uses {listed}",
            {"type": "forbidden_words", "words": words},
        )
    ]


@_stated(
    r"\bthe\s+(word|letter)\s+(?:" + _QUOTED + r"|(\w+))\s+(?:should|must)\s+appear\s+"
    r"(?:(less than|fewer than|at least|at most|exactly|more than)\s+)?" + _N + r"\s+times?\b"
)
def _frequency(m: regex.Match[str], text: str) -> list[Constraint]:
    """IFEval's "the word X should appear at least 3 times" and "the letter q should appear
    less than 5 times" (a letter counted wherever it occurs, in any case)."""
    what = _original(m, text, 2) if m.group(2) else m.group(3)
    letter = m.group(1).lower() == "letter"
    if letter and len(what) != 1:
        return []
    bound, n = (m.group(4) or "exactly").lower(), _number(m.group(5))
    low, high = {
        "less than": (0, n - 1),
        "fewer than": (0, n - 1),
        "at most": (0, n),
        "at least": (n, None),
        "more than": (n + 1, None),
    }.get(bound, (n, n))
    if high is not None and high < low:
        return []
    return [_letter(what, low, high) if letter else _mentions(what, low, high)]


def _letter(letter: str, least: int, most: int | None = None) -> Constraint:
    """A letter counted wherever it occurs, in any case (not as a whole word)."""
    _, said, check = _mentions(letter, least, most)
    check["whole_word"] = False
    return f"letter-{_slug(letter)}", said.replace("mentions", "has the letter", 1), check


# The answer's edges, wrapping and markers.


@_stated(
    _LEAD
    + r"(start|begin|end|finish|conclude|close)s?\s+(?:"
    + _ANSWER
    + r"\s+|it\s+)?with\s+(?:(?:this|the|these)\s+(?:exact\s+)?(?:phrase|sentence|words?|line)"
    r"\s*:?\s*)?(?:"
    + _QUOTED
    + r"|(?<=exact phrase )(?P<bare>[^\"'“‘\n][^\n]*?)(?=\s+No\s+other\s+words|\s*$))"
)
def _edge(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "Start with 'Yes'", "end your answer with 'Is there anything else?'", and IFEval's
    "Finish your response with this exact phrase Any other questions?. No other words should
    follow this phrase." (a bare phrase, read up to its sentence's end)."""
    start = m.group(1).lower() in ("start", "begin")
    if m.group("bare"):
        said_text = m.group("bare").strip()
        if said_text.endswith(".") and said_text[-2:-1] in ("?", "!"):
            said_text = said_text[:-1]
    else:
        said_text = _original(m, text, 2)
    kind = "starts_with" if start else "ends_with"
    word = "starts" if start else "ends"
    return [
        (kind.replace("_", "-"), f"{word} with {said_text!r}", {"type": kind, "text": said_text})
    ]


@_stated(
    r"\b(?:wrap|enclose|put|surround)\s+" + _ANSWER + r"\s+(?:in|with|within|inside)\s+"
    r"(?:double\s+)?(?:quotation\s+marks|quotes)\b"
)
def _quotes(m: regex.Match[str], text: str) -> list[Constraint]:
    said = "wrapped in double quotes"
    return [
        ("quoted", said, {"type": "starts_with", "text": '"'}),
        ("quoted", said, {"type": "ends_with", "text": '"'}),
    ]


@_stated(
    r"\b(?:with\s+|use\s+|using\s+|have\s+|give\s+)(?:a\s+|one\s+|two\s+)?lines?\s+"
    r"(?:starting|beginning|that\s+starts?|that\s+begins?)\s+(?:with\s+)?"
    + _QUOTED
    + r"(?:\s*(?:,|and|or|,\s*and)\s*"
    + _QUOTED
    + r")*"
)
def _lines_starting(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "with lines starting 'Pro:' and 'Con:'": a line that opens with each quoted text, after
    any markup (a bullet, emphasis, a heading's hashes)."""
    return [_line_opening(said, "any") for said in _quoted_in(text, m.start(), m.end())]


@_stated(
    _LEAD
    + r"(?:end|finish|close|conclude)s?\s+(?:"
    + _ANSWER
    + r"\s+|it\s+)?with\s+a\s+(?:final\s+|last\s+)?line\s+(?:starting\s+with\s+|that\s+"
    r"starts\s+with\s+|reading\s+)?" + _QUOTED
)
def _last_line(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "End with a line 'Summary: ' followed by one sentence.": the last line with text opens
    with the quoted text (what follows it is the answer's own)."""
    return [_line_opening(_original(m, text, 1), "last")]


@_stated(r"\btitle\s+" + _QUOTED + r"\s+(?:on|as)\s+(?:the\s+|its\s+)?first\s+line\b")
def _title_line(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "Give it the title 'The Painter' on the first line.": the first line is the title."""
    return [_line_opening(_original(m, text, 1), "first")]


@_stated(
    r"\b(?:under|with|use|using|have|give\s+them)\s+(?:the\s+)?(?:section\s+)?headings?\s+"
    + _QUOTED_LIST,
    needs="heading",
)
def _headings(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "under headings 'For' and 'Against'": a line that is each heading alone, its markup
    aside ("## For", "**For:**")."""
    return [_heading_line(said) for said in _quoted_in(text, m.start(), m.end())]


def _heading_line(said_text: str) -> Constraint:
    """A line that is `said_text` alone, in any case, its markup aside (`line_form` reads it
    back)."""
    said_text = said_text.strip()
    pattern = _HEADING_FORM.format(text=_escaped(said_text))
    return (f"heading-{_slug(said_text)}", f"a heading line {said_text!r}", _pattern_check(pattern))


def _pattern_check(pattern: str) -> dict[str, Any]:
    """A pattern check as PREPARE writes one: the pattern must occur."""
    return {"type": "pattern", "pattern": pattern}


def _escaped(said_text: str) -> str:
    return regex.escape(said_text, special_only=True, literal_spaces=True)


def line_form(pattern: str) -> tuple[Literal["first", "heading"], str] | None:
    """The host's own first-line or heading pattern (`_line_opening`'s "first", `_heading_line`)
    and the text it asks for; None for any other pattern. Read from the pattern itself, so a
    check that came in an event reads the same as one just made (checks.repairs)."""
    for where, form in (("first", _FIRST_LINE_FORM), ("heading", _HEADING_FORM)):
        head, _, tail = form.partition("{text}")
        if (
            len(pattern) > len(head) + len(tail)
            and pattern.startswith(head)
            and pattern.endswith(tail)
        ):
            escaped = pattern[len(head) : len(pattern) - len(tail)]
            said_text = regex.sub(r"\\(.)", r"\1", escaped)
            if _escaped(said_text) == escaped:
                return where, said_text
    return None


def _line_opening(said_text: str, where: Literal["first", "last", "any"]) -> Constraint:
    """A line that opens with `said_text`, stripped, after any markup (a bullet, emphasis, a
    heading's hashes): the first line, that text alone; the last line with text; or any line.
    The one reading of a line's opening, for a rule in words and for a request alike."""
    said_text = said_text.strip()
    text = _escaped(said_text)
    if where == "first":
        pattern, said = _FIRST_LINE_FORM.format(text=text), f"first line is {said_text!r}"
    elif where == "last":
        pattern = rf"^{_LINE_MARKUP}{text}[^\n]*\s*\Z"
        said = f"last line starts with {said_text!r}"
    else:
        pattern, said = rf"^{_LINE_MARKUP}{text}", f"a line starts with {said_text!r}"
    name = f"line-{_slug(said_text)}" if where == "any" else f"{where}-line-{_slug(said_text)}"
    return (name, said, _pattern_check(pattern))


#: What a title in double angular brackets looks like (IFEval's `<<poem of joy>>`).
TITLE_PATTERN = r"<<[^\n<>]+>>"


@_stated(r"\btitle\b[^.\n]{0,80}?(?:double\s+angular\s+brackets|<<)")
def _title(m: regex.Match[str], text: str) -> list[Constraint]:
    return [
        (
            "title",
            "a title in <<double angular brackets>>",
            {"type": "pattern", "pattern": TITLE_PATTERN},
        )
    ]


@_stated(
    r"\b(?:add|include|write|append|end\s+with)\s+(?:a\s+|an\s+)?(?:postscript|p\.\s?s\.)"
    r"(?!\s*(?:file|program|code|script|document|printer|language|interpreter)s?\b)"
    r"(?:\s+(?:start(?:ing|s)?|beginning)\s+with\s+(P\.(?:\s?P\.)*\s?S\.?))?"
)
def _postscript(m: regex.Match[str], text: str) -> list[Constraint]:
    marker = (m.group(1) or "P.S.").upper().replace(" ", "")
    letters = marker.rstrip(".").split(".")
    pattern = r"^\s*" + r"\.\s?".join(letters) + r"\."
    said = f"a postscript starting with {marker.rstrip('.')}."
    return [("postscript", said, {"type": "pattern", "pattern": pattern, "case_sensitive": False})]


#: Punctuation marks named beside commas ("commas and periods in numbers"): what follows then
#: may limit them all, so "and" does not end the instruction.
_MARKS = r"(?:periods|full\s+stops|semicolons|colons|dashes|hyphens|apostrophes|quotes)"


@_stated(
    r"(?:(?:^|(?<=[.!?;:,(\n]))\s*|\b(?:use|with|and|containing|contain)\s+)no\s+commas\b"
    r"(?=\s*(?:[.!?;:,)]|$|\s+(?:and(?!\s+" + _MARKS + r")|at\s+all|in\s+" + _ANSWER + r")\b))"
    r"|\b(?:without(?:\s+using)?(?:\s+any)?|(?:do\s+not|don't|never|must\s+not|mustn't|should\s+not"
    r"|shouldn't|cannot|can't|(?:are\s+|is\s+)?not\s+allowed\s+to)\s+(?:use|contain|include|have)"
    r"(?:\s+any)?|refrain\s+from\s+(?:using|the\s+use\s+of)(?:\s+any)?|avoid(?:\s+using)?"
    r"(?:\s+any)?)\s+commas\b(?=\s*(?:[.!?;:,)]|$|\s+(?:and(?!\s+"
    + _MARKS
    + r")|at\s+all|in\s+"
    + _ANSWER
    + r")\b))",
    needs="commas",
)
def _no_commas(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "Use no commas", "refrain from the use of any commas": not "there are no commas in
    this list" (a statement), nor "do not use commas in numbers" (only some commas)."""
    return [("no-commas", "no commas", {"type": "pattern", "pattern": ",", "present": False})]


@_stated(
    r"(?:" + _LEAD + r"|\b(?:(?:all\s+)?in\s+(?:all\s+)?|all\s+|(?:using|use)\s+(?:only\s+)?"
    r"|be\s+(?:written\s+)?(?:all\s+)?))(?:only\s+)?"
    r"(?:(lower|upper)[\s-]*case(?:\s+letters)?|(capital\s+letters|caps|(?<=(?:in|all)\s)capitals))"
    r"(?=\s*(?:[.!?;:,)]|$|\s+(?:and|only|throughout|please)\b)|(?<=letters)(?!\s+(?:in|of|for)\b))"
    r"|(?:^|(?<=[.!?;:,(\n]))\s*no\s+capital\s+letters(?:\s+are\s+allowed)?\b",
    needs="case|capital|caps",
)
def _case(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "in lower case", "in all capital letters", "Answer in upper case", "No capital letters
    are allowed". Not in a clause that describes what is so ("variable names are written in
    lower case", "why are emails in lower case?"), unless it says what the answer should be
    ("your answer should be written in lower case"); nor "in lower case in Python"."""
    clause = text[_clause_start(text, m.start()) : m.start()]
    if _DESCRIBES.search(clause) and not _ASKS.search(clause):
        return []
    if _OF_WORDS.search(text, max(0, m.start() - 20), m.start()):
        return []  # "words with all capital letters should appear ...": some words, not all
    after = text[m.end() : m.end() + 40]
    if not _CLAUSE_ENDS.match(after) and (
        not m.group(0).lstrip().lower().startswith("in ") or _DESCRIBED_AFTER.match(after)
    ):
        return []  # "in all lowercase letters ask them to vote" (a missing comma), no more
    case = "upper" if m.group(2) or (m.group(1) or "").lower() == "upper" else "lower"
    return [("case", f"all {case} case", {"type": "case", "case": case})]


#: "with all capital letters": a description of some words, not of the answer.
_OF_WORDS = regex.compile(r"\b(?:with|having|has|have|in\s+which)\s+$", regex.IGNORECASE)
#: What may follow a case phrase that ends its instruction.
_CLAUSE_ENDS = regex.compile(
    r"\s*(?:[.!?;:,)]|$|(?:and|only|throughout|please)\b)", regex.IGNORECASE
)
#: What makes "in capital letters" describe what comes before it ("... in capital letters
#: should appear less than 4 times", "... in capital letters in Python").
_DESCRIBED_AFTER = regex.compile(
    r"\s+(?:in|of|for|to|should|must|are|is|was|were|appears?|can|may|will)\b", regex.IGNORECASE
)


#: How far back a clause is read: a request's clause is a line or so, and a long run-on text
#: must not make each match read all that came before it.
_CLAUSE_CHARS = 200


def _clause_start(text: str, at: int) -> int:
    """Where the clause that `at` is in begins: after the last sentence break or comma before
    it ("What is the capital of France, in lower case?": the phrase is a clause of its own), at
    most _CLAUSE_CHARS back."""
    since = max(0, at - _CLAUSE_CHARS)
    return max(since, *(text.rfind(mark, since, at) + 1 for mark in ".!?;,\n"))


#: A clause that says what is so ("names are written", "emails were"), and one that says what
#: the answer must be ("should", "must").
_DESCRIBES = regex.compile(
    r"\b(?:are|is|was|were|been|being|written|stored|typed|spelled|displayed|shown)\b",
    regex.IGNORECASE,
)
_ASKS = regex.compile(
    r"\b(?:should|must|has\s+to|have\s+to|needs?\s+to|make\s+sure|ensure|be\s+sure)\b",
    regex.IGNORECASE,
)


_LANGUAGES = {name.lower(): code for code, name in LANGUAGE_NAMES.items() if code != "en"}
#: The languages read: not English, which an English request is answered in anyway, and where
#: the check would only fail an answer too short to tell ("Paris.": under four words).
_LANGUAGE = r"(" + "|".join(name for name in _LANGUAGES) + r")"


@_stated(
    r"(?:\b(?:respond|answer|reply|write)(?:\s+(?:only|entirely|it|" + _ANSWER + r"))?"
    r"|\b" + _ANSWER + r"\s+(?:should|must)\s+be(?:\s+written)?(?:\s+entirely)?)"
    r"\s+(?:only\s+)?in\s+" + _LANGUAGE + r"\b(?:\s+language)?(?!\s+(?:or|and|words?)\b)(?![\w-])"
)
def _language(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "Respond in French", "Your entire response should be in German language": not "answer
    in French or English", nor "translate it into French"."""
    code = _LANGUAGES[m.group(1).lower()]
    return [("language", f"written in {LANGUAGE_NAMES[code]}", {"type": "language", "code": code})]


@_stated(
    _LEAD
    + r"(?:(?:give|return|write|format|output|present|provide)\s+(?:it|everything|"
    + _ANSWER
    + r"|the\s+result)\s+|(?:answer|respond|reply)\s+)?(?:as|in|with)\s+(?:only\s+)?(?:valid\s+)?"
    r"JSON(?:\s+format)?(?:\s+only)?(?=\s*(?:[.!?;:,)]|$))"
    r"|" + _LEAD + r"(?:answer|respond|reply)\s+with\s+(?:the\s+)?JSON(?:\s+object)?\s+only\b"
    r"|\b" + _ANSWER + r"\s+(?:should|must)\s+be\s+(?:wrapped\s+|formatted\s+|written\s+)?"
    r"(?:as|in)\s+(?:valid\s+)?JSON\b",
    needs="json",
)
def _json_answer(m: regex.Match[str], text: str) -> list[Constraint]:
    """ "Give it as JSON.", "Answer in JSON format.", "Entire output should be wrapped in JSON
    format": not "Explain how data is stored in JSON" (the answer is prose about JSON)."""
    return [("json", "valid JSON", {"type": "json", "json_schema": None})]


@_stated(
    r"\b(?:answer|respond|reply)\s+with\s+one\s+of\s+the\s+following\s+options\s*:?\s*\(?\s*"
    + _QUOTED_LIST
)
def _options(m: regex.Match[str], text: str) -> list[Constraint]:
    """IFEval's "Answer with one of the following options: ('My answer is yes.', 'My answer is
    no.')": one of the options occurs, word for word."""
    options = _quoted_in(text, m.start(), m.end())
    pattern = "|".join(regex.escape(o) for o in options)
    said = "one of " + ", ".join(repr(o) for o in options)
    return [("options", said, {"type": "pattern", "pattern": pattern})]


def _count(unit: str, low: int | None, high: int | None) -> dict[str, Any]:
    return {"type": "count", "unit": unit, "min": low, "max": high}


def _slug(text: str) -> str:
    return regex.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "x"


#: "- id: what to check", as PREPARE's input lists the rules in words.
_WORDS_RULE = regex.compile(r"^[-*\s]*(\S+?):\s*(.+)$")


def stated_constraints(text: str) -> list[Constraint]:
    """The checkable constraints `text` states, in the forms the offline model reads: each as
    (a name, what it asks in words, the check as PREPARE writes it), first mention first. One
    phrase may state several checks under one name ("wrapped in double quotes": an opening and
    an ending)."""
    return [constraint for phrase in _phrases(text) for constraint in phrase]


#: A question that asks for something to be done, not about it ("Can you list ...?").
_POLITE = regex.compile(r"\s*(?:can|could|would|will)\s+you\b|\s*please\b", regex.IGNORECASE)


def _asked_about(masked: str, at: int) -> bool:
    """Whether the phrase at `at` is in a question about it ("Why do teachers ask for answers
    in three sentences?", "Should emails be written in lower case?"), not a polite request
    ("Can you answer in French?"), nor a question the phrase is set off from by a comma ("What
    are the benefits of exercise, in three bullet points?": how to answer it)."""
    if masked[:at].rstrip()[-1:] in (",", ":", ";", "(", "-", "–", "—"):
        return False
    start = max(masked.rfind(mark, 0, at) for mark in ".!?\n") + 1
    ends = [i for mark in ".!?\n" if (i := masked.find(mark, at)) >= 0]
    end = min(ends, default=len(masked))
    question = masked[end : end + 2] == "?" or masked[end : end + 2] in ("? ", "?\n")
    return question and not _POLITE.match(masked, start)  # "...help with?. No other words"


def _phrases(text: str) -> list[list[Constraint]]:
    """What each phrase of `text` states, phrase by phrase, first first. The patterns run on the
    text with its quotes blanked (`_masked`); what a phrase quotes is read from the text."""
    masked = _masked(text)
    found: list[tuple[int, int, list[Constraint]]] = []
    for order, (pattern, make, gate) in enumerate(_STATED):
        if gate is not None and gate.search(masked) is None:
            continue
        found += [
            (m.start(), order, made)
            for m in pattern.finditer(masked)
            if not _asked_about(masked, m.start()) and (made := make(m, text))
        ]
    found.sort(key=lambda item: (item[0], item[1]))
    return [made for _, _, made in found]


def stated_checks(request: str, rules_in_words: str) -> list[dict[str, Any]]:
    """PREPARE's checks (`rule_id`, `description`, `check`) for what the text states: each rule
    in words (`- id: the words`, one a line) under its id, and the request's own constraints
    under `request.<name>`, one rule a name: a name stated again later ("three bullet points
    ... five bullet points") keeps its first phrase's checks."""
    checks = []
    for line in rules_in_words.splitlines():
        match = _WORDS_RULE.match(line.strip())
        if match:
            checks += [
                {"rule_id": match.group(1), "description": said, "check": check}
                for _, said, check in read_rule(match.group(2))
            ]
    names: set[str] = set()
    for phrase in _phrases(request):
        fresh = [(f"request.{name}", said, check) for name, said, check in phrase]
        fresh = [each for each in fresh if each[0] not in names]
        names.update(rule_id for rule_id, _, _ in fresh)
        checks += [{"rule_id": r, "description": said, "check": check} for r, said, check in fresh]
    return checks


def read_rule(words: str) -> list[Constraint]:
    """The checks the host reads in one rule in words: what the text states, as in a request,
    or else what the rule asks when it says nothing else (`_rule_alone`). None: only a model
    (PREPARE) can turn it into a check."""
    return stated_constraints(words) or _rule_alone(words)


#: A rule whose whole text is "Mention X." (`_mention_rule`): X is one to three words.
_MENTION_RULE = regex.compile(
    r"^\s*(?:(?:mention|name)\s+(?:the\s+(?:word|term|phrase|name)\s+|the\s+)?"
    r"|(?:use|include)\s+the\s+(?:word|term|phrase|name)\s+)"
    r"([a-z][\w-]*(?:\s+[a-z][\w-]*){0,2})\s*\.?\s*$",
    regex.IGNORECASE,
)
#: Words that make X more than a thing to mention ("Name the Moon as a cause.").
_NOT_A_NAME = frozenset(
    {"a", "an", "and", "as", "at", "by", "for", "from", "in", "into", "of", "on", "or", "that"}
    | {"the", "this", "to", "which", "with", "how", "why", "what"}
)


#: A rule whose whole text is "Mention X or Y." ("Name X, Y or Z."): any one of them will do.
_EITHER_RULE = regex.compile(
    r"^\s*(?:mention|name)\s+(?:the\s+)?"
    r"(?P<first>[a-z][\w-]*(?:\s+[a-z][\w-]*){0,2})"
    r"(?P<more>(?:\s*,\s*[a-z][\w-]*(?:\s+[a-z][\w-]*){0,2})*)"
    r",?\s+or\s+(?P<last>[a-z][\w-]*(?:\s+[a-z][\w-]*){0,2})\s*\.?\s*$",
    regex.IGNORECASE,
)
#: A rule whose whole text gives a quoted text or a name to say: "Give 'bonjour'.", "Say
#: Canberra." A bare name only after "say" or "state", and capitalised: "Say light cannot
#: escape." states a claim, in words the answer may choose, and "Use Markdown." a form.
_SAY_RULE = regex.compile(
    r"^\s*(?:(?:say|give|write|state|use|include|contains?)\s+" + _QUOTED + r"|(?:say|state)\s+"
    r"(?-i:([A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2})))\s*\.?\s*$",
    regex.IGNORECASE,
)
#: A rule whose whole text asks for a line that starts with a quoted text: "A line starting
#: 'Pro:'.", "A last line starting 'Summary:'.", "First line is 'The Painter'."
_LINE_RULE = regex.compile(
    r"^\s*(?:(?:an?|one)\s+(?P<last>last\s+)?line\s+(?:starting|beginning|that\s+starts)"
    r"(?:\s+with)?|(?P<first>(?:the\s+)?first\s+line\s+is))\s+" + _QUOTED + r"\s*\.?\s*$",
    regex.IGNORECASE,
)
#: Markup a line may open with before its text: a bullet, emphasis, a heading's hashes.
_LINE_MARKUP = r"[^\w\n]*"
#: The first line is the text alone; a line is the heading alone, in any case (`{text}`: the
#: text, escaped as `_escaped` does).
_FIRST_LINE_FORM = r"\A\s*" + _LINE_MARKUP + "{text}" + _LINE_MARKUP + "$"
_HEADING_FORM = "^" + _LINE_MARKUP + "(?i:{text})" + _LINE_MARKUP + "$"
#: "A 'For' heading line.", "Heading 'Against'.": a rule in words that asks for one heading.
_HEADING_RULE = regex.compile(
    r"^\s*(?:an?\s+)?(?:"
    + _QUOTED
    + r"\s+heading(?:\s+line)?|heading(?:\s+line)?\s+"
    + _QUOTED.replace("(", "(?P<after>", 1)
    + r")\s*\.?\s*$",
    regex.IGNORECASE,
)
#: A rule whose whole text is a quantity to say: "100 °C.", "Say 5000 metres." A number, then
#: a degree sign and a scale letter, a percent sign, or a unit word.
_QUANTITY_RULE = regex.compile(
    r"^\s*(?:(?:say|give|state)\s+)?(?P<number>\d[\d,]*(?:\.\d+)?)\s*"
    r"(?P<unit>°\s*[CFK]|%|[a-z]+)\s*\.?\s*$",
    regex.IGNORECASE,
)
#: The unit words a quantity rule may end with: measures, not things counted ("Say 2 things."
#: asks for two things, not for the words).
_MEASURES = frozenset(
    {
        "m",
        "metre",
        "metres",
        "meter",
        "meters",
        "km",
        "kilometre",
        "kilometres",
        "kilometer",
        "kilometers",
        "cm",
        "mm",
    }
    | {"mi", "mile", "miles", "ft", "foot", "feet", "in", "inch", "inches", "yd", "yard", "yards"}
    | {
        "g",
        "gram",
        "grams",
        "kg",
        "kilogram",
        "kilograms",
        "lb",
        "lbs",
        "pound",
        "pounds",
        "oz",
        "ounce",
        "ounces",
    }
    | {"l", "litre", "litres", "liter", "liters", "ml"}
    | {
        "s",
        "sec",
        "second",
        "seconds",
        "min",
        "minute",
        "minutes",
        "h",
        "hr",
        "hour",
        "hours",
        "day",
        "days",
        "week",
        "weeks",
        "year",
        "years",
    }
    | {
        "kb",
        "mb",
        "gb",
        "tb",
        "hz",
        "khz",
        "mhz",
        "ghz",
        "w",
        "kw",
        "v",
        "volt",
        "volts",
        "mph",
        "kph",
    }
)
#: A rule whose whole text is a name of two to four capitalised words: "Central Processing
#: Unit." Its first word may not lead an instruction or a negation ("No Pluto.", "Use Markdown
#: Tables.", "Not Pluto."), which would ask something of the answer, not a name to say.
_TITLE_RULE = regex.compile(r"^\s*(?P<words>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){1,3})\s*\.?\s*$")
_NOT_A_TITLE = frozenset(
    {"a", "an", "the", "no", "not", "never", "do", "don't", "avoid", "without", "only", "all"}
    | {"use", "include", "mention", "name", "say", "give", "write", "state", "keep", "make"}
    | {"add", "be", "at", "exactly", "every", "each", "one", "two", "three"}
)
#: One thing an order rule puts in order: a capitalised name of up to three words, or a number.
_ITEM = r"(?:[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}|\d+(?:\.\d+)?)"
#: A rule whose whole text puts things in order: "Mercury before Venus before Earth.",
#: "Jupiter, Saturn, Uranus, Neptune in order.", "Contains 2, 3, 5, 7 in order."
_ORDER_RULE = regex.compile(
    rf"^\s*(?:(?P<before>{_ITEM}(?:\s+before\s+{_ITEM})+)"
    rf"|(?:(?:contains?|lists?|names?|gives?|says?)\s+)?"
    rf"(?P<listed>{_ITEM}(?:\s*,\s*{_ITEM})+(?:,?\s+and\s+{_ITEM})?)\s+in\s+(?:that\s+)?order)"
    r"\s*\.?\s*$",
    regex.IGNORECASE,
)
#: Verbs that ask for an order rather than name the first thing in it ("Put A before B.").
_ORDERING = frozenset({"put", "place", "list", "sort", "rank", "order", "show", "write", "keep"})
#: A thing to put in order, in the rule's own case (`_ORDER_RULE` reads in any case, for its
#: words: "before", "in order").
_ITEM_CASED = regex.compile(_ITEM)
#: A rule whose whole text is a label and the number it gives: "Answer: 8."
_LABEL_RULE = regex.compile(r"^\s*(?P<label>[A-Z]\w{0,20}):\s*(?P<number>\d+(?:\.\d+)?)\s*\.?\s*$")
#: A rule whose whole text is code: a keyword in capitals, then more code with a symbol or a
#: second keyword in it: "SELECT * FROM users.", "WHERE age > 30." ("JSON only." is a form.)
_CODE_RULE = regex.compile(r"^\s*(?P<code>[A-Z]{3,}\s+\S.*?)\s*\.?\s*$")
_CODE_SIGN = regex.compile(r"[*<>=()\[\]{};]|\s[A-Z]{3,}\b")
#: A rule whose whole text is one letter to have: "Contains z.", "Has the letter q."
_LETTER_RULE = regex.compile(
    r"^\s*(?:contains|has|uses|includes)\s+(?:the\s+letter\s+)?(?P<letter>[a-z])\s*\.?\s*$",
    regex.IGNORECASE,
)
#: A rule whose whole text is a JSON member to have: 'Has "name": "Ada".', 'Has "age": 36.'
_MEMBER_RULE = regex.compile(
    r"^\s*(?:has|contains|includes)\s+(?P<key>\"[^\"\n]+\")\s*:\s*"
    r"(?P<value>\"[^\"\n]*\"|-?\d+(?:\.\d+)?|true|false|null)\s*\.?\s*$",
    regex.IGNORECASE,
)


def _rule_alone(rule: str) -> list[Constraint]:
    """What a rule in words asks when it says nothing else: a phrase to mention
    (`_mention_rule`), one of several (`_either_rule`), a name or quoted text to say
    (`_say_rule`), a line to start with a quoted text (`_line_rule`), a heading
    (`_heading_rule`), or a literal to say: a quantity (`_quantity_rule`), a capitalised name
    (`_title_rule`), a label and its number (`_label_rule`), a line of code (`_code_rule`), a
    letter (`_letter_rule`), a JSON member (`_member_rule`); or things in order (`_order_rule`). The
    request's own reading asks for more (a capital, quotes, a clause that asks), since a
    request says much else; a rule that says only this asks for it."""
    for reader in (
        _mention_rule,
        _either_rule,
        _say_rule,
        _line_rule,
        _heading_rule,
        _quantity_rule,
        _title_rule,
        _label_rule,
        _code_rule,
        _letter_rule,
        _member_rule,
        _order_rule,
    ):
        found = reader(rule)
        if found:
            return found
    return []


def _mention_rule(rule: str) -> list[Constraint]:
    """ "Mention gravity." ("Name X.", "Use the word X."; one to three words, lower case
    allowed)."""
    match = _MENTION_RULE.match(rule)
    if match is None or not _a_name(match.group(1)):
        return []  # "Name two planets." asks for any two, not for the words "two planets"
    return [_mentions(match.group(1), 1)]


def _either_rule(rule: str) -> list[Constraint]:
    """ "Mention leaves or autumn." ("Name X, Y or Z."): a pattern of the phrases, escaped, as
    whole-word alternatives in any case."""
    match = _EITHER_RULE.match(rule)
    if match is None:
        return []
    more = [each.strip() for each in match.group("more").split(",") if each.strip()]
    phrases = [match.group("first"), *more, match.group("last")]
    if not all(_a_name(phrase) for phrase in phrases):
        return []  # "Name one or two causes." asks for causes, not for the words
    either = "|".join(
        r"\s+".join(regex.escape(w, special_only=True) for w in p.split()) for p in phrases
    )
    check = {"type": "pattern", "pattern": rf"\b(?:{either})\b", "case_sensitive": False}
    said = f"mentions {', '.join(phrases[:-1])} or {phrases[-1]}"
    return [(f"mentions-{_slug(' or '.join(phrases))}", said, check)]


def _say_rule(rule: str) -> list[Constraint]:
    """ "Say Canberra.", "Give 'bonjour'.": the name or the quoted text, at least once."""
    match = _SAY_RULE.match(rule)
    if match is None:
        return []
    phrase = (match.group(1) or match.group(2)).strip()
    if not phrase or (match.group(2) and not _a_name(phrase)):
        return []
    return [_mentions(phrase, 1)]


def _line_rule(rule: str) -> list[Constraint]:
    """ "A line starting 'Pro:'.", "A last line starting ...", "First line is '...'": that
    line's opening (`_line_opening`)."""
    match = _LINE_RULE.match(rule)
    if match is None:
        return []
    said_text = _original(match, rule, 3)
    if not said_text.strip():
        return []
    where = "first" if match.group("first") else "last" if match.group("last") else "any"
    return [_line_opening(said_text, where)]


def _heading_rule(rule: str) -> list[Constraint]:
    """ "A 'For' heading line.", "Heading 'Against'.": a line that is the heading alone."""
    match = _HEADING_RULE.match(rule)
    if match is None:
        return []
    said_text = _original(match, rule, 1 if match.group(1) else "after")
    return [_heading_line(said_text)] if said_text.strip() else []


def _quantity_rule(rule: str) -> list[Constraint]:
    """ "100 °C.", "Say 5000 metres.": the number, its thousands written with or without a
    separator ("5000", "5,000", "5 000"), then the unit, the degree sign optional; in any case."""
    match = _QUANTITY_RULE.match(rule)
    if match is None:
        return []
    number, unit = match.group("number"), match.group("unit")
    if not unit.startswith("°") and unit != "%" and unit.lower() not in _MEASURES:
        return []
    whole, _, decimals = number.replace(",", "").partition(".")
    groups = [whole[max(0, end - 3) : end] for end in range(len(whole), 0, -3)][::-1]
    pattern = r"[,\s]?".join(groups) + (rf"\.{decimals}" if decimals else "")
    if unit.startswith("°"):
        sign = rf"°?\s*{unit[-1]}\b"
    elif unit == "%":
        sign = "%"
    else:
        sign = rf"{regex.escape(unit)}\b"
    check = {
        "type": "pattern",
        "pattern": rf"(?<![\d.]){pattern}\s*{sign}",
        "case_sensitive": False,
    }
    said = f"{number} {unit}".replace("° ", "°")
    return [(f"says-{_slug(said)}", f"says {said}", check)]


def _title_rule(rule: str) -> list[Constraint]:
    """ "Central Processing Unit.": the name, at least once, in any case."""
    match = _TITLE_RULE.match(rule)
    if match is None or match.group("words").split()[0].lower() in _NOT_A_TITLE:
        return []
    return [_mentions(match.group("words"), 1)]


def _label_rule(rule: str) -> list[Constraint]:
    """ "Answer: 8.": the label, its colon, then the number as a whole number."""
    match = _LABEL_RULE.match(rule)
    if match is None:
        return []
    label, number = match.group("label"), match.group("number")
    pattern = rf"\b{regex.escape(label)}:\s*{regex.escape(number)}(?!\d|\.\d)"
    check = {"type": "pattern", "pattern": pattern}
    return [(f"says-{_slug(label)}", f"says {label}: {number}", check)]


def _code_rule(rule: str) -> list[Constraint]:
    """ "SELECT * FROM users.": the code's tokens in order, in any case, with any space between
    words and none needed beside a sign ("age>30" holds "age > 30")."""
    match = _CODE_RULE.match(rule)
    tokens = match.group("code").split() if match else []
    if not tokens or not _CODE_SIGN.search(" " + " ".join(tokens[1:])):
        return []
    pattern = regex.escape(tokens[0])
    for before, token in itertools.pairwise(tokens):
        signs = not before[-1].isalnum() or not token[0].isalnum()
        pattern += (r"\s*" if signs else r"\s+") + regex.escape(token)
    check = {"type": "pattern", "pattern": pattern, "case_sensitive": False}
    code = match.group("code")
    return [(f"code-{_slug(code)}", f"has the code {code}", check)]


def _letter_rule(rule: str) -> list[Constraint]:
    """ "Contains z.": the letter, anywhere, in any case (as "the letter z at least once" in a
    request reads)."""
    match = _LETTER_RULE.match(rule)
    if match is None:
        return []
    return [_letter(match.group("letter").lower(), 1)]


def _member_rule(rule: str) -> list[Constraint]:
    """'Has "name": "Ada".', 'Has "age": 36.': the member as JSON writes it, any space around
    its colon; a number not followed by more digits ("36" is not "365" or "36.5")."""
    match = _MEMBER_RULE.match(rule)
    if match is None:
        return []
    key, value = match.group("key"), match.group("value")
    pattern = rf"{regex.escape(key)}\s*:\s*{regex.escape(value)}"
    if not value.startswith('"'):
        pattern += r"(?!\.?\w)"
    return [(f"has-{_slug(key)}", f"has {key}: {value}", _pattern_check(pattern))]


def _order_rule(rule: str) -> list[Constraint]:
    """ "Mercury before Venus before Earth.", "Jupiter, Saturn, Uranus in order.": each thing,
    as a whole word in any case, after the one before it. Each must be a capitalised name or
    a number: "Breakfast before lunch." or "List the steps in order." say nothing to find."""
    match = _ORDER_RULE.match(rule)
    if match is None:
        return []
    if match.group("before"):
        items = regex.split(r"\s+before\s+", match.group("before"), flags=regex.IGNORECASE)
    else:
        items = regex.split(r"\s*,\s*(?:and\s+)?|\s+and\s+", match.group("listed"))
    if any(not _ITEM_CASED.fullmatch(item) for item in items):
        return []  # the rule's own case: "mercury before venus" names nothing
    if items[0].split()[0].lower() in _NOT_A_TITLE | _ORDERING:
        return []  # "Put A before B.": an instruction, not a name
    found = r"[\s\S]*?".join(
        rf"(?<!\w){regex.escape(item, special_only=True, literal_spaces=True)}(?!\w)"
        for item in items
    )
    check = {"type": "pattern", "pattern": found, "case_sensitive": False}
    said = f"{', '.join(items)} in that order"
    return [(f"order-{_slug(' '.join(items[:3]))}", said, check)]


def _a_name(phrase: str) -> bool:
    """Whether `phrase` names a thing to find: no article, preposition or question word in it
    ("the Moon as a cause"), and no count ("two planets")."""
    words = phrase.lower().split()
    return not _NOT_A_NAME.intersection(words) and not any(
        w.isdigit() or w in _NUMBER_WORDS for w in words
    )


#: The most words a request may have and still read as one short ask (`one_short_ask`).
SHORT_ASK_WORDS = 25
#: Where one ask ends and another begins: a sentence's end, a semicolon, or "then".
_ASK_BREAK = regex.compile(r"[.!?;]\s+\S|\bthen\b|\n\s*\S", regex.IGNORECASE)


def one_short_ask(request: str) -> bool:
    """Whether the request is one short ask: a single sentence of at most SHORT_ASK_WORDS words,
    with no second sentence, semicolon or "then" in it ("What is the capital of France?", "List
    three fruits as bullet points, in lower case."). The host's own reading of how much a
    request asks, for when the model's profile could not be had (phases.exits.draft_suffices):
    such a request asks for one answer, not for several connected steps."""
    text = request.strip()
    return 0 < len(text.split()) <= SHORT_ASK_WORDS and _ASK_BREAK.search(text) is None
