"""Clipping prompt text, recognising refusals and blocked steps, and fitting prompts to a budget."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aeonloop.llm.session import (
    CHARS_PER_TOKEN,
    REPLY_RESERVE_TOKENS,
    _tighter,
    fit,
    prompt_budget_chars,
)
from aeonloop.prompts.clipping import CONTEXT_MARKER, STORED_MARKER, clip
from aeonloop.prompts.registry import PromptId, ReasoningStepInput, default_registry
from aeonloop.prompts.replies import REFUSAL_MAX_CHARS, is_blocked_reply, is_refusal
from aeonloop.prompts.unified import UnifiedPrompt

# --------------------------------------------------------------------------------------------
# clip
# --------------------------------------------------------------------------------------------


def test_clip_leaves_text_under_the_cap_unchanged() -> None:
    assert clip("short text", 100) == "short text"


def test_clip_leaves_text_exactly_at_the_cap_unchanged() -> None:
    assert clip("abcdef", 6) == "abcdef"


def test_clip_without_a_cap_leaves_any_text_unchanged() -> None:
    text = "x" * 1_000_000

    assert clip(text, None) == text


def test_clip_over_the_cap_keeps_the_beginning_and_adds_the_marker() -> None:
    assert clip("abcd" + "x" * 196, 4) == "abcd\n" + CONTEXT_MARKER.format(count=196)


def test_clip_never_makes_a_text_longer() -> None:
    """A cut that would save less than its marker costs leaves the text whole."""
    assert clip("abcdefghij", 4) == "abcdefghij"
    text = "w" * 300
    assert all(len(clip(text, cap)) <= len(text) for cap in range(0, 301))


def test_clip_marker_names_the_count_of_characters_cut() -> None:
    clipped = clip("y" * 1234, 1000)

    assert clipped.startswith("y" * 1000 + "\n")
    assert "234 more characters clipped" in clipped


def test_clip_to_zero_keeps_only_the_marker() -> None:
    assert clip("h" * 500, 0) == "\n" + CONTEXT_MARKER.format(count=500)


def test_clip_uses_the_marker_it_is_given() -> None:
    clipped = clip("z" * 500, 10, marker=STORED_MARKER)

    assert clipped == "z" * 10 + "\n" + STORED_MARKER.format(count=490)
    assert "not kept" in clipped


def test_clip_drops_white_space_at_the_cut() -> None:
    assert clip("word   rest of text" + "x" * 200, 6).startswith("word\n[")


# --------------------------------------------------------------------------------------------
# is_refusal / is_blocked_reply
# --------------------------------------------------------------------------------------------

REFUSALS = [
    "I'm sorry, but I can't help with that.",
    "I cannot assist with this request.",
    "I’m sorry, but I can’t do that.",
    "As an AI, I can't provide medical advice.",
    "Sorry, I can't help with that.",
    "Unfortunately, I am unable to complete this task.",
    "I must decline this request.",
    "I won't write that.",
    "  I apologise, but I will not generate that content.  \n",
]


@pytest.mark.parametrize("reply", REFUSALS)
def test_short_refusal_is_a_refusal(reply: str) -> None:
    assert is_refusal(reply)


WORK = [
    "I can't give exact figures, but here is an estimate: " + "the range is wide. " * 40,
    "Tides are caused by the gravitational pull of the Moon and the Sun.",
    "I can help with that. Here is the plan.",
    "BLOCKED: the request names no data source.",
    "",
]


@pytest.mark.parametrize("reply", WORK)
def test_work_is_not_a_refusal(reply: str) -> None:
    assert not is_refusal(reply)


def test_long_reply_opening_like_a_refusal_is_work() -> None:
    reply = "I can't do that in one line, so here it is step by step: " + "step. " * 100

    assert len(reply) > REFUSAL_MAX_CHARS
    assert not is_refusal(reply)


def test_same_opening_in_a_short_reply_is_a_refusal() -> None:
    assert is_refusal("I can't do that in one line.")


def test_refusal_length_ignores_surrounding_white_space() -> None:
    assert is_refusal("I cannot help with that." + " " * (REFUSAL_MAX_CHARS + 50))


def test_refusal_must_open_the_reply() -> None:
    assert not is_refusal("Here is the summary. Note that I cannot help with the last part.")


@pytest.mark.parametrize(
    "reply",
    ["BLOCKED: no data source was given.", "  \nBLOCKED: missing input", "blocked: lower case"],
)
def test_blocked_reply_is_recognised(reply: str) -> None:
    assert is_blocked_reply(reply)


@pytest.mark.parametrize(
    "reply",
    ["The step is BLOCKED: no data.", "BLOCKED without a colon", "Blocked - no data", ""],
)
def test_reply_not_opening_with_the_marker_is_not_blocked(reply: str) -> None:
    assert not is_blocked_reply(reply)


# --------------------------------------------------------------------------------------------
# fit / prompt_budget_chars / _tighter
# --------------------------------------------------------------------------------------------

SYSTEM = "You carry out one step of a plan."


class Source:
    """A builder of a real prompt input from the per-output cap, which records the caps built."""

    def __init__(self, outputs: Sequence[str]) -> None:
        self.outputs = list(outputs)
        self.caps: list[int | None] = []

    def build(self, cap: int | None) -> ReasoningStepInput:
        self.caps.append(cap)
        return self._input(cap)

    def render(self, cap: int | None) -> UnifiedPrompt:
        return self.render_input(self._input(cap))

    @staticmethod
    def render_input(data: ReasoningStepInput) -> UnifiedPrompt:
        instructions = default_registry().get_prompt(PromptId.REASONING_STEP_USER, data)
        return UnifiedPrompt(system_prompt=SYSTEM, instructions=instructions)

    def size(self, cap: int | None) -> int:
        return len(self.render(cap).to_xml())

    def _input(self, cap: int | None) -> ReasoningStepInput:
        return ReasoningStepInput(
            request="Summarise the findings.",
            goal="A summary",
            step_id="s4",
            step_description="Summarise steps 1-3.",
            prior_outputs="\n\n".join(clip(output, cap) for output in self.outputs),
            pass_number=1,
        )


LONG, MEDIUM, SHORT = "a" * 5000, "b" * 3000, "c" * 120


def fitted(outputs: Sequence[str], budget: int) -> tuple[Source, ReasoningStepInput, UnifiedPrompt]:
    source = Source(outputs)
    data, prompt = fit(source.build, source.render_input, budget)
    return source, data, prompt


def test_fit_returns_the_unclipped_input_when_it_fits() -> None:
    outputs = [LONG, SHORT]
    budget = Source(outputs).size(None)

    source, data, prompt = fitted(outputs, budget)

    assert source.caps == [None]
    assert data.prior_outputs == f"{LONG}\n\n{SHORT}"
    assert "clipped" not in prompt.instructions


def test_fit_over_budget_stays_within_the_budget() -> None:
    outputs = [LONG, MEDIUM, SHORT]
    budget = Source(outputs).size(None) - 2000

    _, _, prompt = fitted(outputs, budget)

    assert len(prompt.to_xml()) <= budget


def test_fit_over_budget_chooses_a_cap_one_more_than_which_does_not_fit() -> None:
    outputs = [LONG, MEDIUM, SHORT]
    budget = Source(outputs).size(None) - 2000

    source, _, _ = fitted(outputs, budget)
    cap = source.caps[-1]

    assert cap is not None
    assert source.size(cap) <= budget < source.size(cap + 1)


def test_fit_returns_the_input_and_prompt_of_the_same_cap() -> None:
    outputs = [LONG, MEDIUM, SHORT]
    budget = Source(outputs).size(None) - 2000

    source, data, prompt = fitted(outputs, budget)
    cap = source.caps[-1]

    assert data == source._input(cap)
    assert prompt == source.render(cap)


def test_fit_clips_the_longest_outputs_and_keeps_short_ones_whole() -> None:
    outputs = [LONG, MEDIUM, SHORT]
    budget = Source(outputs).size(None) - 3000

    _, data, _ = fitted(outputs, budget)
    parts = data.prior_outputs

    assert "a" * len(LONG) not in parts
    assert "b" * len(MEDIUM) not in parts
    assert parts.endswith("\n\n" + SHORT)
    assert parts.count("more characters clipped") == 2


def test_fit_clips_only_the_longest_output_when_that_is_enough() -> None:
    outputs = [LONG, MEDIUM, SHORT]
    budget = Source(outputs).size(None) - 1000

    _, data, _ = fitted(outputs, budget)

    assert "b" * len(MEDIUM) in data.prior_outputs
    assert data.prior_outputs.count("more characters clipped") == 1


def test_fit_is_deterministic() -> None:
    outputs = [LONG, MEDIUM, SHORT]
    budget = Source(outputs).size(None) - 2500

    assert fitted(outputs, budget)[1:] == fitted(outputs, budget)[1:]


def test_fit_sends_cap_zero_when_nothing_fits() -> None:
    outputs = [LONG, MEDIUM]
    budget = 10

    source, data, prompt = fitted(outputs, budget)

    assert source.caps[-1] == 0
    assert data.prior_outputs == "\n\n".join(clip(output, 0) for output in outputs)
    assert len(prompt.to_xml()) > budget


def test_fit_chooses_the_largest_cap_that_fits() -> None:
    # Found with a brute-force search over budgets: the binary search assumes the XML grows with
    # the cap, but an output clipped just below its length (kept text plus a ~60-character
    # marker) is longer than the output itself, so a larger cap can fit where a smaller one
    # does not. Here cap 42 fits (the 40-character output whole) and fit settles on cap 21,
    # clipping the short output into something longer than it was.
    outputs = ["a" * 3000, "b" * 1000, "c" * 40]
    source = Source(outputs)
    budget = source.size(42)
    best = max(cap for cap in range(0, 3001) if source.size(cap) <= budget)

    fit(source.build, source.render_input, budget)

    assert source.caps[-1] == best


def test_prompt_budget_leaves_room_for_the_reply() -> None:
    context = 32_768

    budget = prompt_budget_chars(context)

    assert budget < context * CHARS_PER_TOKEN
    assert budget == (context - REPLY_RESERVE_TOKENS) * CHARS_PER_TOKEN


def test_prompt_budget_reserves_a_quarter_of_a_small_window() -> None:
    assert prompt_budget_chars(4000) == 3000 * CHARS_PER_TOKEN


@pytest.mark.parametrize("context", [0, 1, 3])
def test_prompt_budget_is_at_least_one_character(context: int) -> None:
    assert prompt_budget_chars(context) >= 1


def test_prompt_budget_grows_with_the_window() -> None:
    sizes = [prompt_budget_chars(tokens) for tokens in (2_048, 8_192, 32_768, 131_072)]

    assert sizes == sorted(sizes)
    assert len(set(sizes)) == len(sizes)


def test_tighter_budget_halves_without_a_reported_limit() -> None:
    assert _tighter(10_000, None) == 5_000


def test_tighter_budget_follows_a_reported_limit_below_half() -> None:
    assert _tighter(100_000, 4_000) == prompt_budget_chars(4_000)


def test_tighter_budget_is_at_most_half_even_with_a_large_limit() -> None:
    assert _tighter(10_000, 1_000_000) == 5_000
