"""LLMSession: what a phase gets from a reply, with a scripted LLM (no network, no Redis).

Reasoning removed before validation, cheap local repairs before the one repair call, a reply
cut at the length limit never accepted, prompts fitted to the context budget (and once more,
tighter, after a context-length refusal), and the reply's flags kept in the memo.
"""

from __future__ import annotations

import json

import pytest

from aeonloop.contracts import Usage
from aeonloop.llm.base import ContextLengthError, LLMReply, TokenUsage
from aeonloop.llm.scripted import ScriptedLLM
from aeonloop.llm.session import (
    DictMemo,
    LLMOutputError,
    LLMSession,
    Reply,
    prompt_budget_chars,
)
from aeonloop.prompts.registry import (
    PromptId,
    PromptRegistry,
    ReasoningStepInput,
    TaskProfileInferenceInput,
    TaskProfileOutput,
)

PROFILE = PromptId.TASKPROFILE_INFERENCE_USER
REPAIR = PromptId.SUPERVISOR_REPAIR_JSON_USER
STEP = PromptId.REASONING_STEP_USER
GOOD = {
    "reasoning_depth": 4,
    "information_sufficiency": 0.6,
    "expected_tool_usage": "minimal",
    "output_breadth": "broad",
    "confidence_requirement": "high",
    "raw_inference": "deep",
}
DATA = TaskProfileInferenceInput(request="Explain tides")


def session(script, memo: DictMemo | None = None, **options) -> tuple[LLMSession, ScriptedLLM]:
    llm = ScriptedLLM(script, fallback=None)
    return LLMSession(llm, PromptRegistry(), memo or DictMemo(), "run-1", Usage(), **options), llm


async def profile(s: LLMSession) -> TaskProfileOutput:
    return await s.json(PROFILE, DATA, TaskProfileOutput, scope="a")


async def test_draft_in_a_think_block_is_not_the_answer() -> None:
    draft = json.dumps({**GOOD, "reasoning_depth": 1})
    s, llm = session({PROFILE: f"<think>Draft: {draft}</think>\n{json.dumps(GOOD)}"})
    assert (await profile(s)).reasoning_depth == 4
    assert llm.calls == [PROFILE]


async def test_a_fragment_is_repaired_not_accepted() -> None:
    s, llm = session({PROFILE: '{"reasoning_depth": 3}', REPAIR: json.dumps(GOOD)})
    assert (await profile(s)).reasoning_depth == 4
    assert llm.calls == [PROFILE, REPAIR]
    assert s.usage.repair_calls == 1


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps(GOOD)[:-1] + ",}",  # trailing comma
        str(GOOD),  # a Python dict: single quotes
        json.dumps({**GOOD, "expected_tool_usage": "Minimal", "output_breadth": "BROAD "}),
        "Here you go:\n```json\n" + json.dumps(GOOD).replace('"deep"', '"deep",') + "\n```",
    ],
    ids=["trailing-comma", "python-dict", "enum-case", "fence-in-prose"],
)
async def test_mechanical_faults_are_repaired_locally(reply: str) -> None:
    s, llm = session({PROFILE: reply})
    output = await profile(s)
    assert (output.expected_tool_usage, output.output_breadth) == ("minimal", "broad")
    assert llm.calls == [PROFILE]  # no repair call
    assert (s.usage.local_repairs, s.usage.repair_calls) == (1, 0)


async def test_a_cut_json_reply_is_never_accepted() -> None:
    """json-repair would close the cut object and it would validate: still refused."""
    cut = LLMReply(json.dumps(GOOD), TokenUsage(5, 5), "m", truncated=True)
    s, llm = session({PROFILE: cut, REPAIR: json.dumps({**GOOD, "reasoning_depth": 2})})
    assert (await profile(s)).reasoning_depth == 2
    assert llm.calls == [PROFILE, REPAIR]


async def test_unusable_after_repair_is_an_output_error() -> None:
    s, _ = session({PROFILE: "no json", REPAIR: "still none"})
    with pytest.raises(LLMOutputError, match="unusable reply after one repair"):
        await profile(s)


async def test_json_calls_carry_the_output_schema() -> None:
    s, llm = session({PROFILE: json.dumps(GOOD)})
    await profile(s)
    schema = llm.history[0].response_schema
    assert schema is not None and "reasoning_depth" in schema["properties"]


async def test_text_reply_keeps_its_flags_through_the_memo() -> None:
    memo = DictMemo()
    cut = LLMReply("The tides rise and", TokenUsage(5, 5), "m", truncated=True)
    data = ReasoningStepInput(
        request="r", goal="g", step_id="s1", step_description="d", pass_number=1
    )
    first, _ = session({STEP: cut}, memo)
    again, llm = session({STEP: "a different reply"}, memo)
    assert await first.text(STEP, data, scope="c") == Reply("The tides rise and", truncated=True)
    assert await again.text(STEP, data, scope="c") == Reply("The tides rise and", truncated=True)
    assert llm.calls == []


def test_memo_values_written_as_bare_text_still_read() -> None:
    assert Reply.from_memo("plain old text") == Reply("plain old text")


def _step_input(outputs: list[str]):
    def build(cap: int | None) -> ReasoningStepInput:
        prior = "\n\n".join(text if cap is None else text[:cap] for text in outputs)
        return ReasoningStepInput(
            request="r",
            goal="g",
            step_id="s9",
            step_description="d",
            prior_outputs=prior,
            pass_number=1,
        )

    return build


async def test_prompt_is_fitted_to_the_context_budget() -> None:
    budget = prompt_budget_chars(8_000)
    s, llm = session({STEP: "ok"}, prompt_chars=budget)
    await s.text(STEP, _step_input(["short", "x" * 40_000, "y" * 30_000]), scope="c")
    sent = llm.history[0]
    assert len(sent.prompt.to_xml()) <= budget
    assert "short" in sent.input.prior_outputs  # the longest were clipped, the short kept


async def test_context_length_refusal_is_retried_once_tighter() -> None:
    refusal = ContextLengthError("too long", limit_tokens=4_000)
    s, llm = session({STEP: [refusal, "ok"]})
    reply = await s.text(STEP, _step_input(["x" * 60_000]), scope="c")
    assert reply.text == "ok"
    first, second = (len(call.prompt.to_xml()) for call in llm.history)
    assert second <= prompt_budget_chars(4_000) < first


async def test_a_second_context_length_refusal_fails_the_call() -> None:
    s, llm = session({STEP: ContextLengthError("too long")})
    with pytest.raises(ContextLengthError):
        await s.text(STEP, _step_input(["x" * 60_000]), scope="c")
    assert len(llm.history) == 2


async def test_estimated_usage_marks_the_run() -> None:
    guess = LLMReply("prose", TokenUsage(10, 2, estimated=True), "m")
    data = ReasoningStepInput(
        request="r", goal="g", step_id="s1", step_description="d", pass_number=1
    )
    s, _ = session({STEP: guess})
    await s.text(STEP, data, scope="c")
    assert (s.usage.prompt_tokens, s.usage.estimated, s.usage.calls) == (10, True, 1)
