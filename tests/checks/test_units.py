"""checks/units.py: what a count check counts, unit by unit, in the Markdown an LLM writes."""

from __future__ import annotations

from checks_support import count, holds

from aeonloop.checks.running import run_check
from aeonloop.checks.types import (
    CountCheck,
)
from aeonloop.checks.units import sentences

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


def test_highlights_are_emphasised_text_but_not_bullet_markers_or_code() -> None:
    text = "* a bullet, not a highlight\n*one* and **two**, ** ** is empty\n```\n*code*\n```"
    assert count("highlights", text) == 2


def test_a_horizontal_rule_ends_a_paragraph() -> None:
    assert count("paragraphs", "First.\n***\nSecond.\n***\nThird.") == 3


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
