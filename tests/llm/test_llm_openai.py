"""OpenAIAdapter against a fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

import pytest
from openai_fake import SECRET

from aeonloop.contracts import AttachedFile, Usage
from aeonloop.exceptions import LLMNotReady
from aeonloop.llm.base import LLMAdapter, LLMError, LLMUnreachable, TokenUsage
from aeonloop.llm.openai_adapter import OpenAIAdapter
from aeonloop.llm.session import LLMSession, file_context
from aeonloop.prompts.registry import DraftAnswerInput, PromptId, PromptRegistry, ReasoningStepInput
from aeonloop.testing import DictMemo


@pytest.fixture
def call(make_call):
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    return make_call(PromptId.REASONING_STEP_USER, data, instructions="Explain tides <now>")


async def test_success_returns_text_usage_and_model(fake_openai, adapter_for, call):
    fake_openai.reply("the answer", model="served-model")
    adapter = adapter_for()

    reply = await adapter.complete(call)

    assert isinstance(adapter, LLMAdapter)
    assert adapter.family == "openai"
    assert reply.text == "the answer"
    assert reply.usage == TokenUsage(prompt_tokens=11, completion_tokens=7)
    assert reply.model == "served-model"
    [request] = fake_openai.seen
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.body["model"] == "fake-model"
    assert request.body["messages"] == [{"role": "user", "content": call.prompt.to_xml()}]
    assert "Explain tides &lt;now&gt;" in request.body["messages"][0]["content"]


async def test_the_plain_draft_is_sent_as_the_request_alone(fake_openai, adapter_for):
    """The draft is the one plain call a run's answer is held to: the server gets the request
    as a user would type it, none of Aeon's framing; with files to carry it is the prompt XML."""
    registry = PromptRegistry()
    data = DraftAnswerInput(request="What is the capital of France?")
    session = LLMSession(adapter_for(), registry, DictMemo(), "run-1", Usage())
    fake_openai.reply("Paris.")
    await session.text(PromptId.ANSWER_DRAFT_USER, data, scope="a/draft")
    [request] = fake_openai.seen
    assert request.body["messages"] == [
        {"role": "user", "content": "What is the capital of France?"}
    ]
    with_file = LLMSession(
        adapter_for(),
        registry,
        DictMemo(),
        "run-2",
        Usage(),
        files=file_context([AttachedFile(path="notes.txt", content="Lyon?")]),
    )
    fake_openai.reply("Paris.")
    await with_file.text(PromptId.ANSWER_DRAFT_USER, data, scope="a/draft")
    sent = fake_openai.seen[-1].body["messages"][0]["content"]
    assert sent.startswith("<prompt>") and "notes.txt" in sent


async def test_missing_usage_is_estimated_and_marked(fake_openai, adapter_for, call):
    fake_openai.reply("a reply of forty characters, more or less", usage=False)

    reply = await adapter_for().complete(call)

    assert reply.usage.estimated is True
    assert reply.usage.prompt_tokens == len(call.prompt.to_xml()) // 4
    assert reply.usage.completion_tokens == len(reply.text) // 4


@pytest.mark.parametrize("content", [None, "", "   "])
async def test_empty_content_is_transient_and_retried(fake_openai, adapter_for, call, content):
    fake_openai.reply(content)
    fake_openai.reply("recovered")

    reply = await adapter_for().complete(call)

    assert reply.text == "recovered"
    assert len(fake_openai.seen) == 2


async def test_content_that_stays_empty_fails_as_transient(fake_openai, adapter_for, call):
    fake_openai.reply("")

    with pytest.raises(LLMError, match=r"empty .*gave up after 3 attempt") as caught:
        await adapter_for(max_retries=2).complete(call)

    assert caught.value.transient is True
    assert len(fake_openai.seen) == 3


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_transient_status_is_retried(fake_openai, adapter_for, call, status):
    fake_openai.fail(status)
    fake_openai.reply("recovered")

    reply = await adapter_for().complete(call)

    assert reply.text == "recovered"
    assert len(fake_openai.seen) == 2


async def test_5xx_on_every_attempt_waits_for_the_server_instead_of_failing(
    fake_openai, adapter_for, call, caplog
):
    """Issue 24: a server answering only 5xx is an outage, not a failed call: the call waits,
    the outage is said once when it starts and once when it ends, and the call then succeeds."""
    for _ in range(3):
        fake_openai.fail(502)
    fake_openai.reply("back")
    fake_openai.models_status = 503
    adapter = adapter_for(max_retries=2)
    caplog.set_level(logging.WARNING)

    task = asyncio.create_task(adapter.complete(call))
    await asyncio.sleep(1.0)
    assert not task.done() and not adapter.outage.is_open
    assert len(fake_openai.seen) == 3  # nothing is sent while the server is away
    fake_openai.models_status = None

    reply = await asyncio.wait_for(task, 10)

    assert reply.text == "back" and len(fake_openai.seen) == 4
    said = [r.getMessage() for r in caplog.records if r.name == "aeon.llm"]
    assert len(said) == 2, said
    assert f"LLM server {fake_openai.base_url} cannot be reached (" in said[0]
    assert said[1] == f"LLM server {fake_openai.base_url} answers again; work goes on"


async def test_an_outage_past_the_deadline_ends_as_unreachable(fake_openai, adapter_for, make_call):
    fake_openai.fail(503)
    fake_openai.models_status = 503
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    deadline = datetime.now(UTC) + timedelta(seconds=1.5)
    started = time.monotonic()

    with pytest.raises(LLMUnreachable, match="deadline passed while the LLM server"):
        await adapter_for().complete(
            make_call(PromptId.REASONING_STEP_USER, data, deadline=deadline)
        )

    assert time.monotonic() - started < 3.0


# -- the start-up check -------------------------------------------------------------------------


async def test_a_base_url_without_v1_is_refused_at_start_with_the_hint(
    fake_openai, adapter_for
) -> None:
    """Issue 33: `http://localhost:8089` for llama-cpp-python's server passed the check, and
    every run then ended degraded with HTTP 404. A 404 at the model list now gets a one-token
    completion, and a 404 there too is one line that names `/v1`."""
    root = fake_openai.base_url.removesuffix("/v1")
    with pytest.raises(LLMNotReady) as caught:
        await adapter_for(base_url=root).check()
    said = str(caught.value)
    assert "answers 404 Not Found at /models and /chat/completions" in said
    assert f"(try {root}/v1)" in said
    assert [seen.path for seen in fake_openai.seen] == ["/chat/completions"]


async def test_a_server_with_no_model_list_but_a_chat_endpoint_passes_the_check(
    fake_openai, adapter_for
) -> None:
    fake_openai.models = None  # GET /v1/models answers 404
    await adapter_for().check()
    [probe] = fake_openai.seen
    assert probe.path == "/v1/chat/completions" and probe.body["max_tokens"] == 1


@pytest.mark.parametrize(
    "body", [{"object": "list", "data": None}, {"models": ["fake-model"]}, {"data": [{"x": 1}]}]
)
async def test_a_model_list_that_is_not_a_list_reads_as_no_models(
    fake_openai, adapter_for, body
) -> None:
    """A 200 whose body is no model list crashed `aeon ask` with a TypeError in `_models`."""
    fake_openai.models_body = body
    await adapter_for(model="not-listed-anywhere").check()
    assert not fake_openai.seen  # it answers: nothing to compare, nothing more to ask


async def test_a_server_that_connects_but_is_busy_passes_the_check_with_a_warning(
    adapter_for, monkeypatch, caplog
) -> None:
    """A local server busy with another request (llama-cpp-python, one slot on a CPU) takes the
    connection and answers nothing else until it is done: the check must not refuse a server
    that works (issue 33's slow servers). A port where nothing listens still fails it."""
    monkeypatch.setattr("aeonloop.llm.openai_adapter.CHECK_TIMEOUT_S", 0.3)
    held: list[asyncio.StreamWriter] = []

    async def accept_and_say_nothing(_: asyncio.StreamReader, writer: asyncio.StreamWriter):
        held.append(writer)

    server = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with caplog.at_level(logging.WARNING, logger="aeonloop.llm.openai_adapter"):
            await adapter_for(base_url=f"http://127.0.0.1:{port}/v1").check()
    finally:
        server.close()
        for writer in held:
            writer.close()
    assert held, "the check connected"
    assert "did not list its models within 0.3 s (busy?)" in caplog.text


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_fail_at_once(fake_openai, adapter_for, call, status):
    fake_openai.fail(status, "bad request")
    fake_openai.reply("never reached")

    with pytest.raises(LLMError, match=f"HTTP {status}") as caught:
        await adapter_for().complete(call)

    assert caught.value.transient is False
    assert len(fake_openai.seen) == 1


async def test_a_timeout_is_not_sent_again(fake_openai, adapter_for, call):
    """Issue 24: with the same budget and timeout it would time out again."""
    fake_openai.stall(1.5)
    started = time.monotonic()

    with pytest.raises(LLMError, match=r"no reply within AEON_LLM_TIMEOUT=0.2s") as caught:
        await adapter_for(timeout=0.2, max_retries=1).complete(call)

    assert caught.value.transient is False
    assert len(fake_openai.seen) == 1
    assert time.monotonic() - started < 1.2


async def test_connection_refused_names_the_url_and_what_it_comes_to(adapter_for, make_call):
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    deadline = datetime.now(UTC) + timedelta(seconds=1)
    adapter = adapter_for(base_url="http://user:pw@127.0.0.1:9/v1", max_retries=1)

    with pytest.raises(LLMUnreachable) as caught:
        await adapter.complete(make_call(PromptId.REASONING_STEP_USER, data, deadline=deadline))

    assert "http://***@127.0.0.1:9/v1" in str(caught.value) and "pw" not in str(caught.value)


async def test_api_key_never_in_errors_or_logs(fake_openai, adapter_for, call, caplog):
    fake_openai.fail(500, f"upstream rejected key {SECRET}")
    fake_openai.fail(401, f"Incorrect API key provided: {SECRET}")
    caplog.set_level(logging.DEBUG, logger="aeonloop.llm")

    with pytest.raises(LLMError) as caught:
        await adapter_for().complete(call)

    error = caught.value
    assert "HTTP 401" in str(error)
    assert SECRET not in str(error) and SECRET not in repr(error)
    assert error.__cause__ is None and error.__suppress_context__
    assert "retrying" in caplog.text and SECRET not in caplog.text


async def test_client_has_no_retries_of_its_own(adapter_for):
    assert adapter_for()._client.max_retries == 0


@pytest.mark.parametrize("options", [{"timeout": 0}, {"max_retries": -1}])
def test_bad_options_are_refused(options):
    base = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": None}
    with pytest.raises(ValueError):
        OpenAIAdapter(**base, **options)
