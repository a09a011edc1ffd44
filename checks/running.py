"""Running a check: its outcome on a text, synchronously, purely, under its time bound.

A check's raw outcome (`CheckOutcome`: held or not, and what was found) comes before any rule's
severity turns it into a verdict (phases.evaluation). `run_check` runs one check of the
vocabulary (types); `all_hold` runs the checks PREPARE made of one rule in words; `content_check`
runs a content check of the request schema (a pattern that must occur).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import regex

from aeonloop.checks.json_schema import json_verdict
from aeonloop.checks.language import describe_language, detect_language
from aeonloop.checks.patterns import (
    TimeBudget,
    bounded_findall,
    bounded_search,
    phrase_pattern,
    searched_note,
)
from aeonloop.checks.threads import RunBudget, cpu_seconds
from aeonloop.checks.types import (
    CaseCheck,
    Check,
    CountCheck,
    EndsWithCheck,
    ForbiddenWordsCheck,
    JsonCheck,
    LanguageCheck,
    PatternCheck,
    PhraseCountCheck,
    RangeCheck,
    StartsWithCheck,
)
from aeonloop.checks.units import UNIT_NAMES, count_units
from aeonloop.checks.wording import clip, quote
from aeonloop.exceptions import PatternTimedOut
from aeonloop.limits import DEFAULT_PATTERN_TIMEOUT_S

#: Why a rule in words was not run: PREPARE made no check of it.
UNPREPARED_REASON = "its check is in words and none was prepared"


@dataclass(frozen=True)
class CheckOutcome:
    """A check's raw result, before the rule's severity turns it into a verdict. `ran` is False
    when the check was not run at all (an executable check an operator has not allowed)."""

    held: bool
    details: str
    ran: bool = True


def run_check(
    check: Check,
    text: str,
    *,
    timeout: float = DEFAULT_PATTERN_TIMEOUT_S,
    budget: RunBudget | None = None,
) -> CheckOutcome:
    """The check's outcome on `text`: synchronous, pure, bounded. All the patterns the check runs
    (one, or a forbidden word each, or a JSON Schema's) share `timeout`: running out of it fails
    the check. The details say what was found and what was wanted.

    With the run's `budget`, the check is charged the CPU time it takes, its patterns get no
    more than the budget has left, and once the budget is spent the check fails unrun, saying
    why: a run's checks take AEON_RUN_CHECK_CPU_S of CPU together, and little more (a check
    that counts or reads a language is not bounded, being linear in the text)."""
    bound = f"the pattern ran out of its {timeout:g} s time bound"
    if budget is None:
        return _timed(check, text, timeout, bound)
    started = cpu_seconds()
    try:
        left = budget.left()
    except PatternTimedOut:
        return CheckOutcome(False, f"{check.describe()}: not run: {budget.spent_reason()}")
    try:
        return _timed(
            check, text, min(timeout, left), bound if timeout <= left else budget.spent_reason()
        )
    finally:
        budget.charge(cpu_seconds() - started)


def _timed(check: Check, text: str, timeout: float, ran_out: str) -> CheckOutcome:
    """The check's outcome under `timeout`; past it, a failure saying `ran_out`."""
    try:
        return _RUNNERS[check.type](check, text, TimeBudget(timeout))
    except PatternTimedOut:
        return CheckOutcome(False, f"{check.describe()}: {ran_out}; the check fails")


def _run_pattern(check: PatternCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    match = bounded_search(
        check.pattern, text, case_sensitive=check.case_sensitive, timeout=budget.left()
    )
    searched = searched_note(text)
    if match is not None:
        found = f"found /{clip(check.pattern)}/: {quote(match.group(0))}{searched}"
        return CheckOutcome(check.present, found if check.present else f"{found}, wanted absent")
    missing = f"/{clip(check.pattern)}/ not found{searched}"
    return CheckOutcome(not check.present, missing)


def _run_phrase_count(check: PhraseCountCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    count = len(_occurrences(check.phrase, text, check.case_sensitive, check.whole_word, budget))
    return _counted(check, count, f"{quote(check.phrase)} {count} time(s)", searched_note(text))


def _run_count(check: CountCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    count = count_units(check.unit, text)
    return _counted(check, count, f"{count} {UNIT_NAMES[check.unit]}")


def _counted(check: RangeCheck, count: int, found: str, searched: str = "") -> CheckOutcome:
    return CheckOutcome(check.within(count), f"{found}, wanted {check.wanted()}{searched}")


def _run_starts_with(check: StartsWithCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    start = text.lstrip()[: len(check.text)]
    held = _same(start, check.text, check.case_sensitive)
    return CheckOutcome(held, f"starts with {quote(start)}, wanted {quote(check.text)}")


def _run_ends_with(check: EndsWithCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    stripped = text.rstrip()
    end = stripped[max(0, len(stripped) - len(check.text)) :]
    held = _same(end, check.text, check.case_sensitive)
    return CheckOutcome(held, f"ends with {quote(end)}, wanted {quote(check.text)}")


def _same(found: str, wanted: str, case_sensitive: bool) -> bool:
    return found == wanted if case_sensitive else found.casefold() == wanted.casefold()


def _run_forbidden_words(check: ForbiddenWordsCheck, text: str, budget: TimeBudget) -> CheckOutcome:
    found = {
        word: n
        for word in check.words
        if (n := len(_occurrences(word, text, check.case_sensitive, True, budget)))
    }
    searched = searched_note(text)
    if not found:
        return CheckOutcome(
            True, f"none of the {len(check.words)} forbidden word(s) found{searched}"
        )
    listed = ", ".join(f"{quote(w)} ×{n}" for w, n in found.items())
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
    return CheckOutcome(*json_verdict(text, check.json_schema, budget))


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
    pattern = phrase_pattern(phrase, whole_word=whole_word)
    return bounded_findall(pattern, text, case_sensitive=case_sensitive, timeout=budget.left())


def content_check(
    pattern: str, output: str, timeout: float = DEFAULT_PATTERN_TIMEOUT_S
) -> CheckOutcome:
    """Whether the regular expression occurs anywhere in the output (a content check is a
    pattern check that wants it present)."""
    return run_check(PatternCheck(pattern=pattern), output, timeout=timeout)


def all_hold(
    checks: Sequence[Check], output: str, timeout: float, budget: RunBudget | None = None
) -> CheckOutcome:
    """The outcome of a rule in words: every prepared check holds. Details name the first that
    did not, or say what each found; with no checks, the rule is not run."""
    if not checks:
        return CheckOutcome(False, UNPREPARED_REASON, ran=False)
    held = []
    for check in checks:
        outcome = run_check(check, output, timeout=timeout, budget=budget)
        if not outcome.held:
            return CheckOutcome(False, f"{check.describe()}: {outcome.details}")
        held.append(outcome.details)
    return CheckOutcome(True, "; ".join(held))
