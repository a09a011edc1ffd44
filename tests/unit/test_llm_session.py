"""LLMSession: what a phase gets from a reply, with a scripted LLM (no network, no Redis).

Reasoning removed before validation, cheap local repairs before the one repair call, a reply
cut at the length limit never accepted, prompts fitted to the context budget (and once more,
tighter, after a context-length refusal), and the reply's flags kept in the memo.
"""

from __future__ import annotations

import json

import pytest

from aeonloop.contracts import Usage
from aeonloop.exceptions import UnusableReply
from aeonloop.llm.base import ContextLengthError, LLMReply, TokenUsage
from aeonloop.llm.session import (
    LLMOutputError,
    LLMSession,
    Reply,
    prompt_budget_chars,
)
from aeonloop.prompts.registry import (
    PlanGenerationInput,
    PlanGenerationOutput,
    PromptId,
    PromptRegistry,
    ReasoningStepInput,
    RepairJSONInput,
    TaskProfileInferenceInput,
    TaskProfileOutput,
)
from aeonloop.testing import DictMemo, ScriptedLLM

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


# ---- Aeon's own words are not the model's (issue 32) -------------------------------------------

PLAN = PromptId.PLAN_GENERATION_USER
PLAN_DATA = PlanGenerationInput(request="Explain tides at Brest")
OWN_PLAN = {
    "plan": {
        "goal": "Explain the tides at Brest.",
        "steps": [
            {"step_id": "s1", "description": "Find the tidal range at Brest.", "depends_on": []},
            {"step_id": "s2", "description": "Explain that range.", "depends_on": ["s1"]},
        ],
    }
}


async def plan(s: LLMSession) -> PlanGenerationOutput:
    return await s.json(PLAN, PLAN_DATA, PlanGenerationOutput, scope="b")


async def test_a_reply_copying_the_formats_example_gets_the_repair_call() -> None:
    example = PromptRegistry().get_definition(PLAN).example_output
    s, llm = session({PLAN: json.dumps(example), REPAIR: json.dumps(OWN_PLAN)})
    assert (await plan(s)).plan.goal == "Explain the tides at Brest."
    assert llm.calls == [PLAN, REPAIR]
    assert s.usage.repair_calls == 1
    # The repair is told what was wrong and what the reply was for.
    repair = llm.history[1].input
    assert isinstance(repair, RepairJSONInput)
    assert repair.request == PLAN_DATA.request
    assert "plan.goal repeats the prompt's own instruction or example text" in repair.error
    assert example["plan"]["goal"] in repair.malformed_output


async def test_an_id_that_is_not_clean_gets_the_repair_call() -> None:
    unclean = json.loads(json.dumps(OWN_PLAN))
    unclean["plan"]["steps"][1]["depends_on"] = ["s1,"]
    s, llm = session({PLAN: json.dumps(unclean), REPAIR: json.dumps(OWN_PLAN)})
    assert (await plan(s)).plan.steps[1].depends_on == ["s1"]
    assert llm.calls == [PLAN, REPAIR]
    assert "'s1,', not a clean id" in llm.history[1].input.error


async def test_a_copy_after_the_repair_is_an_output_error_naming_it() -> None:
    example = json.dumps(PromptRegistry().get_definition(PLAN).example_output)
    s, llm = session({PLAN: example, REPAIR: example})
    with pytest.raises(LLMOutputError, match="repeats the prompt's own instruction") as caught:
        await plan(s)
    assert isinstance(caught.value.error, UnusableReply)
    assert llm.calls == [PLAN, REPAIR]


async def test_a_locally_repaired_copy_still_gets_the_repair_call() -> None:
    """The local repairs fix syntax; a copy that needed them is still a copy."""
    example = PromptRegistry().get_definition(PLAN).example_output
    s, llm = session({PLAN: json.dumps(example)[:-1] + ",}", REPAIR: json.dumps(OWN_PLAN)})
    assert (await plan(s)).plan.goal == "Explain the tides at Brest."
    assert llm.calls == [PLAN, REPAIR]


async def test_a_repair_of_a_prompt_built_from_a_cap_is_shown_its_request() -> None:
    def build(cap: int | None) -> PlanGenerationInput:
        return PLAN_DATA

    s, llm = session({PLAN: '{"plan": {}}', REPAIR: json.dumps(OWN_PLAN)})
    await s.json(PLAN, build, PlanGenerationOutput, scope="b")
    assert llm.history[1].input.request == PLAN_DATA.request


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
