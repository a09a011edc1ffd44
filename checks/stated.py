"""The checkable constraints a text states in so many words ("three bullet points", "under 100
words", "mention Paris twice"), read as the host's checks (types.py's vocabulary, in the JSON
form PREPARE writes them).

Two readers use it. The host takes what it reads as PREPARE's floor: a small model often prepares
no checks at all, and a constraint the request spells out this plainly needs no model to check
(phases/verification.py). The offline model prepares and refines from it (llm/offline.py). It
reads text and runs nothing; what it writes, the host parses as any prepared check
(`types.parse_check`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

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
_STATED: list[
    tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, str, dict[str, Any]]]]
] = []


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]


def _stated(pattern: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(make: Callable[..., Any]) -> Callable[..., Any]:
        _STATED.append((re.compile(pattern, re.IGNORECASE), make))
        return make

    return register


@_stated(_N + r"\s+(?:bullet(?:\s+point)?s?|bulleted\s+points?)\b")
def _bullets(m: re.Match[str]) -> tuple[str, str, dict[str, Any]]:
    n = _number(m.group(1))
    return "bullets", f"exactly {n} bullet points", _count("bullets", n, n)


@_stated(
    r"\b(under|fewer than|less than|at most|no more than|at least|exactly|in)\s+"
    + _N
    + r"\s+(words?|sentences?)\b"  # "in one sentence" as much as "in three sentences"
)
def _length(m: re.Match[str]) -> tuple[str, str, dict[str, Any]]:
    bound, n = m.group(1).lower(), _number(m.group(2))
    unit = m.group(3).lower().removesuffix("s") + "s"
    if bound in ("under", "fewer than", "less than"):
        low, high = None, n - 1
    elif bound in ("at most", "no more than") or (bound == "in" and unit == "words"):
        low, high = None, n
    elif bound == "at least":
        low, high = n, None
    else:  # exactly; "in three sentences"
        low, high = n, n
    said = f"exactly {n}" if low == high else f"at most {high}" if low is None else f"at least {n}"
    return unit, f"{said} {unit if n != 1 else unit[:-1]}", _count(unit, low, high)


@_stated(
    r"\b(?:mention(?:s|ing)?|nam(?:e|es|ing)|includ(?:e|es|ing)|contain(?:s|ing)?)\s+"
    r"(?:the\s+(?:word|name|phrase)\s+)?(?:"
    + _QUOTED
    + r"|(?-i:([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)))(?:\s+(once|twice|thrice))?"
)
def _mention(m: re.Match[str]) -> tuple[str, str, dict[str, Any]]:
    phrase = m.group(1) or m.group(2)
    least = _TIMES.get((m.group(3) or "once").lower(), 1)
    check = {"type": "phrase_count", "phrase": phrase, "min": least, "max": None}
    said = f"mentions {phrase}" + ("" if least == 1 else f" at least {least} times")
    return f"mentions-{_slug(phrase)}", said, check


@_stated(r"\b(start|begin|end)s?\s+with\s+" + _QUOTED)
def _edge(m: re.Match[str]) -> tuple[str, str, dict[str, Any]]:
    kind = "ends_with" if m.group(1).lower() == "end" else "starts_with"
    text = m.group(2)
    return (
        kind.replace("_", "-"),
        f"{m.group(1).lower()}s with {text!r}",
        {"type": kind, "text": text},
    )


@_stated(r"\b(?:avoid|without|never use|do not use|don't use)\s+the\s+words?\s+" + _QUOTED)
def _forbidden(m: re.Match[str]) -> tuple[str, str, dict[str, Any]]:
    word = m.group(1)
    return (
        f"avoids-{_slug(word)}",
        f"never uses {word!r}",
        {"type": "forbidden_words", "words": [word]},
    )


@_stated(r"\b(?:all\s+in\s+|in\s+all\s+|all\s+|in\s+)(lower|upper)\s*case\b")
def _case(m: re.Match[str]) -> tuple[str, str, dict[str, Any]]:
    case = m.group(1).lower()
    return "case", f"all {case} case", {"type": "case", "case": case}


@_stated(r"\b(?:as|in|valid)\s+JSON\b")
def _json_answer(m: re.Match[str]) -> tuple[str, str, dict[str, Any]]:
    return "json", "valid JSON", {"type": "json", "json_schema": None}


def _count(unit: str, low: int | None, high: int | None) -> dict[str, Any]:
    return {"type": "count", "unit": unit, "min": low, "max": high}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "x"


#: "- id: what to check", as PREPARE's input lists the rules in words.
_WORDS_RULE = re.compile(r"^[-*\s]*(\S+?):\s*(.+)$")


def stated_constraints(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The checkable constraints `text` states, in the forms the offline model reads: each as
    (a name, what it asks in words, the check as PREPARE writes it), first mention first."""
    found = []
    for pattern, make in _STATED:
        found += [(m.start(), make(m)) for m in pattern.finditer(text)]
    return [constraint for _, constraint in sorted(found, key=lambda pair: pair[0])]


def stated_checks(request: str, rules_in_words: str) -> list[dict[str, Any]]:
    """PREPARE's checks (`rule_id`, `description`, `check`) for what the text states: each rule
    in words (`- id: the words`, one a line) under its id, and the request's own constraints
    under `request.<name>`, one rule a name."""
    checks = []
    for line in rules_in_words.splitlines():
        match = _WORDS_RULE.match(line.strip())
        if match:
            words = match.group(2)
            checks += [
                {"rule_id": match.group(1), "description": said, "check": check}
                for _, said, check in stated_constraints(words) or _mention_rule(words)
            ]
    names: set[str] = set()
    for name, said, check in stated_constraints(request):
        rule_id = f"request.{name}"
        if rule_id not in names:
            names.add(rule_id)
            checks.append({"rule_id": rule_id, "description": said, "check": check})
    return checks


#: A rule whose whole text is "Mention X." (`_mention_rule`): X is one to three words.
_MENTION_RULE = re.compile(
    r"^\s*(?:(?:mention|name)\s+(?:the\s+(?:word|term|phrase|name)\s+|the\s+)?"
    r"|(?:use|include)\s+the\s+(?:word|term|phrase|name)\s+)"
    r"([a-z][\w-]*(?:\s+[a-z][\w-]*){0,2})\s*\.?\s*$",
    re.IGNORECASE,
)
#: Words that make X more than a thing to mention ("Name the Moon as a cause.").
_NOT_A_NAME = frozenset(
    {"a", "an", "and", "as", "at", "by", "for", "from", "in", "into", "of", "on", "or", "that"}
    | {"the", "this", "to", "which", "with", "how", "why", "what"}
)


def _mention_rule(rule: str) -> list[tuple[str, str, dict[str, Any]]]:
    """A rule in words that is only "Mention gravity." ("Name X.", "Use the word X."; one to
    three words, lower case allowed): the request's own reading asks for a capital or quotes,
    since a request says much else, but a rule that says nothing else asks for that phrase."""
    match = _MENTION_RULE.match(rule)
    if match is None:
        return []
    phrase = match.group(1)
    words = phrase.lower().split()
    if _NOT_A_NAME.intersection(words) or any(w.isdigit() or w in _NUMBER_WORDS for w in words):
        return []  # "Name two planets." asks for any two, not for the words "two planets"
    check = {"type": "phrase_count", "phrase": phrase, "min": 1, "max": None}
    return [(f"mentions-{_slug(phrase)}", f"mentions {phrase}", check)]


#: The most words a request may have and still read as one short ask (`one_short_ask`).
SHORT_ASK_WORDS = 25
#: Where one ask ends and another begins: a sentence's end, a semicolon, or "then".
_ASK_BREAK = re.compile(r"[.!?;]\s+\S|\bthen\b|\n\s*\S", re.IGNORECASE)


def one_short_ask(request: str) -> bool:
    """Whether the request is one short ask: a single sentence of at most SHORT_ASK_WORDS words,
    with no second sentence, semicolon or "then" in it ("What is the capital of France?", "List
    three fruits as bullet points, in lower case."). The host's own reading of how much a
    request asks, for when the model's profile could not be had (phases.exits.draft_suffices):
    such a request asks for one answer, not for several connected steps."""
    text = request.strip()
    return 0 < len(text.split()) <= SHORT_ASK_WORDS and _ASK_BREAK.search(text) is None
