"""Repairs on the host (checks/repairs.py): each lossless fix, its refusal where none exists,
and a repair that would break another check dropped."""

from __future__ import annotations

import json

import pytest

from aeonloop.checks.repairs import LEFT_TO_THE_MODEL, REPAIRS, repair
from aeonloop.checks.running import run_check
from aeonloop.checks.stated import TITLE_PATTERN, stated_checks
from aeonloop.checks.types import CHECK_TYPES, parse_check


def made(*checks: dict) -> list:
    return [parse_check(check) for check in checks]


LOWER = {"type": "case", "case": "lower"}
UPPER = {"type": "case", "case": "upper"}
JSON = {"type": "json", "json_schema": None}
TITLE = {"type": "pattern", "pattern": TITLE_PATTERN}
#: The host's own first-line and heading patterns, as it reads them in a request.
FIRST_LINE, HEADING_FOR, HEADING_AGAINST = (
    check["check"]
    for check in stated_checks(
        "Give it the title 'The Painter' on the first line, under headings 'For' and 'Against'.",
        "",
    )
)
QUOTES = ({"type": "starts_with", "text": '"'}, {"type": "ends_with", "text": '"'})


def test_every_check_type_declares_a_fix_or_why_it_has_none() -> None:
    assert set(REPAIRS) | set(LEFT_TO_THE_MODEL) == set(CHECK_TYPES)
    assert not set(REPAIRS) & set(LEFT_TO_THE_MODEL)


@pytest.mark.parametrize(
    ("text", "checks", "fixed", "names"),
    [
        ("Apples\nPears", [LOWER], "apples\npears", ["lower-cased by the host"]),
        ("Apples and pears", [UPPER], "APPLES AND PEARS", ["upper-cased by the host"]),
        (
            "Paris is the capital.",
            list(QUOTES),
            '"Paris is the capital."',
            ["opening '\"' added by the host", "ending '\"' added by the host"],
        ),
        (
            "Paris is the capital.",
            [{"type": "ends_with", "text": "Is there anything else?"}],
            "Paris is the capital. Is there anything else?",
            ["ending 'Is there anything else?' added by the host"],
        ),
        (  # the ending added takes the case asked (an ending matches in any case by default)
            "Tea is Nice.",
            [LOWER, {"type": "ends_with", "text": "Any other questions?"}],
            "tea is nice. any other questions?",
            ["ending 'Any other questions?' added by the host", "lower-cased by the host"],
        ),
        (  # a near copy of the ending is replaced, not said twice
            "Sure. any other questions.",
            [{"type": "ends_with", "text": "Any other questions?"}],
            "Sure. Any other questions?",
            ["ending 'Any other questions?' added by the host"],
        ),
        (
            "my answer is: it rains",
            [{"type": "starts_with", "text": "My answer is", "case_sensitive": True}],
            "My answer is it rains",
            ["opening 'My answer is' added by the host"],
        ),
        (
            '"Half quoted.',
            list(QUOTES),
            '"Half quoted."',
            ["ending '\"' added by the host"],
        ),
        (
            "  Paris is the capital.",
            [{"type": "starts_with", "text": "My answer:"}],
            "My answer: Paris is the capital.",
            ["opening 'My answer:' added by the host"],
        ),
        (
            'Here it is:\n```json\n{"a": 1}\n```\nHope that helps.',
            [JSON],
            '{\n  "a": 1\n}',
            ["JSON taken out of the text by the host"],
        ),
        (
            'The list is ["x", "y"], as asked.',
            [JSON],
            '[\n  "x",\n  "y"\n]',
            ["JSON taken out of the text by the host"],
        ),
        (
            "# Poem of Joy\n\nThe sun is up.",
            [TITLE],
            "<<Poem of Joy>>\n\nThe sun is up.",
            ["title marked <<Poem of Joy>> by the host"],
        ),
        (
            "**A Day at Sea**\n\nThe waves were high.",
            [TITLE],
            "<<A Day at Sea>>\n\nThe waves were high.",
            ["title marked <<A Day at Sea>> by the host"],
        ),
        (
            "**For:** fewer crashes.\n\n**Against** - lost jobs.",
            [HEADING_FOR, HEADING_AGAINST],
            "For\nfewer crashes.\n\nAgainst\nlost jobs.",
            [
                "heading 'For' put on a line of its own by the host",
                "heading 'Against' put on a line of its own by the host",
            ],
        ),
        (
            "Title: the painter\n\nA robot painted.",
            [FIRST_LINE],
            "The Painter\n\nA robot painted.",
            ["first line 'The Painter' put first by the host"],
        ),
        (
            "A robot painted.",
            [FIRST_LINE],
            "The Painter\nA robot painted.",
            ["first line 'The Painter' put first by the host"],
        ),
    ],
)
def test_each_repair_fixes_its_check(text: str, checks: list, fixed: str, names: list) -> None:
    parsed = made(*checks)
    assert repair(text, parsed) == (fixed, names)
    assert all(run_check(check, fixed).held for check in parsed)


@pytest.mark.parametrize(
    ("text", "check"),
    [
        # no lossless fix exists
        ("Paris.", {"type": "starts_with", "text": "Yes"}),  # the host would answer for it
        ("It is round.", {"type": "ends_with", "text": "No."}),
        ('{"a": 1} and {"b": 2}', JSON),  # which one was meant?
        ("No JSON here, only 3 numbers: 1, 2.", JSON),
        ("[" * 5000, JSON),  # nested too deeply to read: no error, no repair
        ("```json\n" + "[" * 5000 + "\n```", JSON),
        ("{ " * 300 + '{"a": 1}', JSON),  # more openings than are searched
        ('```json\n{"a": 1}\n```', {"type": "json", "json_schema": {"required": ["b"]}}),
        ("The sun is up. The waves were high.", TITLE),  # no title to mark
        ("A first line that ends.\n\nMore.", TITLE),
        # a heading asked where no line opens with it, or runs on without a colon or a dash
        ("Cars are safer.\nThey cost more.", HEADING_FOR),
        ("For self-driving cars: safety.", HEADING_FOR),
        ("For-profit firms build them.", HEADING_FOR),
        # a line pattern the host did not write has no fix
        ("Pros: cheap", {"type": "pattern", "pattern": "^Pros$"}),
        # left to the model
        ("One two three four five.", {"type": "count", "unit": "words", "max": 3}),
        ("- a\n- b", {"type": "count", "unit": "bullets", "min": 3}),
        ("Paris is nice, very nice.", {"type": "forbidden_words", "words": ["very"]}),
        ("Paris.", {"type": "phrase_count", "phrase": "France", "min": 1}),
        ("The capital is Paris.", {"type": "language", "code": "fr"}),
        ("P.S. later", {"type": "pattern", "pattern": "^P\\.S\\.", "present": False}),
    ],
)
def test_no_repair_where_no_lossless_fix_exists(text: str, check: dict) -> None:
    assert repair(text, made(check)) == (text, [])


def test_a_text_that_holds_is_left_as_it_is() -> None:
    assert repair('"all lower"', made(LOWER, *QUOTES)) == ('"all lower"', [])


@pytest.mark.parametrize(
    ("text", "checks", "kept"),
    [
        # recasing would break a case-sensitive opening the text holds
        (
            "Paris is nice.",
            [LOWER, {"type": "starts_with", "text": "Paris", "case_sensitive": True}],
            [],
        ),
        # upper-casing JSON's `true` makes it not JSON: the JSON repair stays, the recase goes
        ('Result: {"ok": true}', [JSON, UPPER], ["JSON taken out of the text by the host"]),
        # an ending asked in its own case: recasing after it would break it, so the recase goes
        (
            "Tea is Nice.",
            [LOWER, {"type": "ends_with", "text": "Any other questions?", "case_sensitive": True}],
            ["ending 'Any other questions?' added by the host"],
        ),
        # quotes around JSON make it not JSON
        ('{"a": 1}', [JSON, *QUOTES], []),
        # an ending would push the text past its word limit
        (
            "one two three",
            [{"type": "ends_with", "text": "bye"}, {"type": "count", "unit": "words", "max": 3}],
            [],
        ),
    ],
)
def test_a_repair_that_breaks_another_check_is_dropped(text: str, checks: list, kept: list) -> None:
    parsed = made(*checks)
    fixed, names = repair(text, parsed)
    assert names == kept
    held_before = [c for c in parsed if run_check(c, text).held]
    assert all(run_check(c, fixed).held for c in held_before)
    if "JSON taken out of the text by the host" in names:
        assert json.loads(fixed) == {"ok": True}
