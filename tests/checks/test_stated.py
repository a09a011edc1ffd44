"""The constraints a text states in so many words (checks/stated.py): what the host adopts as
PREPARE's floor and the offline model prepares from."""

from __future__ import annotations

import pytest

from aeonloop.checks.running import run_check
from aeonloop.checks.stated import (
    SHORT_ASK_WORDS,
    one_short_ask,
    stated_checks,
    stated_constraints,
)
from aeonloop.checks.types import parse_check


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("List three fruits as three bullet points.", [("bullets", "count", 3, 3)]),
        ("Answer in one sentence.", [("sentences", "count", 1, 1)]),
        ("Explain it in under 100 words.", [("words", "count", None, 99)]),
        ("The answer names Mars.", [("mentions-mars", "phrase_count", 1, None)]),
        ("It must include Lisbon twice.", [("mentions-lisbon", "phrase_count", 2, None)]),
        ('Mention "Darjeeling".', [("mentions-darjeeling", "phrase_count", 1, None)]),
        ("Name two planets.", []),  # "two" is no name: nothing to check
        ("Explain how tides work.", []),
    ],
)
def test_what_a_text_states(text: str, expected: list[tuple]) -> None:
    found = [
        (name, check["type"], check.get("min"), check.get("max"))
        for name, _, check in stated_constraints(text)
    ]
    assert found == expected


def test_a_rule_in_words_keeps_its_id_and_the_request_gets_its_own() -> None:
    checks = stated_checks("Name two planets in one sentence.", "- mars: The answer names Mars.")
    assert [(c["rule_id"], c["description"]) for c in checks] == [
        ("mars", "mentions Mars"),
        ("request.sentences", "exactly 1 sentence"),
    ]


@pytest.mark.parametrize(
    ("request_text", "short"),
    [
        ("What is the capital of France?", True),
        ("List three fruits as bullet points, in lower case, and write nothing else.", True),
        ("What is 2.5 times 3?", True),  # a decimal point ends no sentence
        ("Explain how photosynthesis works, then rewrite it for a 10-year-old", False),
        ("Name two planets. Then say which is bigger.", False),
        ("Compare the two; say which is cheaper.", False),
        ("Summarise this:\nthe report's findings", False),
        (" ".join(["word"] * (SHORT_ASK_WORDS + 1)), False),
        ("   ", False),
    ],
)
def test_one_short_ask(request_text: str, short: bool) -> None:
    assert one_short_ask(request_text) is short


@pytest.mark.parametrize(
    ("rule", "phrase"),
    [
        ("Mention gravity.", "gravity"),
        ("Mention carbon dioxide.", "carbon dioxide"),
        ("Use the word wavelength.", "wavelength"),
        ("name the moon", "moon"),
        ("Name the Moon as a cause.", None),  # more than a thing to mention
        ("Name two planets.", None),  # any two: no phrase to find
        ("Use bullet points.", None),  # a form, not a word to use
        ("Include examples.", None),
        ("Mention the history of tides and their causes at length.", None),
    ],
)
def test_a_rule_in_words_that_only_says_mention_x(rule: str, phrase: str | None) -> None:
    """Issue 32's harness: "Mention gravity." went unchecked when the model prepared nothing,
    since the request's reading wants a capital or quotes."""
    checks = stated_checks("Explain tides.", f"- r: {rule}")
    assert [c["check"]["phrase"] for c in checks] == ([phrase] if phrase else [])


#: A request stating every form the host reads, and an answer that meets each of them.
EVERY_FORM = (
    'Start with "Yes" and end with "Done". List three bullet points in lower case, under 40 words, '
    'mention "tea" twice, and avoid the word "coffee". Give it as JSON.'
)


def test_every_check_the_host_reads_is_one_it_runs() -> None:
    """What the host reads is parsed as any prepared check is, and run: a form the reader writes
    and the vocabulary refuses (a field renamed, a unit gone) fails here, not in a run."""
    stated = stated_constraints(EVERY_FORM)
    assert {check["type"] for _, _, check in stated} == {
        "starts_with",
        "ends_with",
        "count",
        "case",
        "phrase_count",
        "forbidden_words",
        "json",
    }
    for _, said, check in stated:
        made = parse_check(check)
        assert run_check(made, "").details, said
