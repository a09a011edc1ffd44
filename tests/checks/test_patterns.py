"""checks/patterns.py: regular expressions under a time bound, which all the patterns of one
check share, on the first PATTERN_INPUT_CHARS characters of a text."""

from __future__ import annotations

import time

import pytest
from checks_support import CATASTROPHIC, LONG_TEXT, holds

from aeonloop.checks.patterns import PATTERN_INPUT_CHARS, TimeBudget, bounded_search
from aeonloop.checks.running import run_check
from aeonloop.checks.types import (
    ForbiddenWordsCheck,
    PatternCheck,
    parse_check,
)
from aeonloop.exceptions import PatternTimedOut

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


def test_a_checks_patterns_share_one_time_budget() -> None:
    """Each pattern of a check is given what is left of its bound; once it is spent, none
    starts. The bound is CPU time, as the `regex` package counts its own: waiting spends none
    of it (on a loaded machine a check waits for a core), working does."""
    budget = TimeBudget(0.05)
    assert 0 < budget.left() <= 0.05
    time.sleep(0.06)
    assert budget.left() > 0.03
    started = time.thread_time()
    while time.thread_time() - started < 0.06:
        pass
    with pytest.raises(PatternTimedOut, match=r"ran out of its 0\.05 s time bound"):
        budget.left()


@pytest.mark.timeout(60)
def test_a_check_of_many_words_is_bounded_too() -> None:
    check = ForbiddenWordsCheck(words=["x"] * 100)
    outcome = run_check(check, "x " * 50_000, timeout=0.0001)
    assert not outcome.held
    assert outcome.details.endswith("ran out of its 0.0001 s time bound; the check fails")
