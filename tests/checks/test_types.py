"""checks/types.py: the check types, each run on a text (checks/running.py), parsed from JSON with
a one-line reason when it is not a check, and described in one line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from checks_support import holds

from aeonloop.checks.running import run_check
from aeonloop.checks.types import (
    CHECK_TYPES,
    CaseCheck,
    CountCheck,
    EndsWithCheck,
    ForbiddenWordsCheck,
    PhraseCountCheck,
    StartsWithCheck,
    parse_check,
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
