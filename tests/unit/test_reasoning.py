"""llm.reasoning: a reasoning model's thinking is separated from its answer."""

from __future__ import annotations

import pytest

from aeonloop.llm.reasoning import answer_so_far, split_reasoning
from aeonloop.prompts.extraction import extract_json

TAG_SPELLINGS = ["think", "thinking", "reasoning", "THINK", "Thinking", "ReAsOnInG"]


@pytest.mark.parametrize("tag", TAG_SPELLINGS)
def test_closed_block_at_start_is_removed(tag: str) -> None:
    reply = f"<{tag}>Let me work this out.</{tag}>\nThe answer is 42."

    answer, thinking = split_reasoning(reply)

    assert answer == "The answer is 42."
    assert "Let me work this out." in thinking


@pytest.mark.parametrize("tag", TAG_SPELLINGS)
def test_closed_block_in_the_middle_is_removed(tag: str) -> None:
    reply = f"First part. <{tag}>hidden musing</{tag}> Second part."

    answer, thinking = split_reasoning(reply)

    assert "hidden musing" not in answer
    assert answer.startswith("First part.")
    assert answer.endswith("Second part.")
    assert "hidden musing" in thinking


def test_closing_tag_case_need_not_match_opening_tag_case() -> None:
    answer, thinking = split_reasoning("<THINK>draft</think>final")

    assert (answer, "draft" in thinking) == ("final", True)


def test_draft_json_in_thinking_does_not_become_the_answer() -> None:
    draft = '{"reasoning_depth": 1, "note": "draft"}'
    real = '{"reasoning_depth": 4, "note": "final"}'
    reply = f"<think>Maybe something like {draft}. No, deeper.</think>\n{real}"

    answer, thinking = split_reasoning(reply)

    assert answer == real
    assert draft in thinking


def test_first_json_object_after_stripping_is_the_real_one() -> None:
    reply = '<thinking>{"plan": "draft"}</thinking>\n```json\n{"plan": "real"}\n```'

    assert extract_json(split_reasoning(reply)[0]) == {"plan": "real"}


def test_several_blocks_are_all_removed_and_kept_in_order() -> None:
    reply = "<think>one</think>A <reasoning>two</reasoning>B <thinking>three</thinking>C"

    answer, thinking = split_reasoning(reply)

    assert answer == "A B C"
    assert thinking.index("one") < thinking.index("two") < thinking.index("three")


def test_unterminated_block_at_start_is_all_thinking() -> None:
    reply = '<think>I will answer {"x": 1} once I have checked the'

    answer, thinking = split_reasoning(reply)

    assert answer == ""
    assert '{"x": 1}' in thinking


def test_unterminated_block_after_leading_white_space_is_all_thinking() -> None:
    answer, thinking = split_reasoning("\n  <reasoning>cut off here")

    assert answer == ""
    assert "cut off here" in thinking


def test_closing_tag_without_opening_one_ends_the_thinking() -> None:
    # R1 / Qwen3 chat templates put the opening <think> in the prompt.
    reply = 'The user wants a profile. Draft: {"a": 1}.\n</think>\n\n{"a": 2}'

    answer, thinking = split_reasoning(reply)

    assert answer == '{"a": 2}'
    assert thinking == 'The user wants a profile. Draft: {"a": 1}.'


def test_closing_tag_with_white_space_before_its_bracket_is_recognised() -> None:
    answer, thinking = split_reasoning("musing</think >answer")

    assert (answer, thinking) == ("answer", "musing")


def test_blocks_after_an_unopened_closing_tag_are_removed_too() -> None:
    reply = "first thoughts</think>answer <think>second thoughts</think> continues"

    answer, thinking = split_reasoning(reply)

    assert "thoughts" not in answer
    assert "first thoughts" in thinking
    assert "second thoughts" in thinking


def test_reply_without_tags_is_unchanged_but_stripped() -> None:
    reply = '\n  {"answer": "plain"}  \n'

    assert split_reasoning(reply) == ('{"answer": "plain"}', "")


def test_empty_reply_gives_empty_answer_and_thinking() -> None:
    assert split_reasoning("") == ("", "")


def test_opening_tag_mentioned_in_prose_is_left_alone() -> None:
    reply = "Models wrap their reasoning in a <think> tag before answering."

    assert split_reasoning(reply) == (reply, "")


def test_opening_tag_not_at_start_and_never_closed_is_left_alone() -> None:
    reply = "Here is the answer. Note: <reasoning> is an XML-like tag some models emit."

    assert split_reasoning(reply) == (reply, "")


def test_reply_that_is_only_a_closed_block_has_empty_answer() -> None:
    answer, thinking = split_reasoning("<think>only thinking</think>")

    assert answer == ""
    assert "only thinking" in thinking


# -- the answer of a reply still being written (shown as it streams) ----------------------------


@pytest.mark.parametrize(
    ("so_far", "shown"),
    [
        ("The tides follow ", "The tides follow"),  # white space waits for what follows it
        ("<think>working it out", ""),  # a block opened at the start: thinking, for now
        ("<think>done</think>\n\nThe tides", "The tides"),
        ("The tides <think>a thought", "The tides"),  # a block opened later: held back
        ("The tides <thi", "The tides"),  # a tag not yet whole
        ("The tides </think ", "The tides"),
        ("a < b and b <c", "a < b and b <c"),  # a `<` that starts no tag is answer
        ("thinking first</think>The tides", "The tides"),  # the template opened the block
    ],
)
def test_the_answer_so_far_holds_back_what_may_be_thinking(so_far: str, shown: str) -> None:
    assert answer_so_far(so_far) == shown


def test_a_model_whose_prompt_opens_the_block_shows_nothing_until_it_closes() -> None:
    assert answer_so_far("Okay, the user wants", opens_in_prompt=True) == ""
    assert answer_so_far("Okay.</think> The tides", opens_in_prompt=True) == "The tides"


def test_the_answer_so_far_of_a_whole_reply_is_a_start_of_its_answer() -> None:
    """What is shown as it streams is never more than the whole reply's answer begins with."""
    reply = "<think>draft {}</think>\nThe tides follow the Moon. <reasoning>x</reasoning> Twice."
    answer, _ = split_reasoning(reply)
    for end in range(len(reply) + 1):
        assert answer.startswith(answer_so_far(reply[:end])), reply[:end]
