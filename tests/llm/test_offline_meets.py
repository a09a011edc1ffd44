"""The offline model's refinement meets each constraint as the host checks it (llm/offline.py's
`_meet` runs aeonloop.checks rather than imitating it), and keeps a text that holds already."""

from __future__ import annotations

import pytest

from aeonloop.checks.running import run_check
from aeonloop.checks.types import parse_check
from aeonloop.llm.offline import _meet

DRAFT = (
    "Tea grows on hills, e.g. in Assam. Coffee is another crop; well-known estates sell both. "
    "Prices vary by grade."
)


@pytest.mark.parametrize(
    "check",
    [
        {"type": "phrase_count", "phrase": "Darjeeling", "min": 2, "max": None},
        {"type": "phrase_count", "phrase": "tea", "min": 3, "max": None},
        {"type": "starts_with", "text": "Yes"},
        {"type": "ends_with", "text": "Done"},
        {"type": "forbidden_words", "words": ["coffee"]},
        {"type": "case", "case": "lower"},
        {"type": "case", "case": "upper"},
        {"type": "json", "json_schema": None},
        {"type": "count", "unit": "bullets", "min": 3, "max": 3},
        {"type": "count", "unit": "words", "min": None, "max": 7},
    ],
)
def test_the_refinement_holds_the_check_the_host_runs(check: dict) -> None:
    made = parse_check(check)
    assert not run_check(made, DRAFT).held
    met = _meet(DRAFT, check)
    assert run_check(made, met).held, met


def test_a_text_that_holds_the_check_is_kept_as_it_is() -> None:
    text = "- One. Two.\n- Three."
    assert _meet(text, {"type": "count", "unit": "bullets", "min": 2, "max": 2}) == text
    assert _meet(text, {"type": "starts_with", "text": "- one"}) == text  # any case


def test_a_constraint_no_check_can_hold_leaves_the_text() -> None:
    assert _meet(DRAFT, {"type": "count", "unit": "words", "min": None, "max": -1}) == DRAFT
