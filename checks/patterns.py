"""Regular expressions under a time bound: every pattern a check runs, the user's or the model's.

Every regular expression runs with the `regex` package under a time bound (`bounded_search`),
which all the patterns of one check share (`TimeBudget`): a pattern that backtracks without end
becomes a failed check saying it ran out of time, never a stalled worker. The bound is CPU time:
`regex` stops a pattern once the process has spent the bound since the pattern began (C's
`clock()`), so a pattern never takes more of its own thread's CPU than that, and takes less
while other threads work; all of a run's checks share a larger bound
(checks.threads.RunBudget). Patterns see at most `PATTERN_INPUT_CHARS` characters of the text
(the first ones); a check on a longer text says how much it searched (`searched_note`).
"""

from __future__ import annotations

import time

import regex

from aeonloop.checks.wording import clip
from aeonloop.exceptions import PatternTimedOut
from aeonloop.limits import DEFAULT_PATTERN_TIMEOUT_S

#: Characters of a text a pattern is run on: the first ones. Far above any answer (a step's
#: output is cut at AEON_MAX_STEP_OUTPUT_CHARS, 20,000 unless set); a bound on input keeps the
#: time bound meaningful and the memory of a match small.
PATTERN_INPUT_CHARS = 100_000


def compile_pattern(pattern: str, *, case_sensitive: bool = True) -> regex.Pattern[str]:
    """The pattern compiled as checks run it (multi-line: `^` and `$` match at each line);
    ValueError with the reason when it does not compile."""
    flags = regex.MULTILINE | (0 if case_sensitive else regex.IGNORECASE)
    try:
        return regex.compile(pattern, flags)
    except (regex.error, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ValueError(f"pattern /{clip(pattern)}/ does not compile: {exc}") from None


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
    starts once it is spent (`PatternTimedOut`). Counted in the thread's CPU time, which the
    process's CPU time that `regex` bounds a pattern by is never less than: on a loaded machine
    a pattern waiting for a core spends none of it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._ends = time.thread_time() + seconds

    def left(self) -> float:
        left = self._ends - time.thread_time()
        if left <= 0:
            raise PatternTimedOut(self.seconds)
        return left


def _compiled(pattern: str | regex.Pattern[str], case_sensitive: bool) -> regex.Pattern[str]:
    if isinstance(pattern, str):
        return compile_pattern(pattern, case_sensitive=case_sensitive)
    return pattern


def _bounded(text: str) -> str:
    return text[:PATTERN_INPUT_CHARS]


def searched_note(text: str) -> str:
    """What a detail adds when a pattern saw only part of the text."""
    if len(text) <= PATTERN_INPUT_CHARS:
        return ""
    return f" (searched the first {PATTERN_INPUT_CHARS:,} of {len(text):,} characters)"


def phrase_pattern(phrase: str, *, whole_word: bool) -> str:
    """The pattern of a literal phrase (its surrounding whitespace dropped); a whole word's does
    not match next to a letter, digit or `_`."""
    literal = regex.escape(phrase.strip())
    return rf"(?<!\w){literal}(?!\w)" if whole_word else literal
