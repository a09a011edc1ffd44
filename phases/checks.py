"""The host-run check vocabulary: closed, typed checks that the host runs on a text (EVALUATE).

A rule's check is either one of the request schema's own (`RuleCheck`: a content pattern or an
executable command, phases.models) or a check from this vocabulary, written in a rules file or
prepared by the model from a rule in words (docs/requirements.md, PREPARE). The model never
writes a command: nothing here runs one. Every check is plain data with a one-line `describe()`
for display, and `run_check` gives its outcome on a text, synchronously and purely.

Every regular expression, the user's or the model's, runs with the `regex` package under a time
bound (`bounded_search`), which all the patterns of one check share (`TimeBudget`): a pattern
that backtracks without end becomes a failed check saying it ran out of time, never a stalled
worker. Patterns see at most `PATTERN_INPUT_CHARS` characters of the text (the first ones); a
check on a longer text says how much it searched.

What the counts count (the Markdown an LLM writes, read line by line):

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
- a *paragraph* is a block of non-blank lines between blank lines, unless the block is only
  headings or horizontal rules;
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
- *characters* are Unicode code points of the text without its leading and trailing whitespace.
"""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

import regex
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from aeonloop.exceptions import PatternTimedOut
from aeonloop.limits import DEFAULT_PATTERN_TIMEOUT_S

#: Characters of a text a pattern is run on: the first ones. Far above any answer (a step's
#: output is cut at AEON_MAX_STEP_OUTPUT_CHARS, 20,000 unless set); a bound on input keeps the
#: time bound meaningful and the memory of a match small.
PATTERN_INPUT_CHARS = 100_000
#: Where a detail quotes the text or a pattern, at most this many characters.
_QUOTE_LIMIT = 80


@dataclass(frozen=True)
class CheckOutcome:
    """A check's raw result, before the rule's severity turns it into a verdict. `ran` is False
    when the check was not run at all (an executable check an operator has not allowed)."""

    held: bool
    details: str
    ran: bool = True


# ---------------------------------------------------------------------------------------------
# Bounded patterns.
# ---------------------------------------------------------------------------------------------


def compile_pattern(pattern: str, *, case_sensitive: bool = True) -> regex.Pattern[str]:
    """The pattern compiled as checks run it (multi-line: `^` and `$` match at each line);
    ValueError with the reason when it does not compile."""
    flags = regex.MULTILINE | (0 if case_sensitive else regex.IGNORECASE)
    try:
        return regex.compile(pattern, flags)
    except (regex.error, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ValueError(f"pattern /{_clip(pattern)}/ does not compile: {exc}") from None


def bounded_search(
    pattern: str | regex.Pattern[str],
    text: str,
    *,
    case_sensitive: bool = True,
    timeout: float = DEFAULT_PATTERN_TIMEOUT_S,
) -> regex.Match[str] | None:
    """The first match of `pattern` in the first `PATTERN_INPUT_CHARS` characters of `text`.

    Matching takes at most `timeout` seconds (the `regex` package's own bound, which it measures
    as it matches), then raises `PatternTimedOut`. It releases the GIL while it matches
    (`concurrent=True`), so a slow pattern run in a worker thread leaves the event loop free.
    ValueError if the pattern does not compile.
    """
    compiled = _compiled(pattern, case_sensitive)
    try:
        return compiled.search(_bounded(text), concurrent=True, timeout=timeout)
    except TimeoutError:
        raise PatternTimedOut(timeout) from None


def bounded_findall(
    pattern: str | regex.Pattern[str],
    text: str,
    *,
    case_sensitive: bool = True,
    timeout: float = DEFAULT_PATTERN_TIMEOUT_S,
) -> list[regex.Match[str]]:
    """Every non-overlapping match, under the same bounds as `bounded_search` (the time bound
    holds for the whole scan)."""
    compiled = _compiled(pattern, case_sensitive)
    try:
        return list(compiled.finditer(_bounded(text), concurrent=True, timeout=timeout))
    except TimeoutError:
        raise PatternTimedOut(timeout) from None


class TimeBudget:
    """The time one check's patterns may take together: each is given what is left, and none
    starts once it is spent (`PatternTimedOut`)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._ends = time.monotonic() + seconds

    def left(self) -> float:
        left = self._ends - time.monotonic()
        if left <= 0:
            raise PatternTimedOut(self.seconds)
        return left


def _compiled(pattern: str | regex.Pattern[str], case_sensitive: bool) -> regex.Pattern[str]:
    if isinstance(pattern, str):
        return compile_pattern(pattern, case_sensitive=case_sensitive)
    return pattern


def _bounded(text: str) -> str:
    return text[:PATTERN_INPUT_CHARS]


def _searched(text: str) -> str:
    """What a detail adds when a pattern saw only part of the text."""
    if len(text) <= PATTERN_INPUT_CHARS:
        return ""
    return f" (searched the first {PATTERN_INPUT_CHARS:,} of {len(text):,} characters)"


# ---------------------------------------------------------------------------------------------
# The vocabulary.
# ---------------------------------------------------------------------------------------------

Count = Annotated[int, Field(ge=0, le=1_000_000)]
Case = Annotated[
    bool, Field(description="true: letters must match in case; false: any case matches")
]


def _type_required(schema: dict[str, Any]) -> None:
    """A check's JSON Schema requires its `type`, as parsing one does (in code it may be left
    out: each model knows its own)."""
    schema["required"] = ["type", *(f for f in schema.get("required", []) if f != "type")]


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_type_required)

    def describe(self) -> str:  # pragma: no cover - every check type has its own
        raise NotImplementedError


class _Range(_Check):
    """A count within [min, max]: at least one bound, and min ≤ max."""

    min: Count | None = Field(None, description="the least count that holds (none: no least)")
    max: Count | None = Field(None, description="the most count that holds (none: no most)")

    @model_validator(mode="after")
    def _bounds(self) -> _Range:
        if self.min is None and self.max is None:
            raise ValueError("a count needs 'min', 'max' or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"'min' ({self.min}) is above 'max' ({self.max})")
        return self

    def within(self, count: int) -> bool:
        return (self.min is None or count >= self.min) and (self.max is None or count <= self.max)

    def wanted(self) -> str:
        """The range in words: "exactly 3", "at least 2", "at most 100", "between 2 and 4"."""
        if self.min == self.max:
            return f"exactly {self.min}"
        if self.max is None:
            return f"at least {self.min}"
        if self.min is None or self.min == 0:
            return f"at most {self.max}"
        return f"between {self.min} and {self.max}"


class PatternCheck(_Check):
    """A regular expression (the `regex` package's syntax, a superset of Python's `re`) is found
    anywhere in the text (`present: true`) or nowhere (`present: false`). Multi-line: `^` and `$`
    match at every line. Run under the time bound on the first `PATTERN_INPUT_CHARS` characters;
    running out of time fails the check, whichever `present` asks for."""

    type: Literal["pattern"] = "pattern"
    pattern: str = Field(
        ..., min_length=1, max_length=2000, description="a regular expression searched in the text"
    )
    present: bool = Field(True, description="true: it must occur; false: it must not")
    case_sensitive: Case = True

    @model_validator(mode="after")
    def _compiles(self) -> PatternCheck:
        compile_pattern(self.pattern, case_sensitive=self.case_sensitive)
        return self

    def describe(self) -> str:
        case = "" if self.case_sensitive else ", any case"
        return f"/{_clip(self.pattern)}/ {'present' if self.present else 'absent'}{case}"


class PhraseCountCheck(_Range):
    """How often a word or phrase occurs: non-overlapping occurrences of the exact text, counted
    from the start. Whole-word (the default): an occurrence next to a letter, digit or `_` does not
    count (`cat` is not in `concatenate`). Any case by default."""

    type: Literal["phrase_count"] = "phrase_count"
    phrase: str = Field(..., min_length=1, max_length=500, description="the word or phrase")
    case_sensitive: Case = False
    whole_word: bool = Field(True, description="true: only occurrences that are whole words count")

    @model_validator(mode="after")
    def _not_blank(self) -> PhraseCountCheck:
        if not self.phrase.strip():
            raise ValueError("'phrase' is blank")
        return self

    def describe(self) -> str:
        return (
            f"{_quote(self.phrase)} {self.wanted()} time(s)"
            f"{_how(self.case_sensitive, self.whole_word)}"
        )


Unit = Literal[
    "words",
    "sentences",
    "paragraphs",
    "lines",
    "bullets",
    "numbered_items",
    "sections",
    "placeholders",
    "characters",
]


class CountCheck(_Range):
    """How many words, sentences, paragraphs, lines, bullets, numbered items, sections (Markdown
    headings), placeholders (`[...]`) or characters the text has, within [min, max]. `unit` says in
    short what each counts; docs/verified-answers.md ("The check vocabulary") says it in full."""

    type: Literal["count"] = "count"
    unit: Unit = Field(
        ...,
        description="what is counted: words; sentences; paragraphs (blocks between blank lines); "
        "lines (non-blank); bullets (lines starting with -, *, + or •); numbered_items (lines "
        "starting with 1. or 1)); sections (Markdown # headings); placeholders (text in square "
        "brackets, not links); characters",
    )

    def describe(self) -> str:
        return f"{self.wanted()} {_UNIT_NAMES[self.unit]}"


class StartsWithCheck(_Check):
    """The text, without its leading whitespace, starts with `text`."""

    type: Literal["starts_with"] = "starts_with"
    text: str = Field(..., min_length=1, max_length=500, description="what the text starts with")
    case_sensitive: Case = False

    def describe(self) -> str:
        return f"starts with {_quote(self.text)}{_case_only(self.case_sensitive)}"


class EndsWithCheck(_Check):
    """The text, without its trailing whitespace, ends with `text`."""

    type: Literal["ends_with"] = "ends_with"
    text: str = Field(..., min_length=1, max_length=500, description="what the text ends with")
    case_sensitive: Case = False

    def describe(self) -> str:
        return f"ends with {_quote(self.text)}{_case_only(self.case_sensitive)}"


class ForbiddenWordsCheck(_Check):
    """None of the words (or phrases) occurs as a whole word: not next to a letter, digit or
    `_`. Any case by default."""

    type: Literal["forbidden_words"] = "forbidden_words"
    words: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        ..., min_length=1, max_length=100, description="words or phrases that must not occur"
    )
    case_sensitive: Case = False

    @model_validator(mode="after")
    def _not_blank(self) -> ForbiddenWordsCheck:
        if any(not word.strip() for word in self.words):
            raise ValueError("'words' has a blank word")
        return self

    def describe(self) -> str:
        listed = ", ".join(_quote(w) for w in self.words[:5])
        more = f" and {len(self.words) - 5} more" if len(self.words) > 5 else ""
        return f"none of {listed}{more}{_how(self.case_sensitive, whole_word=True)}"


class CaseCheck(_Check):
    """Every cased letter of the text is upper case (`upper`) or lower case (`lower`). Digits,
    punctuation and letters of scripts without case are ignored; a text with no cased letter at
    all does not hold (there is nothing to judge)."""

    type: Literal["case"] = "case"
    case: Literal["upper", "lower"] = Field(..., description="the case every letter must have")

    def describe(self) -> str:
        return f"all {self.case} case"


class JsonCheck(_Check):
    """The whole text is one JSON value (strict JSON: no comments, no trailing commas), with
    surrounding whitespace and one enclosing Markdown code fence (```json ... ```) allowed. With
    `json_schema`, the value must also validate against that JSON Schema (its own `$schema`, or
    Draft 2020-12); the schema's `pattern` and `patternProperties` run under the same time bound
    as every other pattern. A `$ref` is resolved within the schema alone: one to another document
    is never fetched, and fails the check."""

    type: Literal["json"] = "json"
    json_schema: dict[str, Any] | None = Field(
        None, description="a JSON Schema the value must match (none: any valid JSON)"
    )

    @model_validator(mode="after")
    def _schema_is_sound(self) -> JsonCheck:
        if self.json_schema is not None:
            _check_schema(self.json_schema)
        return self

    def describe(self) -> str:
        return "valid JSON matching a schema" if self.json_schema is not None else "valid JSON"


class LanguageCheck(_Check):
    """The text is written in a language, by its ISO 639-1 code.

    Told without a network or a model, so it can only tell apart what its heuristic knows:

    - by script: Russian (`ru`, Cyrillic; Ukrainian, Bulgarian and Serbian read as Russian), Arabic
      (`ar`, Arabic script; Persian and Urdu read as Arabic), Hindi (`hi`, Devanagari), Japanese
      (`ja`, any kana), Korean (`ko`, Hangul) and Chinese (`zh`, Han characters with no kana);
    - by common words, among Latin-script texts: English, Spanish, French, German, Italian,
      Portuguese, Dutch, Polish, Turkish and Swedish. A text in another Latin-script language
      reads as whichever of these shares most of its common words, or as none.

    A text of fewer than `MIN_WORDS_FOR_LANGUAGE` words, or one in which no profile's common words
    make a tenth of the words, is "too short/unclear to tell" and does not hold.
    """

    type: Literal["language"] = "language"
    code: str = Field(..., description="ISO 639-1 code of the language, e.g. en, fr, de")

    @model_validator(mode="after")
    def _known(self) -> LanguageCheck:
        if self.code not in LANGUAGE_NAMES:
            known = ", ".join(sorted(LANGUAGE_NAMES))
            raise ValueError(f"language {self.code!r} is not one this check can tell ({known})")
        return self

    def describe(self) -> str:
        return f"written in {LANGUAGE_NAMES[self.code]} ({self.code})"


#: One check of the vocabulary, told apart by its `type`.
Check = Annotated[
    PatternCheck
    | PhraseCountCheck
    | CountCheck
    | StartsWithCheck
    | EndsWithCheck
    | ForbiddenWordsCheck
    | CaseCheck
    | JsonCheck
    | LanguageCheck,
    Field(discriminator="type"),
]
#: The vocabulary's `type`s, in the union's order.
CHECK_TYPES: tuple[str, ...] = tuple(
    model.model_fields["type"].default for model in get_args(get_args(Check)[0])
)
_CHECK: TypeAdapter[Check] = TypeAdapter(Check)


def parse_check(data: Mapping[str, Any]) -> Check:
    """A check from its JSON form; ValueError with a one-line reason when it is not one (an
    unknown type, a missing or extra field, a pattern that does not compile)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a check is a JSON object, not {type(data).__name__}")
    kind = data.get("type")
    if kind not in CHECK_TYPES:
        raise ValueError(f"unknown check type {kind!r}; the types are {', '.join(CHECK_TYPES)}")
    try:
        return _CHECK.validate_python(dict(data))
    except ValidationError as error:
        raise ValueError(f"{kind} check: {_first_problem(error)}") from None


def _first_problem(error: ValidationError) -> str:
    problem = error.errors(include_url=False)[0]
    where = ".".join(str(p) for p in problem["loc"][1:])  # [0] is the union's tag
    message = str(problem["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


# ---------------------------------------------------------------------------------------------
# Running a check.
# ---------------------------------------------------------------------------------------------


def run_check(
    check: Check, text: str, *, timeout: float = DEFAULT_PATTERN_TIMEOUT_S
) -> CheckOutcome:
    """The check's outcome on `text`: synchronous, pure, bounded. All the patterns the check runs
    (one, or a forbidden word each, or a JSON Schema's) share `timeout`: running out of it fails
    the check. The details say what was found and what was wanted."""
    try:
        return _RUNNERS[check.type](check, text, TimeBudget(timeout))
    except PatternTimedOut:
        ran_out = f"ran out of its {timeout:g} s time bound"
        return CheckOutcome(False, f"{check.describe()}: the pattern {ran_out}; the check fails")


def _run_pattern(check: PatternCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    match = bounded_search(
        check.pattern, text, case_sensitive=check.case_sensitive, timeout=budget.left()
    )
    searched = _searched(text)
    if match is not None:
        found = f"found /{_clip(check.pattern)}/: {_quote(match.group(0))}{searched}"
        return CheckOutcome(check.present, found if check.present else f"{found}, wanted absent")
    missing = f"/{_clip(check.pattern)}/ not found{searched}"
    return CheckOutcome(not check.present, missing)


def _run_phrase_count(check: PhraseCountCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    count = len(_occurrences(check.phrase, text, check.case_sensitive, check.whole_word, budget))
    return _counted(check, count, f"{_quote(check.phrase)} {count} time(s)", _searched(text))


def _run_count(check: CountCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    count = count_units(check.unit, text)
    return _counted(check, count, f"{count} {_UNIT_NAMES[check.unit]}")


def _counted(check: _Range, count: int, found: str, searched: str = "") -> CheckOutcome:
    return CheckOutcome(check.within(count), f"{found}, wanted {check.wanted()}{searched}")


def _run_starts_with(check: StartsWithCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    start = text.lstrip()[: len(check.text)]
    held = _same(start, check.text, check.case_sensitive)
    return CheckOutcome(held, f"starts with {_quote(start)}, wanted {_quote(check.text)}")


def _run_ends_with(check: EndsWithCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    stripped = text.rstrip()
    end = stripped[max(0, len(stripped) - len(check.text)) :]
    held = _same(end, check.text, check.case_sensitive)
    return CheckOutcome(held, f"ends with {_quote(end)}, wanted {_quote(check.text)}")


def _same(found: str, wanted: str, case_sensitive: bool) -> bool:
    return found == wanted if case_sensitive else found.casefold() == wanted.casefold()


def _run_forbidden_words(check: ForbiddenWordsCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    found = {
        word: n
        for word in check.words
        if (n := len(_occurrences(word, text, check.case_sensitive, True, budget)))
    }
    searched = _searched(text)
    if not found:
        return CheckOutcome(
            True, f"none of the {len(check.words)} forbidden word(s) found{searched}"
        )
    listed = ", ".join(f"{_quote(w)} ×{n}" for w, n in found.items())
    return CheckOutcome(False, f"found {listed}{searched}")


def _run_case(check: CaseCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    cased = [c for c in text if c.isupper() or c.islower()]
    if not cased:
        return CheckOutcome(False, f"no cased letters to judge, wanted all {check.case} case")
    wrong = [c for c in cased if (c.islower() if check.case == "upper" else c.isupper())]
    if not wrong:
        return CheckOutcome(True, f"all {len(cased)} letters are {check.case} case")
    other = "lower" if check.case == "upper" else "upper"
    sample = "".join(wrong[:10])
    return CheckOutcome(
        False, f"{len(wrong)} of {len(cased)} letters are {other} case ({sample!r}…)"
    )


def _run_json(check: JsonCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    body = _unfenced(text)
    try:
        value = json.loads(body)
    except ValueError as exc:
        return CheckOutcome(False, f"not valid JSON: {exc}")
    except RecursionError:
        return CheckOutcome(False, "not valid JSON here: nested too deeply to read")
    if check.json_schema is None:
        return CheckOutcome(True, f"valid JSON ({type(value).__name__})")
    try:
        error = _best_error(_bounded_validator(check.json_schema, budget), value)
    except RecursionError:
        return CheckOutcome(False, "valid JSON, but nested too deeply to check against the schema")
    except _unresolvable() as exc:  # a $ref to another document: nothing is fetched
        return CheckOutcome(False, f"the schema cannot be used: {_clip(str(exc))}")
    if error is None:
        return CheckOutcome(True, "valid JSON matching the schema")
    where = "/".join(str(p) for p in error.absolute_path) or "the value"
    return CheckOutcome(False, f"valid JSON, but at {where}: {_clip(error.message)}")


def _run_language(check: LanguageCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    guess = detect_language(text)
    wanted = describe_language(check.code)
    if guess.code is None:
        return CheckOutcome(False, f"{guess.reason}, wanted {wanted}")
    return CheckOutcome(
        guess.code == check.code, f"reads as {describe_language(guess.code)}, wanted {wanted}"
    )


_RUNNERS: dict[str, Any] = {
    "pattern": _run_pattern,
    "phrase_count": _run_phrase_count,
    "count": _run_count,
    "starts_with": _run_starts_with,
    "ends_with": _run_ends_with,
    "forbidden_words": _run_forbidden_words,
    "case": _run_case,
    "json": _run_json,
    "language": _run_language,
}


def _occurrences(
    phrase: str, text: str, case_sensitive: bool, whole_word: bool, budget: TimeBudget
) -> list[regex.Match[str]]:
    """Non-overlapping occurrences of the literal phrase (whole words: not touching \\w)."""
    literal = regex.escape(phrase.strip())
    pattern = rf"(?<!\w){literal}(?!\w)" if whole_word else literal
    return bounded_findall(pattern, text, case_sensitive=case_sensitive, timeout=budget.left())


# ---------------------------------------------------------------------------------------------
# Counting (the units' semantics are in the module docstring).
# ---------------------------------------------------------------------------------------------

_UNIT_NAMES: dict[str, str] = {
    "words": "word(s)",
    "sentences": "sentence(s)",
    "paragraphs": "paragraph(s)",
    "lines": "non-blank line(s)",
    "bullets": "bullet line(s)",
    "numbered_items": "numbered item(s)",
    "sections": "section(s) (Markdown headings)",
    "placeholders": "placeholder(s) ([...])",
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
    lines = _lines(text)
    if unit == "lines":
        return sum(1 for line in lines if line.text.strip())
    markdown = [line.text for line in lines if not line.in_code]
    if unit == "bullets":
        return sum(1 for line in markdown if _BULLET.match(line) and not _RULE_LINE.match(line))
    if unit == "numbered_items":
        return sum(1 for line in markdown if _NUMBERED.match(line))
    return sum(1 for line in markdown if _HEADING.match(line))  # sections


def _placeholders(line: str) -> int:
    box = _TASK_BOX.match(line)
    rest = line[box.end() :] if box else line
    return sum(1 for m in _PLACEHOLDER.finditer(rest) if m.group(1).strip())


def _blocks(text: str) -> Iterator[list[_Line]]:
    """Runs of non-blank lines between blank lines."""
    block: list[_Line] = []
    for line in _lines(text):
        if line.text.strip():
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
        if not all(
            not line.in_code and (_HEADING.match(line.text) or _RULE_LINE.match(line.text))
            for line in block
        )
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


# ---------------------------------------------------------------------------------------------
# JSON.
# ---------------------------------------------------------------------------------------------

_FENCED = regex.compile(r"\A\s*(?:```|~~~)[\w+-]*[ \t]*\n(.*?)\n\s*(?:```|~~~)\s*\Z", regex.S)


def _unfenced(text: str) -> str:
    fenced = _FENCED.match(text)
    return fenced.group(1) if fenced else text.strip()


def _validator_class(schema: dict[str, Any]) -> Any:
    """jsonschema's validator class for the schema's dialect (its `$schema`, else Draft 2020-12).
    jsonschema is imported here alone: about 10 MB, which a worker whose runs check no JSON
    never needs."""
    import jsonschema

    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


#: How deeply a check's JSON Schema may nest: far beyond any schema written for an answer, and
#: well within what jsonschema can check without running out of Python's stack.
MAX_SCHEMA_DEPTH = 32


def _check_schema(schema: dict[str, Any]) -> None:
    """ValueError when the schema is nested too deeply, is not a sound JSON Schema, or has a
    pattern that does not compile."""
    import jsonschema

    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError(f"'json_schema' nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH}")
    try:
        _validator_class(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"'json_schema' is not a sound JSON Schema: {exc.message}") from None
    for pattern in _schema_patterns(schema):
        compile_pattern(pattern)


def _depth(value: Any) -> int:
    """How many objects and arrays deep `value` nests (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _schema_patterns(schema: Any) -> Iterator[str]:
    """Every `pattern` and `patternProperties` key in the schema, at any depth."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from (k for k in value if isinstance(k, str))
            yield from _schema_patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_patterns(item)


def _bounded_validator(schema: dict[str, Any], budget: TimeBudget) -> Any:
    """A validator whose `pattern` and `patternProperties` run under the check's time bound
    (jsonschema's own use Python's `re`, unbounded). Running out of time raises
    `PatternTimedOut` out of the validation, failing the whole check: an error yielded instead
    would read as "valid" under a `not`."""
    import jsonschema

    cls = _validator_class(schema)

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "string"):
            return
        if bounded_search(patrn, instance, timeout=budget.left()) is None:
            yield jsonschema.ValidationError(f"{_quote(instance)} does not match /{_clip(patrn)}/")

    def pattern_properties(
        validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if bounded_search(patrn, key, timeout=budget.left()) is not None:
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    bounded = jsonschema.validators.extend(
        cls, {"pattern": pattern, "patternProperties": pattern_properties}
    )
    return bounded(schema)


def _unresolvable() -> type[Exception]:
    """What jsonschema raises for a `$ref` it cannot resolve: a pointer to nowhere, or another
    document, which it never fetches."""
    from referencing.exceptions import Unresolvable

    return Unresolvable


def _best_error(validator: Any, value: Any) -> Any:
    import jsonschema

    return jsonschema.exceptions.best_match(validator.iter_errors(value))


# ---------------------------------------------------------------------------------------------
# Language.
# ---------------------------------------------------------------------------------------------

LANGUAGE_NAMES: dict[str, str] = {
    "en": "English",
    "es": "Spanish",
    "fr": "French",
    "de": "German",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "pl": "Polish",
    "tr": "Turkish",
    "sv": "Swedish",
    "ru": "Russian",
    "ar": "Arabic",
    "hi": "Hindi",
    "ja": "Japanese",
    "ko": "Korean",
    "zh": "Chinese",
}
#: The commonest words of each Latin-script language, chosen to overlap little.
_STOPWORDS: dict[str, frozenset[str]] = {
    code: frozenset(words.split())
    for code, words in {
        "en": "the and of to is in that it was for on are with as be at by this have from or "
        "an but not what all were we when your can which their there been has would they will "
        "you he she its our these those than then into",
        "es": "el la los las de que y en un una es por con no para se del al lo como más pero "
        "sus le ya o este esta son entre cuando muy sin sobre también hay donde desde todo "
        "nos durante uno ni contra ese eso",
        "fr": "le la les de des et est un une du en que qui dans pour pas sur au aux ce cette "
        "il elle nous vous ils sont avec plus par ne se mais ou son sa ses été être leur comme "
        "très aussi",
        "de": "der die das und ist nicht ein eine zu den mit von sich des auf für im dem auch "
        "es an als wie noch aber nach bei aus wird sind oder wenn ich sie er wir kann nur über "
        "einer einen",
        "it": "il lo la gli le di che e è un una per non in con del della dei si sono anche "
        "come ma più nel nella al alla questo questa ha gli ci da essere stato loro molto "
        "quando",
        "pt": "o a os as de que e do da dos das em um uma é não para com por se na no mais "
        "mas ao como foi são seu sua também pelo pela isso este esta está muito quando ou",
        "nl": "de het een en van is dat op te in zijn niet met voor die er aan ook als bij "
        "maar om dan nog wel naar door uit worden wordt heeft hebben deze dit zo was",
        "pl": "i w na z się nie do to że jest o jak ale po co tak za od już przez jego jej są "
        "dla czy tym być może tylko ich oraz gdy także bardzo który która które",
        "tr": "ve bir bu da de için ile çok ne daha gibi olan o ama kadar en her ben sen biz "
        "onlar değil mi olarak sonra şey ya veya ise var yok",
        "sv": "och i att det som en på är av för med till den har inte om ett de jag men så "
        "var från eller kan sig vi ska när också efter hur detta alla",
    }.items()
}
#: Fewer words than this and the language is not told (too little to go on).
MIN_WORDS_FOR_LANGUAGE = 4
#: The share of a text's words a profile's common words must make for the text to read as its
#: language: in ordinary prose they make a quarter to a half; in a list of names, almost none.
MIN_COMMON_SHARE = 0.1
_LATIN_WORD = regex.compile(r"\p{Latin}+(?:['’]\p{Latin}+)*")
_SCRIPTS: tuple[tuple[str, regex.Pattern[str]], ...] = (
    ("ko", regex.compile(r"\p{Hangul}")),
    ("ja", regex.compile(r"[\p{Hiragana}\p{Katakana}]")),
    ("zh", regex.compile(r"\p{Han}")),
    ("ar", regex.compile(r"\p{Arabic}")),
    ("hi", regex.compile(r"\p{Devanagari}")),
    ("ru", regex.compile(r"\p{Cyrillic}")),
)


@dataclass(frozen=True)
class LanguageGuess:
    """What `detect_language` made of a text: a code, or None and why not."""

    code: str | None
    reason: str = ""


def describe_language(code: str) -> str:
    return f"{LANGUAGE_NAMES.get(code, code)} ({code})"


def detect_language(text: str) -> LanguageGuess:
    """The text's language, by script and then by its commonest words (LanguageCheck says what
    this can tell apart)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return LanguageGuess(None, "no letters to tell a language by")
    sample = "".join(letters)
    latin = len(regex.findall(r"\p{Latin}", sample))
    if latin * 2 < len(letters):
        for code, script in _SCRIPTS:
            if code == "ja" and script.search(sample):
                return LanguageGuess("ja")
            if code != "ja" and len(script.findall(sample)) * 2 >= len(letters) - latin:
                return LanguageGuess(code)
        return LanguageGuess(None, "a script this check does not know")
    words = [unicodedata.normalize("NFC", w.lower()) for w in _LATIN_WORD.findall(text)]
    if len(words) < MIN_WORDS_FOR_LANGUAGE:
        return LanguageGuess(None, f"too short to tell ({len(words)} word(s))")
    shares = {
        code: sum(1 for w in words if w in common) / len(words)
        for code, common in _STOPWORDS.items()
    }
    best = max(shares, key=lambda code: shares[code])
    if shares[best] < MIN_COMMON_SHARE:
        return LanguageGuess(None, "too few common words of any language it knows")
    return LanguageGuess(best)


# ---------------------------------------------------------------------------------------------
# Wording.
# ---------------------------------------------------------------------------------------------


def _how(case_sensitive: bool, whole_word: bool) -> str:
    word = "whole word, " if whole_word else ""
    return f" ({word}{'same case' if case_sensitive else 'any case'})"


def _case_only(case_sensitive: bool) -> str:
    return "" if not case_sensitive else " (same case)"


def _quote(text: str) -> str:
    return repr(_clip(text, _QUOTE_LIMIT))


def _clip(text: str, limit: int = _QUOTE_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
