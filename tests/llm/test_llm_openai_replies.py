"""OpenAIAdapter against replies the way real servers and models send them (real HTTP, fake server).

One test per behaviour of the LLM boundary: structured output and its fallback, reasoning kept
out of the answer, the length limit, empty replies, Retry-After within the deadline, refusals,
context-length refusals, and usage a server did not report.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from openai_fake import Planned, completion, error_body

from aeonloop.llm.base import ContextLengthError, LLMError
from aeonloop.prompts.registry import PromptId, ReasoningStepInput, TaskProfileInferenceInput

#: The adapter's logger: a step down is said at INFO.
ADAPTER_LOG = "aeonloop.llm.openai_adapter"
PROFILE_SCHEMA = {"type": "object", "properties": {"reasoning_depth": {"type": "integer"}}}
FINAL = '{"reasoning_depth": 4}'
DRAFT = '{"reasoning_depth": 1}'


@pytest.fixture
def step_call(make_call):
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    return make_call(PromptId.REASONING_STEP_USER, data)


@pytest.fixture
def json_call(make_call):
    call = make_call(PromptId.TASKPROFILE_INFERENCE_USER, TaskProfileInferenceInput(request="r"))
    return _with(call, response_schema=PROFILE_SCHEMA)


def _with(call, **changes):
    return replace(call, **changes)


# -- structured output -------------------------------------------------------------------------


async def test_json_prompt_asks_for_its_schema(fake_openai, adapter_for, json_call):
    fake_openai.reply(FINAL)

    await adapter_for().complete(json_call)

    [request] = fake_openai.seen
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "TASKPROFILE_INFERENCE_USER", "schema": PROFILE_SCHEMA},
    }


async def test_free_form_prompt_sends_no_response_format(fake_openai, adapter_for, step_call):
    fake_openai.reply("prose")

    await adapter_for().complete(step_call)

    assert "response_format" not in fake_openai.seen[0].body


async def test_refused_json_schema_falls_back_to_json_object_once(
    fake_openai, adapter_for, json_call, caplog
):
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)  # a step down is said at INFO
    fake_openai.fail(400, "response_format type json_schema is not supported by this server")
    fake_openai.reply(FINAL)
    adapter = adapter_for()

    first = await adapter.complete(json_call)
    second = await adapter.complete(json_call)

    assert first.text == second.text == FINAL
    formats = [seen.body["response_format"] for seen in fake_openai.seen]
    assert [f["type"] for f in formats] == ["json_schema", "json_object", "json_object"]
    # The step below json_schema keeps the schema, for servers that make a grammar of it.
    assert formats[1]["schema"] == formats[2]["schema"] == PROFILE_SCHEMA
    assert caplog.text.count("refused response_format") == 1


#: How llama-cpp-python's server (0.3) refuses json_schema: HTTP 500, its request validation's
#: text (measured against the real server; the real-server tier sends it for real).
LLAMA_CPP_PYTHON_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
    "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


async def test_a_refusal_is_known_by_what_it_says_whatever_the_status(
    fake_openai, adapter_for, json_call, caplog
):
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)
    fake_openai.fail(500, LLAMA_CPP_PYTHON_REFUSAL)
    fake_openai.reply(FINAL)
    ranged = {
        "type": "object",
        "properties": {
            "reasoning_depth": {"type": "integer", "minimum": 1, "maximum": 5},
            "information_sufficiency": {"type": "number", "minimum": 0.0, "maximum": 1.0},
        },
    }
    adapter = adapter_for()

    reply = await adapter.complete(_with(json_call, response_schema=ranged))

    assert reply.text == FINAL
    assert len(fake_openai.seen) == 2  # stepped down at once: no retry spent on a refusal
    sent = fake_openai.seen[1].body["response_format"]
    assert sent["type"] == "json_object"
    # Ranges the grammar cannot enforce are sent as the values it can (llm.schemas).
    depth, sufficiency = sent["schema"]["properties"].values()
    assert depth == {"enum": [1, 2, 3, 4, 5]}
    assert sufficiency["enum"][:3] == [0.0, 0.05, 0.1] and sufficiency["enum"][-1] == 1.0
    assert "refused response_format json_schema (HTTP 500)" in caplog.text
    assert adapter.response_format == "json_object_schema"


async def test_a_step_down_is_said_once_at_info_not_as_a_warning(
    fake_openai, adapter_for, json_call, caplog
):
    """llama-cpp-python refuses json_schema on every run: that is how it works, so it is no
    WARNING on every `aeon ask` (which prints WARNING and above); a worker, at INFO, says it
    once."""
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)
    fake_openai.fail(500, LLAMA_CPP_PYTHON_REFUSAL)
    fake_openai.reply(FINAL)
    adapter = adapter_for()

    await adapter.complete(json_call)
    await adapter.complete(json_call)

    said = [r for r in caplog.records if "refused response_format" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO]
    assert [s.body["response_format"]["type"] for s in fake_openai.seen] == [
        "json_schema",
        "json_object",
        "json_object",
    ]


async def test_a_500_that_is_no_refusal_is_not_a_step_down(fake_openai, adapter_for, json_call):
    fake_openai.fail(500, "CUDA out of memory")
    fake_openai.reply(FINAL)
    adapter = adapter_for()

    await adapter.complete(json_call)

    assert adapter.response_format == "json_schema"
    assert [s.body["response_format"]["type"] for s in fake_openai.seen] == ["json_schema"] * 2


async def test_every_call_sends_its_contracts_reply_budget(fake_openai, adapter_for, json_call):
    fake_openai.reply(FINAL)

    await adapter_for().complete(_with(json_call, max_tokens=300))
    await adapter_for(max_tokens=50).complete(_with(json_call, max_tokens=300))

    assert [seen.body["max_tokens"] for seen in fake_openai.seen] == [300, 50]


async def test_server_without_any_response_format_gets_none(fake_openai, adapter_for, json_call):
    for _ in range(3):
        fake_openai.fail(422, "Unrecognized request argument: response_format")
    fake_openai.reply(FINAL)
    adapter = adapter_for()

    reply = await adapter.complete(json_call)

    assert reply.text == FINAL
    sent = ["response_format" in seen.body for seen in fake_openai.seen]
    assert sent == [True, True, True, False]
    assert adapter.response_format == "off"


async def test_the_schema_is_in_the_text_only_where_response_format_does_not_send_it(
    fake_openai, adapter_for, json_call
):
    """Issue 40: the reply's schema goes once, by response_format, where the server takes it
    (json_schema, or json_object with the schema); stepped down to plain json_object or none,
    the prompt carries it as text, in its system prompt, before the instructions' data."""
    for _ in range(3):
        fake_openai.fail(422, "Unrecognized request argument: response_format")
    fake_openai.reply(FINAL)

    await adapter_for().complete(json_call)

    messages = [seen.body["messages"][0]["content"] for seen in fake_openai.seen]
    schema_text = json.dumps(PROFILE_SCHEMA, separators=(",", ":"))
    assert [schema_text in message for message in messages] == [False, False, True, True]
    assert messages[0] == json_call.message
    for message in messages[2:]:
        system = message[message.index("<system_prompt>") : message.index("</system_prompt>")]
        assert schema_text in system
        assert message.replace(schema_text, "").count("JSON schema") == 1


async def test_other_client_errors_do_not_step_down(fake_openai, adapter_for, json_call):
    fake_openai.fail(400, "invalid model name")

    with pytest.raises(LLMError, match="HTTP 400"):
        await adapter_for().complete(json_call)

    assert len(fake_openai.seen) == 1


@pytest.mark.parametrize(("setting", "sent"), [("json_object", "json_object"), ("off", None)])
async def test_structured_output_setting(fake_openai, adapter_for, json_call, setting, sent):
    fake_openai.reply(FINAL)

    await adapter_for(structured_output=setting).complete(json_call)

    assert fake_openai.seen[0].body.get("response_format", {}).get("type") == sent


# -- reasoning ---------------------------------------------------------------------------------


async def test_think_block_with_a_draft_is_not_the_answer(fake_openai, adapter_for, json_call):
    fake_openai.reply(f"<think>First guess: {DRAFT}. No, deeper.</think>\n{FINAL}")

    reply = await adapter_for().complete(json_call)

    assert reply.text == FINAL


async def test_reply_starting_inside_the_think_block(fake_openai, adapter_for, json_call):
    """R1/Qwen3 chat templates open <think> in the prompt: the reply only closes it."""
    fake_openai.reply(f"Hmm, maybe {DRAFT}.\n</think>\n\n{FINAL}")

    reply = await adapter_for().complete(json_call)

    assert reply.text == FINAL


async def test_reasoning_content_field_is_not_the_answer(fake_openai, adapter_for, json_call):
    fake_openai.reply(FINAL, reasoning_content=f"Draft: {DRAFT}")

    reply = await adapter_for().complete(json_call)

    assert reply.text == FINAL


async def test_reply_of_only_reasoning_is_empty_and_retried(fake_openai, adapter_for, step_call):
    fake_openai.reply("", reasoning_content="I thought a lot and wrote nothing.")
    fake_openai.reply("<think>again</think>")
    fake_openai.reply("The tides follow the Moon.")

    reply = await adapter_for().complete(step_call)

    assert reply.text == "The tides follow the Moon."
    assert len(fake_openai.seen) == 3


# -- the length limit --------------------------------------------------------------------------


async def test_cut_reply_is_asked_again_with_twice_the_budget(fake_openai, adapter_for, json_call):
    fake_openai.reply('{"reasoning_de', finish_reason="length")
    fake_openai.reply(FINAL)

    reply = await adapter_for(max_tokens=700).complete(json_call)

    assert (reply.text, reply.truncated) == (FINAL, False)
    assert [seen.body.get("max_tokens") for seen in fake_openai.seen] == [700, 1400]


async def test_reply_cut_twice_is_returned_marked_truncated(fake_openai, adapter_for, step_call):
    fake_openai.reply("The tides rise and", finish_reason="length")

    reply = await adapter_for().complete(step_call)

    assert reply.truncated is True and reply.text == "The tides rise and"
    assert len(fake_openai.seen) == 2
    assert "max_tokens" not in fake_openai.seen[0].body
    assert fake_openai.seen[1].body["max_tokens"] >= 1024


async def test_max_completion_tokens_for_servers_that_want_it(fake_openai, adapter_for, step_call):
    fake_openai.fail(400, "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens'.")
    fake_openai.reply("done")

    reply = await adapter_for(max_tokens=300).complete(step_call)

    assert reply.text == "done"
    assert fake_openai.seen[1].body["max_completion_tokens"] == 300
    assert "max_tokens" not in fake_openai.seen[1].body


# -- rate limits and the deadline --------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "value", "seconds"), [("retry-after-ms", "400", 0.4), ("retry-after", "1", 1.0)]
)
async def test_retry_after_is_honoured(fake_openai, adapter_for, step_call, header, value, seconds):
    fake_openai.fail(429, "slow down", headers={header: value})
    fake_openai.reply("recovered")

    reply = await adapter_for().complete(step_call)

    assert reply.text == "recovered"
    first, second = fake_openai.seen
    assert second.at - first.at >= seconds


async def test_no_retry_that_would_pass_the_deadline(fake_openai, adapter_for, step_call):
    fake_openai.fail(429, "slow down", headers={"retry-after": "30"})
    soon = _with(step_call, deadline=datetime.now(UTC) + timedelta(seconds=2))

    with pytest.raises(LLMError, match="deadline") as caught:
        await adapter_for().complete(soon)

    assert caught.value.transient is True
    assert len(fake_openai.seen) == 1


async def test_no_call_after_the_deadline(fake_openai, adapter_for, step_call):
    late = _with(step_call, deadline=datetime.now(UTC) - timedelta(seconds=1))

    with pytest.raises(LLMError, match="deadline has passed"):
        await adapter_for().complete(late)

    assert fake_openai.seen == []


# -- refusals, context length, usage -----------------------------------------------------------


async def test_refusal_field_marks_the_reply_refused(fake_openai, adapter_for, step_call):
    fake_openai.reply(None, refusal="I'm sorry, I cannot help with that.")

    reply = await adapter_for().complete(step_call)

    assert reply.refused is True
    assert reply.text == "I'm sorry, I cannot help with that."


async def test_content_filter_marks_the_reply_refused(fake_openai, adapter_for, step_call):
    fake_openai.reply("", finish_reason="content_filter")

    reply = await adapter_for().complete(step_call)

    assert reply.refused is True


@pytest.mark.parametrize(
    ("message", "limit"),
    [
        (
            "This model's maximum context length is 32768 tokens. However, you requested "
            "51234 tokens (47138 in the messages, 4096 in the completion).",
            32768,
        ),
        ("the request exceeds the available context size, try increasing it", None),
    ],
)
async def test_context_length_refusal(fake_openai, adapter_for, step_call, message, limit):
    fake_openai.fail(400, message)

    with pytest.raises(ContextLengthError) as caught:
        await adapter_for().complete(step_call)

    assert caught.value.limit_tokens == limit
    assert caught.value.transient is False
    assert len(fake_openai.seen) == 1


async def test_usage_from_the_server_is_not_marked_estimated(fake_openai, adapter_for, step_call):
    fake_openai.reply("text")

    reply = await adapter_for().complete(step_call)

    assert (reply.usage.prompt_tokens, reply.usage.estimated) == (11, False)


async def test_calls_refused_at_once_step_down_once(fake_openai, adapter_for, json_call, caplog):
    """Found by the real-server tier: two runs' calls in flight when the server refuses
    json_schema must not take the ladder two steps down (to plain json_object, where a small
    model's replies are no longer held to the schema)."""
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)

    def respond(seen):
        if seen.body["response_format"]["type"] == "json_schema":
            time.sleep(0.3)  # both requests are in flight before either is refused
            return Planned(status=500, body=error_body(LLAMA_CPP_PYTHON_REFUSAL))
        return Planned(body=completion(FINAL))

    fake_openai.responder = respond
    adapter = adapter_for()

    replies = await asyncio.gather(adapter.complete(json_call), adapter.complete(json_call))

    assert [reply.text for reply in replies] == [FINAL, FINAL]
    assert adapter.response_format == "json_object_schema"
    resent = [s.body["response_format"] for s in fake_openai.seen[2:]]
    assert all(f["type"] == "json_object" and "schema" in f for f in resent), resent
    assert caplog.text.count("refused response_format") == 1
