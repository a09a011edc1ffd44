"""ScriptedLLM: per-prompt replies, lists, errors, callables, fallback, and scripts from files."""

from __future__ import annotations

import json

import pytest

from aeonloop.llm.base import LLMAdapter, LLMError
from aeonloop.llm.offline import OfflineLLM
from aeonloop.llm.scripted import ScriptedLLM
from aeonloop.prompts.registry import PlanGenerationInput, PromptId, TaskProfileInferenceInput

PLAN = PromptId.PLAN_GENERATION_USER
PROFILE = PromptId.TASKPROFILE_INFERENCE_USER


@pytest.fixture
def plan_call(make_call):
    return make_call(PLAN, PlanGenerationInput(request="Do a, then b."))


@pytest.fixture
def profile_call(make_call):
    return make_call(PROFILE, TaskProfileInferenceInput(request="Do a."))


async def texts(adapter: ScriptedLLM, call, times: int) -> list[str]:
    return [(await adapter.complete(call)).text for _ in range(times)]


async def test_a_string_is_returned_as_is_even_when_malformed(plan_call):
    adapter = ScriptedLLM({PLAN: '{"plan": '})

    reply = await adapter.complete(plan_call)

    assert isinstance(adapter, LLMAdapter)
    assert reply.text == '{"plan": '
    assert reply.model == "aeon-scripted"
    assert reply.usage.completion_tokens > 0


async def test_a_list_is_consumed_in_order_and_its_last_reply_repeats(plan_call):
    adapter = ScriptedLLM({"PLAN_GENERATION_USER": ["one", "two"]})

    assert await texts(adapter, plan_call, 4) == ["one", "two", "two", "two"]


async def test_exceptions_are_raised_as_is(plan_call):
    error = LLMError("rate limited", transient=True)
    adapter = ScriptedLLM({PLAN: [error, RuntimeError("crash"), "ok"]})

    with pytest.raises(LLMError) as caught:
        await adapter.complete(plan_call)
    assert caught.value is error
    with pytest.raises(RuntimeError, match="crash"):
        await adapter.complete(plan_call)
    assert (await adapter.complete(plan_call)).text == "ok"


async def test_callables_receive_the_call(plan_call):
    async def later(call) -> str:
        return "async " + call.prompt_id.value

    adapter = ScriptedLLM({PLAN: [lambda call: call.input.request, later]})

    assert await texts(adapter, plan_call, 2) == ["Do a, then b.", "async PLAN_GENERATION_USER"]


async def test_unscripted_ids_go_to_the_offline_fallback(plan_call, profile_call):
    adapter = ScriptedLLM({PLAN: "scripted"})

    reply = await adapter.complete(profile_call)

    assert isinstance(adapter.fallback, OfflineLLM)
    assert reply.text == (await OfflineLLM().complete(profile_call)).text
    await adapter.complete(plan_call)
    assert adapter.calls == [PROFILE, PLAN]
    assert [call.prompt_id for call in adapter.history] == [PROFILE, PLAN]


async def test_without_fallback_unscripted_ids_fail(profile_call):
    adapter = ScriptedLLM({PLAN: "x"}, fallback=None)

    with pytest.raises(LLMError, match="TASKPROFILE_INFERENCE_USER") as caught:
        await adapter.complete(profile_call)

    assert caught.value.transient is False
    assert adapter.calls == [PROFILE]


def test_unknown_prompt_ids_and_empty_lists_are_refused():
    with pytest.raises(ValueError):
        ScriptedLLM({"NOT_A_PROMPT": "x"})
    with pytest.raises(ValueError, match="empty"):
        ScriptedLLM({PLAN: []})


async def test_from_file_reads_strings_lists_and_errors(tmp_path, plan_call, profile_call):
    path = tmp_path / "script.json"
    script = {
        "PLAN_GENERATION_USER": [{"error": "down", "transient": True}, "not json"],
        "TASKPROFILE_INFERENCE_USER": {"error": "refused"},
    }
    path.write_text(json.dumps(script), encoding="utf-8")
    adapter = ScriptedLLM.from_file(path, fallback=None)

    with pytest.raises(LLMError, match="down") as caught:
        await adapter.complete(plan_call)
    assert caught.value.transient is True
    assert (await adapter.complete(plan_call)).text == "not json"
    with pytest.raises(LLMError, match="refused") as refused:
        await adapter.complete(profile_call)
    assert refused.value.transient is False


@pytest.mark.parametrize(
    "content",
    ["[1, 2]", "{not json", json.dumps({"PLAN_GENERATION_USER": 3})],
    ids=["not-an-object", "not-json", "bad-reply"],
)
def test_from_file_refuses_bad_scripts(tmp_path, content):
    path = tmp_path / "script.json"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(ValueError):
        ScriptedLLM.from_file(path)


def test_from_file_names_a_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.json"):
        ScriptedLLM.from_file(tmp_path / "missing.json")
