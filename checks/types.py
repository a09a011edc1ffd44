"""The host-run check vocabulary: closed, typed checks that the host runs on a text (EVALUATE).

A rule's check is either one of the request schema's own (`RuleCheck`: a content pattern or an
executable command, phases.models) or a check from this vocabulary, written in a rules file or
prepared by the model from a rule in words (docs/requirements.md, PREPARE). The model never
writes a command: nothing here runs one. Every check is plain data with a one-line `describe()`
for display; running.run_check gives its outcome on a text. Each type also carries what PREPARE
is shown of it (`example`, `gloss`), from which vocabulary.described() writes the prompt's list.

What the counts count is in units.py, how a pattern is bounded in patterns.py, how a text is read
as JSON in json_schema.py, and how its language is told in language.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from aeonloop.checks.json_schema import check_schema
from aeonloop.checks.language import LANGUAGE_NAMES
from aeonloop.checks.patterns import compile_pattern
from aeonloop.checks.units import UNIT_NAMES, Unit
from aeonloop.checks.wording import clip, quote

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

    #: What PREPARE is shown of the type (vocabulary.described): an example's fields beyond
    #: `type`, in the order shown. It is parsed as a check when shown, so it cannot name a field
    #: the type lacks or a value the type refuses.
    example: ClassVar[dict[str, Any]]
    #: What the check asks, in a few words after its example ("": the example says it all).
    gloss: ClassVar[str] = ""

    def describe(self) -> str:  # pragma: no cover - every check type has its own
        raise NotImplementedError


class RangeCheck(_Check):
    """A count within [min, max]: at least one bound, and min ≤ max."""

    min: Count | None = Field(None, description="the least count that holds (none: no least)")
    max: Count | None = Field(None, description="the most count that holds (none: no most)")

    @model_validator(mode="after")
    def _bounds(self) -> RangeCheck:
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
    example = {"pattern": "<regular expression>", "present": True}
    gloss = "the pattern occurs (present false: it must not occur)"
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
        return f"/{clip(self.pattern)}/ {'present' if self.present else 'absent'}{case}"


class PhraseCountCheck(RangeCheck):
    """How often a word or phrase occurs: non-overlapping occurrences of the exact text, counted
    from the start. Whole-word (the default): an occurrence next to a letter, digit or `_` does not
    count (`cat` is not in `concatenate`). Any case by default."""

    type: Literal["phrase_count"] = "phrase_count"
    example = {"phrase": "<word or phrase>", "min": 1, "max": None}
    gloss = (
        "how often the phrase occurs as whole words, in any case, within min and max"
        " (null: no bound)"
    )
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
            f"{quote(self.phrase)} {self.wanted()} time(s)"
            f"{_how(self.case_sensitive, self.whole_word)}"
        )


#: What a unit's name leaves unsaid, where PREPARE is shown the units (`_units_listed`).
_UNIT_HINTS = {"sections": "Markdown headings", "highlights": "*text*"}


def _units_listed() -> str:
    """The units a count check may count, as PREPARE is shown them: every unit by its name,
    with its hint, if it has one ("sections (Markdown headings)")."""
    shown = [f"{u} ({_UNIT_HINTS[u]})" if u in _UNIT_HINTS else u for u in get_args(Unit)]
    return f"{', '.join(shown[:-1])} or {shown[-1]}"


class CountCheck(RangeCheck):
    """How many words, sentences, paragraphs, lines, bullets, numbered items, sections (Markdown
    headings), placeholders (`[...]`), highlights (`*...*`) or characters the text has, within
    [min, max]. `unit` says in short what each counts; docs/verified-answers.md ("The check
    vocabulary") says it in full."""

    type: Literal["count"] = "count"
    example = {"unit": "words", "min": None, "max": 99}
    gloss = f"how many {_units_listed()} the answer has, within min and max"
    unit: Unit = Field(
        ...,
        description="what is counted: words; sentences; paragraphs (blocks between blank lines); "
        "lines (non-blank); bullets (lines starting with -, *, + or •); numbered_items (lines "
        "starting with 1. or 1)); sections (Markdown # headings); placeholders (text in square "
        "brackets, not links); highlights (text in *single* or **double** asterisks); characters",
    )

    def describe(self) -> str:
        return f"{self.wanted()} {UNIT_NAMES[self.unit]}"


class StartsWithCheck(_Check):
    """The text, without its leading whitespace, starts with `text`."""

    type: Literal["starts_with"] = "starts_with"
    example = {"text": "<text>"}
    text: str = Field(..., min_length=1, max_length=500, description="what the text starts with")
    case_sensitive: Case = False

    def describe(self) -> str:
        return f"starts with {quote(self.text)}{_case_only(self.case_sensitive)}"


class EndsWithCheck(_Check):
    """The text, without its trailing whitespace, ends with `text`."""

    type: Literal["ends_with"] = "ends_with"
    example = {"text": "<text>"}
    text: str = Field(..., min_length=1, max_length=500, description="what the text ends with")
    case_sensitive: Case = False

    def describe(self) -> str:
        return f"ends with {quote(self.text)}{_case_only(self.case_sensitive)}"


class ForbiddenWordsCheck(_Check):
    """None of the words (or phrases) occurs as a whole word: not next to a letter, digit or
    `_`. Any case by default."""

    type: Literal["forbidden_words"] = "forbidden_words"
    example = {"words": ["<word>"]}
    gloss = "none of the words occurs"
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
        listed = ", ".join(quote(w) for w in self.words[:5])
        more = f" and {len(self.words) - 5} more" if len(self.words) > 5 else ""
        return f"none of {listed}{more}{_how(self.case_sensitive, whole_word=True)}"


class CaseCheck(_Check):
    """Every cased letter of the text is upper case (`upper`) or lower case (`lower`). Digits,
    punctuation and letters of scripts without case are ignored; a text with no cased letter at
    all does not hold (there is nothing to judge)."""

    type: Literal["case"] = "case"
    example = {"case": "lower"}
    gloss = 'every letter is lower (or "upper") case'
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
    example = {"json_schema": None}
    gloss = "the answer is valid JSON (matching the JSON Schema, if given)"
    json_schema: dict[str, Any] | None = Field(
        None, description="a JSON Schema the value must match (none: any valid JSON)"
    )

    @model_validator(mode="after")
    def _schema_is_sound(self) -> JsonCheck:
        if self.json_schema is not None:
            check_schema(self.json_schema)
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
    example = {"code": "en"}
    gloss = "the answer is written in that language (ISO 639-1 code)"
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
#: The vocabulary's types, in the union's order.
CHECK_MODELS: tuple[type[_Check], ...] = get_args(get_args(Check)[0])
#: The vocabulary's `type`s, in the union's order.
CHECK_TYPES: tuple[str, ...] = tuple(model.model_fields["type"].default for model in CHECK_MODELS)
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


def asks_presence(check: Check) -> bool:
    """Whether a check only asks for something to occur (so more text cannot break it)."""
    if check.type == "pattern":
        return bool(check.present)
    if check.type == "phrase_count":
        return check.max is None
    return False


def _how(case_sensitive: bool, whole_word: bool) -> str:
    word = "whole word, " if whole_word else ""
    return f" ({word}{'same case' if case_sensitive else 'any case'})"


def _case_only(case_sensitive: bool) -> str:
    return "" if not case_sensitive else " (same case)"
