"""aeonloop.checks: the host-run check vocabulary (types.py), each type's semantics as running.py
runs it (units, patterns, JSON, language), and the time bound on patterns."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from aeonloop.checks.language import detect_language
from aeonloop.checks.patterns import PATTERN_INPUT_CHARS, TimeBudget, bounded_search
from aeonloop.checks.running import run_check
from aeonloop.checks.types import (
    CHECK_TYPES,
    CaseCheck,
    CountCheck,
    EndsWithCheck,
    ForbiddenWordsCheck,
    JsonCheck,
    LanguageCheck,
    PatternCheck,
    PhraseCountCheck,
    StartsWithCheck,
    parse_check,
)
from aeonloop.checks.units import count_units, sentences
from aeonloop.exceptions import PatternTimedOut

#: Matches nothing on the text below, but only after trying every way of splitting its words:
#: `re` takes longer than anyone waits; `regex` is kept to its bound.
CATASTROPHIC = r"(\w+\s?)*#"
#: "aaaa bbbb … zzzz" twenty times, then a `#` the pattern cannot reach from the words.
LONG_TEXT = " ".join(c * 4 for c in "abcdefghijklmnopqrstuvwxyz") * 20 + "!#"


def holds(check: dict[str, Any], text: str) -> bool:
    return run_check(parse_check(check), text).held


def count(unit: str, text: str) -> int:
    return count_units(unit, text)  # type: ignore[arg-type]


# ---- pattern --------------------------------------------------------------------------------


def test_pattern_present_and_absent() -> None:
    text = "The total is 42 EUR.\nA second line."
    assert holds({"type": "pattern", "pattern": r"\b42 EUR\b"}, text)
    assert holds({"type": "pattern", "pattern": r"^A second"}, text)  # ^ at every line
    assert not holds({"type": "pattern", "pattern": "USD"}, text)
    assert holds({"type": "pattern", "pattern": "USD", "present": False}, text)
    outcome = run_check(PatternCheck(pattern="EUR", present=False), text)
    assert not outcome.held and outcome.details == "found /EUR/: 'EUR', wanted absent"


def test_pattern_case_rule() -> None:
    assert not holds({"type": "pattern", "pattern": "paris"}, "Paris")
    assert holds({"type": "pattern", "pattern": "paris", "case_sensitive": False}, "Paris")


def test_pattern_uses_regex_syntax() -> None:
    """The `regex` package's syntax: Unicode properties, which `re` refuses, compile."""
    assert holds({"type": "pattern", "pattern": r"\p{Lu}\p{Ll}+"}, "über Zürich")


def test_a_pattern_that_does_not_compile_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"pattern check: pattern /\(/ does not compile"):
        parse_check({"type": "pattern", "pattern": "("})


# ---- the time bound ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_catastrophic_pattern_fails_its_check_within_its_bound() -> None:
    outcome = run_check(PatternCheck(pattern=CATASTROPHIC), LONG_TEXT, timeout=0.05)
    assert not outcome.held and outcome.ran
    assert "ran out of its 0.05 s time bound; the check fails" in outcome.details


@pytest.mark.timeout(60)
def test_running_out_of_time_fails_an_absent_pattern_too() -> None:
    """Not finding the pattern in time is not knowing it is absent."""
    check = PatternCheck(pattern=CATASTROPHIC, present=False)
    assert not run_check(check, LONG_TEXT, timeout=0.05).held


@pytest.mark.timeout(60)
def test_bounded_search_raises_pattern_timed_out() -> None:
    with pytest.raises(PatternTimedOut, match="time bound"):
        bounded_search(CATASTROPHIC, LONG_TEXT, timeout=0.05)


def test_patterns_see_only_the_first_characters_and_say_so() -> None:
    text = "a" * PATTERN_INPUT_CHARS + "needle"
    outcome = run_check(PatternCheck(pattern="needle"), text)
    assert not outcome.held
    assert f"searched the first {PATTERN_INPUT_CHARS:,} of {len(text):,} characters" in (
        outcome.details
    )


# ---- phrase_count -----------------------------------------------------------------------------


def test_phrase_count_whole_words_any_case_by_default() -> None:
    text = "Cats and a cat. The CAT concatenates; cat-like."
    check = PhraseCountCheck(phrase="cat", min=3, max=3)
    outcome = run_check(check, text)
    # "cat", "CAT", "cat" of cat-like; not "Cats", not "concatenates".
    assert outcome.held and outcome.details == "'cat' 3 time(s), wanted exactly 3"
    assert count_of(PhraseCountCheck(phrase="cat", min=0, whole_word=False), text) == 5
    assert count_of(PhraseCountCheck(phrase="cat", min=0, case_sensitive=True), text) == 2


def count_of(check: PhraseCountCheck, text: str) -> int:
    return int(run_check(check, text).details.split(" time(s)")[0].rsplit(" ", 1)[1])


def test_phrase_count_phrases_and_bounds() -> None:
    text = "New York is big. I love new york. NEW YORK!"
    assert holds({"type": "phrase_count", "phrase": "new york", "min": 3}, text)
    assert not holds({"type": "phrase_count", "phrase": "new york", "max": 2}, text)
    assert holds({"type": "phrase_count", "phrase": "Boston", "max": 0}, text)
    # A phrase with pattern characters is taken literally.
    assert holds({"type": "phrase_count", "phrase": "C++", "min": 1, "max": 1}, "I use C++ a lot")


# ---- count: each unit -------------------------------------------------------------------------

MARKDOWN = """# Title

Intro paragraph, one line.
Second line of the same paragraph.

## Items

- dash
* star
+ plus
  - nested
1. one
2) two
10. ten

---
***

```python
# a comment, not a heading
- not a bullet
1. not an item
```
"""


def test_bullets_are_dash_star_plus_lines_at_any_indentation() -> None:
    assert count("bullets", MARKDOWN) == 4
    assert count("bullets", "- a\n-b\n**bold** text\n* * *\n• dot") == 2  # "-b": no space


def test_numbered_items() -> None:
    assert count("numbered_items", MARKDOWN) == 3
    assert count("numbered_items", "1.5 million\n2024. A year") == 1


def test_sections_are_atx_headings_outside_code() -> None:
    assert count("sections", MARKDOWN) == 2
    assert count("sections", "#hashtag\n####### seven\n   ### indented") == 1


def test_paragraphs_are_blocks_between_blank_lines() -> None:
    text = "First.\nStill first.\n\n\nSecond.\n\n# Heading only\n\n---\n\nThird."
    assert count("paragraphs", text) == 3
    assert count("paragraphs", "") == 0
    assert count("paragraphs", "one block\n- with a list") == 1


def test_lines_are_non_blank_lines() -> None:
    assert count("lines", "a\n\n  \nb\nc\n") == 3
    assert count("lines", "") == 0


def test_words() -> None:
    assert count("words", "Don't split well-known words; 3.14 and 1,000 are one each.") == 10
    assert count("words", "# Title\n\n- **bold** | `code` --- ...") == 3
    assert count("words", "") == 0
    assert count("words", "Überall große Städte") == 3


def test_characters_leave_out_surrounding_whitespace() -> None:
    assert count("characters", "  héllo world \n") == 11
    assert count("characters", "") == 0


def test_placeholders_are_bracketed_text_but_not_links_or_boxes() -> None:
    text = (
        "Dear [name], on [date] we met. See [the docs](https://x.org) and ![img](a.png).\n"
        "[ref]: https://x.org\n- [ ] a task\n- [x] done [owner]\nEmpty [ ] and [[nested]]"
    )
    assert count("placeholders", text) == 4  # name, date, owner, nested


def test_sentences_and_abbreviations() -> None:
    text = (
        "Dr. Smith met J. Doe at 3 p.m. in the U.S. capital. It rained! Did it?! "
        'Prices rose, e.g. for tea. Pi is 3.14 exactly… Then "it ended." Next'
    )
    assert sentences(text) == [
        "Dr. Smith met J. Doe at 3 p.m. in the U.S. capital.",
        "It rained!",
        "Did it?!",
        "Prices rose, e.g. for tea.",
        "Pi is 3.14 exactly…",
        'Then "it ended."',
        "Next",
    ]


def test_sentences_end_at_list_items_and_leave_out_headings_and_code() -> None:
    text = "# A heading\n\nOne sentence\nacross lines.\n- an item\n- another.\n```\nx = 1.\n```"
    assert sentences(text) == ["One sentence across lines.", "an item", "another."]
    assert count("sentences", "") == 0
    assert count("sentences", "... !!! ?") == 0


def test_count_ranges() -> None:
    text = "- a\n- b\n- c"
    assert holds({"type": "count", "unit": "bullets", "min": 3, "max": 3}, text)
    assert holds({"type": "count", "unit": "bullets", "min": 2}, text)
    assert not holds({"type": "count", "unit": "bullets", "max": 2}, text)
    assert holds({"type": "count", "unit": "words", "max": 0}, "")
    outcome = run_check(CountCheck(unit="bullets", min=2, max=2), text)
    assert outcome.details == "3 bullet line(s), wanted exactly 2"


# ---- starts_with, ends_with, forbidden words, case --------------------------------------------


def test_starts_with_and_ends_with() -> None:
    text = "\n  Dear Ann,\nthank you.\nBest regards  \n"
    assert holds({"type": "starts_with", "text": "dear ann"}, text)
    assert not holds({"type": "starts_with", "text": "dear ann", "case_sensitive": True}, text)
    assert holds({"type": "ends_with", "text": "Best regards"}, text)
    assert not holds({"type": "ends_with", "text": "regards."}, text)
    assert not holds({"type": "starts_with", "text": "Dear"}, "")
    outcome = run_check(EndsWithCheck(text="Thanks"), "ok")
    assert outcome.details == "ends with 'ok', wanted 'Thanks'"


def test_forbidden_words() -> None:
    check = ForbiddenWordsCheck(words=["very", "basically"])
    outcome = run_check(check, "Very good, every time, VERY good.")
    assert not outcome.held and outcome.details == "found 'very' ×2"  # not "every"
    assert run_check(check, "Good, every time.").held
    assert run_check(check, "").held


def test_case() -> None:
    assert run_check(CaseCheck(case="upper"), "HELLO, WORLD 42! ÉTÉ").held
    lower = run_check(CaseCheck(case="upper"), "HELLO world")
    assert not lower.held and lower.details.startswith("5 of 10 letters are lower case")
    assert run_check(CaseCheck(case="lower"), "hello, 世界").held  # uncased letters ignored
    empty = run_check(CaseCheck(case="lower"), "123 !")
    assert not empty.held and "no cased letters" in empty.details


# ---- json ---------------------------------------------------------------------------------------


def test_json_valid_fenced_and_invalid() -> None:
    assert holds({"type": "json"}, ' {"a": [1, 2]} ')
    assert holds({"type": "json"}, '```json\n{"a": 1}\n```')
    assert not holds({"type": "json"}, '{"a": 1,}')
    assert not holds({"type": "json"}, 'Here it is: {"a": 1}')
    assert not holds({"type": "json"}, "")


def test_json_schema() -> None:
    schema = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "pattern": "^[A-Z]"}},
    }
    check = {"type": "json", "json_schema": schema}
    assert holds(check, '{"name": "Ann"}')
    missing = run_check(parse_check(check), '{"age": 3}')
    assert not missing.held and "'name' is a required property" in missing.details
    wrong = run_check(parse_check(check), '{"name": "ann"}')
    assert not wrong.held and wrong.details.startswith("valid JSON, but at name:")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": CATASTROPHIC},
        # Under a `not`, a timed-out pattern must not read as a mismatch, hence "valid".
        {"not": {"type": "string", "pattern": CATASTROPHIC}},
        {"type": "object", "patternProperties": {CATASTROPHIC: {"type": "integer"}}},
    ],
)
def test_a_json_schemas_patterns_are_bounded_too(schema: dict[str, Any]) -> None:
    text = json.dumps({LONG_TEXT: 1}) if "patternProperties" in schema else json.dumps(LONG_TEXT)
    outcome = run_check(JsonCheck(json_schema=schema), text, timeout=0.05)
    assert not outcome.held
    assert outcome.details.endswith("ran out of its 0.05 s time bound; the check fails")


def test_a_checks_patterns_share_one_time_budget() -> None:
    """Each pattern of a check is given what is left of its bound; once it is spent, none
    starts."""
    budget = TimeBudget(0.05)
    assert 0 < budget.left() <= 0.05
    time.sleep(0.06)
    with pytest.raises(PatternTimedOut, match=r"ran out of its 0\.05 s time bound"):
        budget.left()


@pytest.mark.timeout(60)
def test_a_check_of_many_words_is_bounded_too() -> None:
    check = ForbiddenWordsCheck(words=["x"] * 100)
    outcome = run_check(check, "x " * 50_000, timeout=0.0001)
    assert not outcome.held
    assert outcome.details.endswith("ran out of its 0.0001 s time bound; the check fails")


def test_json_refs_are_resolved_in_the_schema_alone() -> None:
    inner = {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}
    assert run_check(JsonCheck(json_schema=inner), '{"a": 1}').held
    assert not run_check(JsonCheck(json_schema=inner), '{"a": "x"}').held
    for ref in ("https://example.org/schema.json", "#/$defs/nowhere"):
        outcome = run_check(JsonCheck(json_schema={"$ref": ref}), '{"a": 1}')
        assert not outcome.held and outcome.details.startswith("the schema cannot be used")


def test_json_nested_past_the_interpreters_depth_fails_without_raising() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    outcome = run_check(JsonCheck(), deep)
    assert not outcome.held and "nested too deeply" in outcome.details


def test_a_json_schema_nested_too_deeply_is_a_value_error() -> None:
    schema: dict[str, Any] = {}
    inner = schema
    for _ in range(1000):
        inner["items"] = {}
        inner = inner["items"]
    with pytest.raises(ValueError, match="'json_schema' nests 1001 levels deep; at most 32"):
        parse_check({"type": "json", "json_schema": schema})


def test_an_unsound_json_schema_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a sound JSON Schema"):
        parse_check({"type": "json", "json_schema": {"type": 5}})
    with pytest.raises(ValueError, match=r"not a sound JSON Schema: '\(' is not a 'regex'"):
        parse_check({"type": "json", "json_schema": {"pattern": "("}})


# ---- language -----------------------------------------------------------------------------------

SAMPLES = {
    "en": "The capital of France is Paris, and it is known for the Eiffel Tower.",
    "fr": "La capitale de la France est Paris, et elle est connue pour la tour Eiffel.",
    "de": "Die Hauptstadt von Frankreich ist Paris, und sie ist für den Eiffelturm bekannt.",
    "es": "La capital de Francia es París, y es conocida por la torre Eiffel en el centro.",
    "it": "La capitale della Francia è Parigi, ed è famosa per la torre Eiffel che non ha pari.",
    "pt": "A capital da França é Paris, e é conhecida pela torre Eiffel e muito mais.",
    "nl": "De hoofdstad van Frankrijk is Parijs, en het is bekend om de Eiffeltoren.",
    "pl": "Stolicą Francji jest Paryż, i jest znana z wieży Eiffla, która jest bardzo wysoka.",
    "tr": "Fransa'nın başkenti Paris ve bu şehir Eyfel Kulesi ile çok ünlü bir yer.",
    "sv": "Huvudstaden i Frankrike är Paris, och den är känd för Eiffeltornet som är högt.",
    "ru": "Столица Франции — Париж, и он известен Эйфелевой башней.",
    "ja": "フランスの首都はパリで、エッフェル塔で知られています。",
    "zh": "法国的首都是巴黎，以埃菲尔铁塔闻名。",
    "ko": "프랑스의 수도는 파리이며 에펠탑으로 유명합니다.",
    "ar": "عاصمة فرنسا هي باريس، وهي مشهورة ببرج إيفل.",
    "hi": "फ्रांस की राजधानी पेरिस है, और यह एफिल टॉवर के लिए प्रसिद्ध है।",
}


@pytest.mark.parametrize("code", sorted(SAMPLES))
def test_language_tells_each_known_language(code: str) -> None:
    assert detect_language(SAMPLES[code]).code == code
    assert run_check(LanguageCheck(code=code), SAMPLES[code]).held
    other = "en" if code != "en" else "fr"
    outcome = run_check(LanguageCheck(code=other), SAMPLES[code])
    assert not outcome.held and outcome.details.startswith("reads as ")


def test_language_too_short_or_unknown_does_not_hold() -> None:
    assert detect_language("Paris.").code is None
    outcome = run_check(LanguageCheck(code="en"), "Paris.")
    assert not outcome.held and "too short to tell" in outcome.details
    assert not run_check(LanguageCheck(code="en"), "").held
    assert not run_check(LanguageCheck(code="en"), "zzq xkcd brrt vvv plo").held
    with pytest.raises(ValueError, match="not one this check can tell"):
        parse_check({"type": "language", "code": "xx"})


# ---- parsing and describing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (["pattern"], "a check is a JSON object, not list"),
        ({"type": "regexp"}, "unknown check type 'regexp'; the types are pattern,"),
        ({"pattern": "x"}, "unknown check type None"),
        ({"type": "count", "unit": "bullets"}, "count check: a count needs 'min', 'max' or both"),
        ({"type": "count", "unit": "bullets", "min": 3, "max": 2}, "'min' (3) is above 'max' (2)"),
        ({"type": "count", "unit": "bullets", "min": -1}, "count check: min: Input should be"),
        ({"type": "count", "unit": "pages", "min": 1}, "count check: unit: Input should be"),
        ({"type": "pattern", "pattern": "x", "rule_id": "r"}, "rule_id: Extra inputs"),
        ({"type": "phrase_count", "phrase": "  ", "min": 1}, "'phrase' is blank"),
        ({"type": "forbidden_words", "words": []}, "words: List should have at least 1 item"),
        ({"type": "case", "case": "title"}, "case check: case: Input should be 'upper' or"),
    ],
)
def test_parse_errors_are_one_line_value_errors(data: Any, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_check(data)
    assert reason in str(caught.value) and "\n" not in str(caught.value)


EXAMPLES: dict[str, tuple[dict[str, Any], str]] = {
    "pattern": ({"type": "pattern", "pattern": "EUR", "present": False}, "/EUR/ absent"),
    "phrase_count": (
        {"type": "phrase_count", "phrase": "Paris", "min": 2},
        "'Paris' at least 2 time(s) (whole word, any case)",
    ),
    "count": (
        {"type": "count", "unit": "words", "min": 50, "max": 100},
        "between 50 and 100 word(s)",
    ),
    "starts_with": ({"type": "starts_with", "text": "Dear"}, "starts with 'Dear'"),
    "ends_with": (
        {"type": "ends_with", "text": "Thanks", "case_sensitive": True},
        "ends with 'Thanks' (same case)",
    ),
    "forbidden_words": (
        {"type": "forbidden_words", "words": ["very", "really"]},
        "none of 'very', 'really' (whole word, any case)",
    ),
    "case": ({"type": "case", "case": "upper"}, "all upper case"),
    "json": ({"type": "json", "json_schema": {"type": "object"}}, "valid JSON matching a schema"),
    "language": ({"type": "language", "code": "fr"}, "written in French (fr)"),
}


def test_every_type_has_an_example() -> None:
    assert set(EXAMPLES) == set(CHECK_TYPES) and len(CHECK_TYPES) == 9


@pytest.mark.parametrize("kind", CHECK_TYPES)
def test_describe_is_one_line_and_a_check_round_trips(kind: str) -> None:
    data, described = EXAMPLES[kind]
    check = parse_check(data)
    assert check.describe() == described
    assert run_check(check, "Some text.").details  # every type has its runner
    assert parse_check(check.model_dump()) == check
    assert parse_check(json.loads(check.model_dump_json())) == check


def test_count_ranges_read_as_people_say_them() -> None:
    assert CountCheck(unit="bullets", min=3, max=3).describe() == "exactly 3 bullet line(s)"
    assert CountCheck(unit="words", max=100).describe() == "at most 100 word(s)"
    assert CountCheck(unit="words", min=0, max=100).describe() == "at most 100 word(s)"
    assert CountCheck(unit="sections", min=2).describe() == (
        "at least 2 section(s) (Markdown headings)"
    )


def test_checks_in_code_need_no_type() -> None:
    """Each model knows its own type (its JSON Schema still requires it, as parsing does)."""
    assert StartsWithCheck(text="Hi").type == "starts_with"
    assert "type" in StartsWithCheck.model_json_schema()["required"]
