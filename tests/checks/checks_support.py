"""What the tests of aeonloop.checks share: a check run from its JSON form, a unit counted, and
a pattern that backtracks without end on a text made for it."""

from __future__ import annotations

from typing import Any

from aeonloop.checks.running import run_check
from aeonloop.checks.types import parse_check
from aeonloop.checks.units import count_units

#: Matches nothing on the text below, but only after trying every way of splitting its words:
#: `re` takes longer than anyone waits; `regex` is kept to its bound.
CATASTROPHIC = r"(\w+\s?)*#"
#: "aaaa bbbb … zzzz" twenty times, then a `#` the pattern cannot reach from the words.
LONG_TEXT = " ".join(c * 4 for c in "abcdefghijklmnopqrstuvwxyz") * 20 + "!#"


def holds(check: dict[str, Any], text: str) -> bool:
    return run_check(parse_check(check), text).held


def count(unit: str, text: str) -> int:
    return count_units(unit, text)  # type: ignore[arg-type]
