"""checks/vocabulary.py: the check vocabulary as PREPARE's prompt shows it, written from the types
(so the prompt cannot name a check the host refuses), and that text in the rendered prompt."""

from __future__ import annotations

import json
from typing import ClassVar, get_args

import pytest

from aeonloop.checks import vocabulary
from aeonloop.checks.types import CHECK_MODELS, CHECK_TYPES, StartsWithCheck, parse_check
from aeonloop.checks.units import Unit
from aeonloop.phases import verification
from aeonloop.phases.events import RunState
from aeonloop.phases.models import Rule
from aeonloop.prompts.registry import PromptId, default_registry


def shown(line: str) -> list[dict]:
    """The example objects of one line: `- {...}: gloss.` or `- {...} and {...}.`"""
    decoder, found, at = json.JSONDecoder(), [], line.index("{")
    while at >= 0:
        example, end = decoder.raw_decode(line, at)
        found.append(example)
        at = line.find("{", end) if line[end:].startswith(" and ") else -1
    return found


def test_every_type_in_the_unions_order_each_a_check_of_its_type() -> None:
    examples = [e for line in vocabulary.described().splitlines() for e in shown(line)]
    assert [example["type"] for example in examples] == list(CHECK_TYPES)
    for example in examples:
        assert parse_check(example).type == example["type"]


def test_types_shown_alike_share_a_line() -> None:
    lines = vocabulary.described().splitlines()
    assert len(lines) == len(CHECK_TYPES) - 1
    assert [e["type"] for e in shown(lines[3])] == ["starts_with", "ends_with"]
    assert lines[3].endswith("}.")


def test_a_count_check_lists_every_unit_there_is() -> None:
    (count,) = (line for line in vocabulary.described().splitlines() if '"count"' in line)
    for unit in get_args(Unit):
        assert unit in count


def test_a_type_whose_example_the_host_refuses_is_not_shown(monkeypatch) -> None:
    class Renamed(StartsWithCheck):
        example: ClassVar[dict] = {"prefix": "<text>"}  # the field is `text`

    monkeypatch.setattr(vocabulary, "CHECK_MODELS", (*CHECK_MODELS, Renamed))
    vocabulary.described.cache_clear()
    with pytest.raises(ValueError, match="starts_with check: text: Field required"):
        vocabulary.described()  # raised: nothing was cached


def test_prepare_is_shown_the_vocabulary_before_its_data() -> None:
    run = RunState(
        request="List three fruits.",
        rules=[Rule(id="r1", check="mentions apples")],
    )
    prompt = default_registry().get_prompt(
        PromptId.CHECKS_PREPARE_USER, verification.prepare_input(run)
    )
    described = vocabulary.described()
    shown = f"Each check is one of these objects, with exactly their fields:\n{described}\n"
    assert shown in prompt
    assert prompt.index(vocabulary.described()) < prompt.index("List three fruits.")
