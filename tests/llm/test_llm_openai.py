"""OpenAIAdapter against a fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from datetime import UTC, datetime, timedelta

import pytest
from openai_fake import SECRET, FakeOpenAI, Planned, completion, error_body

from aeonloop.contracts import AttachedFile, Usage
from aeonloop.exceptions import LLMNotReady
from aeonloop.llm.base import (
    ContextLengthError,
    LLMAdapter,
    LLMError,
    LLMUnreachable,
    TokenUsage,
)
from aeonloop.llm.openai_adapter import OpenAIAdapter
from aeonloop.llm.openai_errors import retry_after
from aeonloop.llm.outage import OutagePolicy
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


@pytest.mark.parametrize("streams", [True, False])
async def test_cached_tokens_are_read_where_the_server_reports_them(
    fake_openai, adapter_for, call, streams
):
    """Issue 42: OpenAI and vLLM report `usage.prompt_tokens_details.cached_tokens`; a server
    that reports none gives None, "not reported", never 0."""
    body = completion("cached")
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 5}
    fake_openai.planned.append(Planned(body=body, streams=streams))
    fake_openai.reply("plain")
    adapter = adapter_for()

    assert (await adapter.complete(call)).usage.cached_tokens == 5
    assert (await adapter.complete(call)).usage.cached_tokens is None


async def test_llama_cpp_s_cache_figure_is_read_as_cached_tokens(fake_openai, adapter_for, call):
    """llama.cpp's server reports its own figures: `timings.cache_n`, the prompt tokens its
    cache reused."""
    body = completion("from llama.cpp")
    body["timings"] = {"cache_n": 9, "prompt_n": 2}
    fake_openai.planned.append(Planned(body=body, streams=False))

    assert (await adapter_for().complete(call)).usage.cached_tokens == 9


def test_a_run_s_cached_tokens_sum_the_calls_that_reported_them():
    """None until a call's server reports its cache, then the sum of those that did."""
    usage = Usage()
    usage.add(10, 2)
    assert usage.cached_tokens is None
    usage.add(10, 2, cached_tokens=0)
    usage.add(10, 2, cached_tokens=7)
    usage.add(10, 2)
    assert usage.cached_tokens == 7 and usage.calls == 4
    assert (TokenUsage(1, 1) + TokenUsage(1, 1)).cached_tokens is None
    assert (TokenUsage(1, 1, cached_tokens=3) + TokenUsage(1, 1)).cached_tokens == 3


async def test_missing_usage_is_estimated_and_marked(fake_openai, adapter_for, call):
    """A stream that ends with no usage chunk, although the call asked for one."""
    fake_openai.reply("a reply of forty characters, more or less", usage=False)

    reply = await adapter_for().complete(call)

    [request] = fake_openai.seen
    assert request.body["stream_options"] == {"include_usage": True}
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
    the outage is said once when it starts and once when it ends, and the call then succeeds.
    The probe is a one-token completion (issue 41): the first fails, the gate stays closed."""
    for _ in range(4):
        fake_openai.fail(502)
    fake_openai.reply("back")
    adapter = adapter_for(max_retries=2)
    caplog.set_level(logging.WARNING)

    task = asyncio.create_task(adapter.complete(call))
    await asyncio.sleep(0.8)
    assert not task.done() and not adapter.outage.is_open
    assert len(fake_openai.seen) == 4  # three attempts, then one probe, after 0.5 s

    reply = await asyncio.wait_for(task, 10)

    assert reply.text == "back" and len(fake_openai.seen) == 6
    probes = [seen.body for seen in fake_openai.seen[3:5]]
    assert all(body["max_tokens"] == 1 and not body.get("stream") for body in probes)
    said = [r.getMessage() for r in caplog.records if r.name == "aeon.llm"]
    assert len(said) == 2, said
    assert f"LLM server {fake_openai.base_url} cannot be reached (" in said[0]
    assert said[1].startswith(f"LLM server {fake_openai.base_url} answers again after ")


#: The outage arithmetic at a tenth of its time: the first probe 0.05 s after the gate closes,
#: doubling to 3 s, at most 20 calls in a 6 s window once it has closed.
TENTH = OutagePolicy(first_s=0.05, max_s=3.0, calls_per_window=20, window_s=6.0)


async def test_a_server_listing_models_but_failing_every_chat_call_is_not_hammered(
    fake_openai, adapter_for, call, caplog
):
    """Issue 41, finding 1: the model list answers while every chat call returns 500; one call
    sent 246 chat POSTs and 58 model probes in 60 s, the gate flapping each second. The backoff
    now grows with failed calls and the probe is a chat call, so in a window (60 s; 6 s here,
    all times a tenth) the endpoint gets the call's 4 attempts and the probes at 0.5, 1.5, 3.5,
    7.5, 15.5 and 31.5 s: at most 10 POSTs, where the old gate sent about 25 in 6 s."""
    fake_openai.fail(500)
    adapter = adapter_for(max_retries=3, outage=TENTH)
    caplog.set_level(logging.INFO, logger="aeon.llm")

    task = asyncio.create_task(adapter.complete(call))
    await asyncio.sleep(TENTH.window_s)
    sent = len(fake_openai.seen)
    task.cancel()

    assert 4 < sent <= 10, sent
    assert all(seen.path == "/v1/chat/completions" for seen in fake_openai.seen)
    said = [r.getMessage() for r in caplog.records if r.name == "aeon.llm"]
    assert len(said) == 1 and "cannot be reached" in said[0], said  # one line per outage


async def test_many_calls_in_an_outage_send_at_most_the_window_s_calls(
    fake_openai, adapter_for, make_call
):
    """However many calls wait on the gate, once it has closed the endpoint gets at most
    `calls_per_window` calls in any window, probes included: each probe sent after the close is
    at most the window's `calls_per_window`-th, counting the attempts before the close."""
    fake_openai.fail(503)
    policy = OutagePolicy(first_s=0.01, max_s=0.02, calls_per_window=6, window_s=3.0)
    adapter = adapter_for(max_retries=1, outage=policy)
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    tasks = [
        asyncio.create_task(adapter.complete(make_call(PromptId.REASONING_STEP_USER, data)))
        for _ in range(4)
    ]
    while adapter.outage.is_open:
        await asyncio.sleep(0.005)
    closed = time.monotonic()
    await asyncio.sleep(2 * policy.window_s)
    for task in tasks:
        task.cancel()

    times = [seen.at for seen in fake_openai.seen]
    # What the gate sent after it closed: its probes (attempts sent before may land later).
    after = [seen.at for seen in fake_openai.seen if seen.body.get("max_tokens") == 1]
    assert after and min(after) > closed, "the gate sends probes while it is closed"
    window = policy.window_s - LATENCY_S  # the gate counts sends, the server arrivals
    for at in after:
        in_window = [other for other in times if at - window < other <= at]
        assert len(in_window) <= policy.calls_per_window, [round(t - closed, 3) for t in times]


#: Seconds a request may take from the gate to the server on a loaded machine (new connections
#: on two busy cores: up to a second was seen with ten calls at once).
LATENCY_S = 0.75


async def test_a_retry_after_pauses_every_call_of_the_process_once(
    fake_openai, adapter_for, make_call, caplog
):
    """A 429 asking to wait 1 s holds every call of the adapter, not only the one it answered,
    and is said once."""
    fake_openai.fail(429, headers={"Retry-After": "1"})
    fake_openai.reply("fine")
    adapter = adapter_for()
    caplog.set_level(logging.WARNING, logger="aeon.llm")
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )

    first = asyncio.create_task(adapter.complete(make_call(PromptId.REASONING_STEP_USER, data)))
    while not fake_openai.seen:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    others = [adapter.complete(make_call(PromptId.REASONING_STEP_USER, data)) for _ in range(3)]
    replies = await asyncio.gather(first, *others)

    assert [reply.text for reply in replies] == ["fine"] * 4
    asked_at = fake_openai.seen[0].at
    assert all(seen.at >= asked_at + 1.0 for seen in fake_openai.seen[1:])
    said = [r.getMessage() for r in caplog.records if "Retry-After" in r.getMessage()]
    assert len(said) == 1, said


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}, 1.5),
        (
            {
                "x-ratelimit-remaining-requests": "3",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "20ms",
            },
            0.02,
        ),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, 60.0),
        ({"x-ratelimit-reset-requests": "1s"}, None),  # not the limit that was hit
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, None),
    ],
)
def test_when_to_come_back_is_read_from_retry_after_or_the_provider_s_reset(headers, seconds):
    """Issue 42: a 429 without `Retry-After` may say when the exhausted limit resets, as
    OpenAI's `x-ratelimit-reset-*` headers do; the longest wait honoured is a minute."""
    assert retry_after(headers) == seconds


async def test_a_call_dropped_while_the_server_answers_others_is_a_failed_call(
    fake_openai, adapter_for, make_call
):
    """Issue 41, finding 9: a server that drops the connection on every attempt of one prompt
    while it answers others was taken for an outage, the gate opening and closing each second
    until the deadline. The call fails, as a failed call does, long before its deadline."""
    fake_openai.responder = lambda seen: (
        Planned(drop=True)
        if "poison" in str(seen.body.get("messages"))
        else Planned(body=completion("fine"))
    )
    adapter = adapter_for(max_retries=2)
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    deadline = datetime.now(UTC) + timedelta(seconds=30)
    poison = make_call(PromptId.REASONING_STEP_USER, data, "poison", deadline=deadline)
    started = time.monotonic()

    with pytest.raises(LLMError, match="answered other calls") as failed:
        await adapter.complete(poison)

    assert not isinstance(failed.value, LLMUnreachable) and failed.value.transient
    assert time.monotonic() - started < 5.0
    assert adapter.outage.is_open
    fine = await adapter.complete(make_call(PromptId.REASONING_STEP_USER, data, "tides"))
    assert fine.text == "fine"


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


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": 0},
        {"max_retries": -1},
        {"idle_timeout": 0},
        {"first_token_per_1k": -1},
        {"whole_reply_per_1k": -1},
    ],
)
def test_bad_options_are_refused(options):
    base = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": None}
    with pytest.raises(ValueError):
        OpenAIAdapter(**base, **options)


# -- streaming, and time limits that judge progress (issue 33) -----------------------------------

#: Bounds small enough that a test takes seconds, with a stall well past each of them.
FIRST_TOKEN_S, IDLE_S, STALL_S = 0.8, 0.8, 2.5
#: The adapter's logger, where a retry and a step down are said.
ADAPTER_LOG = "aeonloop.llm.openai_adapter"


def quick(adapter_for, **overrides):
    """An adapter whose first-token bound is FIRST_TOKEN_S whatever the prompt's length."""
    bounds = {"timeout": FIRST_TOKEN_S, "idle_timeout": IDLE_S, "first_token_per_1k": 0.0}
    return adapter_for(**{**bounds, **overrides})


async def test_a_streamed_reply_assembles_content_reasoning_and_usage(
    fake_openai, adapter_for, call
):
    fake_openai.reply(
        "<think>a draft</think>The tides follow the Moon, twice a day.",
        reasoning_content="First I think it over, word by word.",
    )

    reply = await adapter_for().complete(call)

    assert reply.text == "The tides follow the Moon, twice a day."
    assert reply.usage == TokenUsage(prompt_tokens=11, completion_tokens=7)
    assert (reply.truncated, reply.refused) == (False, False)
    [request] = fake_openai.seen
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}


async def test_a_streamed_reply_cut_at_the_length_limit_is_truncated(
    fake_openai, adapter_for, call
):
    fake_openai.reply("The tides rise and", finish_reason="length")

    reply = await adapter_for(max_tokens=100).complete(call)

    assert (reply.text, reply.truncated) == ("The tides rise and", True)
    assert fake_openai.streamed == [True, True]  # asked again once, with twice the budget
    assert [seen.body["max_tokens"] for seen in fake_openai.seen] == [100, 1024]


async def test_no_first_token_within_the_bound_is_retried_then_succeeds(
    fake_openai, adapter_for, call, caplog
):
    """A server that accepted the call and writes nothing (the headers came; no chunk): the
    call is cut at the first-token bound and sent again, saying which bound and how long."""
    caplog.set_level(logging.WARNING, logger=ADAPTER_LOG)
    fake_openai.stall(STALL_S)
    fake_openai.reply("recovered")

    reply = await quick(adapter_for).complete(call)

    assert reply.text == "recovered"
    assert len(fake_openai.seen) == 2
    [said] = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert "(attempt 1 of 3)" in said
    assert f"no first token within {FIRST_TOKEN_S:.3g}s (AEON_LLM_TIMEOUT=" in said


async def test_a_stall_that_lasts_is_retried_within_the_budget_then_fails(
    fake_openai, adapter_for, call
):
    """What replaced "a timeout is not sent again" (issue 24): a stall is transient, sent again
    as often as AEON_LLM_MAX_RETRIES allows and no more, and the error names the bound."""
    fake_openai.stall(STALL_S)

    with pytest.raises(LLMError, match=r"no first token within .*gave up after 2 attempt") as cut:
        await quick(adapter_for, max_retries=1).complete(call)

    assert cut.value.transient is True and not cut.value.unreachable
    assert len(fake_openai.seen) == 2


async def test_the_first_token_bound_grows_with_the_prompt(adapter_for, make_call):
    """The server processes the prompt before its first token: AEON_LLM_TIMEOUT, plus
    AEON_LLM_FIRST_TOKEN_PER_1K_S for each 1,000 of its tokens (about 4 characters each)."""
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    short = make_call(PromptId.REASONING_STEP_USER, data, instructions="Explain tides.")
    long = make_call(PromptId.REASONING_STEP_USER, data, instructions="A long prompt. " * 2_000)
    adapter = adapter_for(timeout=60.0, first_token_per_1k=30.0)

    assert 60.0 < adapter.first_token_s(short) < 62.0
    assert adapter.first_token_s(long) == 60.0 + 30.0 * (len(long.message) // 4) / 1000
    assert len(long.message) > 30_000  # so the bound is over 4 minutes


async def test_a_stall_mid_stream_is_retried(fake_openai, adapter_for, call, caplog):
    caplog.set_level(logging.WARNING, logger=ADAPTER_LOG)
    fake_openai.reply("The tides follow the Moon.", pause=(3, STALL_S))  # role, "The ", "tides "
    fake_openai.reply("recovered")

    reply = await quick(adapter_for).complete(call)

    assert reply.text == "recovered"
    assert len(fake_openai.seen) == 2
    [said] = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert f"the reply stalled: no token for {IDLE_S:.3g}s after 2 streamed chunk(s)" in said
    assert f"AEON_LLM_IDLE_TIMEOUT={IDLE_S:.3g}s" in said


#: A slow reply that keeps coming: WORDS chunks, GAP_S apart.
WORDS, GAP_S = 12, 0.15


async def test_a_slow_steady_stream_longer_than_the_timeout_is_not_cut(
    fake_openai, adapter_for, call
):
    """The SmolLM2 case of issue 33: a reply that takes longer than AEON_LLM_TIMEOUT in all, and
    never waits long for its next token, is taken whole in one request."""
    assert WORDS * GAP_S > 2 * FIRST_TOKEN_S  # the premise: the stream outlasts the timeout
    text = " ".join(f"word{n}" for n in range(WORDS))
    fake_openai.reply(text, gap=GAP_S)

    reply = await quick(adapter_for, idle_timeout=1.5).complete(call)

    assert reply.text == text
    assert len(fake_openai.seen) == 1


async def test_a_call_queued_behind_another_that_is_being_written_is_not_cut(
    fake_openai, adapter_for, call
):
    """A server serving one call at a time answers a queued call only once the one before it
    is written: longer than the first-token bound, but the server is working all the while,
    for this process. Its first-token bound runs again at each token the other gets, so the
    queued call is not cut, and no call is sent twice."""
    text = " ".join(f"word{n}" for n in range(WORDS))
    written_s = WORDS * GAP_S
    assert written_s > 2 * FIRST_TOKEN_S  # the premise: the queue outlasts the bound

    def respond(seen):
        if len(fake_openai.seen) == 1:
            return Planned(body=completion(text), gap=GAP_S)
        return Planned(body=completion("queued"), sleep=written_s + GAP_S)  # served after

    fake_openai.responder = respond
    adapter = quick(adapter_for)
    first = asyncio.create_task(adapter.complete(call))
    await asyncio.sleep(0.05)

    queued = await adapter.complete(call)

    assert [(await first).text, queued.text] == [text, "queued"]
    assert len(fake_openai.seen) == 2


async def test_the_deadline_cuts_a_stream_that_keeps_coming(fake_openai, adapter_for, make_call):
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    deadline = datetime.now(UTC) + timedelta(seconds=1)
    fake_openai.reply(" ".join(["more"] * 40), gap=0.2)  # 8 s of steady tokens

    with pytest.raises(LLMError, match="deadline passed before the reply came") as cut:
        await quick(adapter_for, timeout=5.0, idle_timeout=5.0).complete(
            make_call(PromptId.REASONING_STEP_USER, data, deadline=deadline)
        )

    assert cut.value.transient is False
    assert len(fake_openai.seen) == 1


def refuses_streaming(message: str, status: int = 400, sleep: float = 0.0):
    """A responder refusing any request that streams, with `message`; whole replies are fine."""

    def respond(seen):
        if seen.body.get("stream"):
            time.sleep(sleep)
            return Planned(status=status, body=error_body(message))
        return Planned(body=completion("whole"))

    return respond


async def test_a_server_refusing_streaming_steps_down_once(fake_openai, adapter_for, call, caplog):
    """Both calls in flight are refused; the step down is taken and said once, and no call
    asks to stream again."""
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)
    fake_openai.responder = refuses_streaming("stream: streaming is not supported", sleep=0.3)
    adapter = adapter_for()

    replies = await asyncio.gather(adapter.complete(call), adapter.complete(call))
    again = await adapter.complete(call)

    assert [reply.text for reply in [*replies, again]] == ["whole"] * 3
    assert fake_openai.streamed == [True, True, False, False, False]
    said = [r for r in caplog.records if "refused streaming" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO]
    assert "refused streaming (HTTP 400); calls are sent whole" in said[0].getMessage()
    assert adapter.streaming == "off"


async def test_a_server_refusing_stream_options_streams_without_them(
    fake_openai, adapter_for, call, caplog
):
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)

    def respond(seen):
        if "stream_options" in seen.body:
            return Planned(422, error_body("Unrecognized request argument: stream_options"))
        return Planned(body=completion("streamed"))

    fake_openai.responder = respond
    adapter = adapter_for()

    first = await adapter.complete(call)
    second = await adapter.complete(call)

    assert first.text == second.text == "streamed"
    assert fake_openai.streamed == [True, True, True]
    assert ["stream_options" in seen.body for seen in fake_openai.seen] == [True, False, False]
    assert second.usage.estimated is True  # no usage was asked for, so none came
    assert caplog.text.count("refused stream_options (HTTP 422)") == 1
    assert adapter.streaming == "without_usage"


async def test_a_500_naming_the_stream_is_no_step_down(fake_openai, adapter_for, call):
    """Only a 4xx refuses streaming; a 5xx that names it is the server failing (retried)."""
    fake_openai.fail(500, "error while streaming the reply")
    fake_openai.reply("recovered")
    adapter = adapter_for()

    reply = await adapter.complete(call)

    assert reply.text == "recovered" and adapter.streaming == "with_usage"
    assert fake_openai.streamed == [True, True]


async def test_a_server_answering_a_stream_with_json_is_read_whole_and_sent_whole(
    fake_openai, adapter_for, call, caplog
):
    """A server that ignores `stream: true` and answers JSON: its answer is used (not asked for
    again), and calls are sent whole from then on."""
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)
    fake_openai.planned.append(Planned(body=completion("answered whole"), streams=False))
    adapter = adapter_for()

    first = await adapter.complete(call)
    second = await adapter.complete(call)

    assert first.text == second.text == "answered whole"
    assert first.usage == TokenUsage(prompt_tokens=11, completion_tokens=7)
    assert fake_openai.streamed == [True, False]
    assert caplog.text.count("answered a streamed call with application/json") == 1
    assert adapter.streaming == "off"


async def test_a_stream_answered_with_no_reply_in_it_is_sent_again_whole(
    fake_openai, adapter_for, call
):
    fake_openai.planned.append(Planned(body={"status": "ok"}, streams=False))
    fake_openai.reply("the reply")

    reply = await adapter_for().complete(call)

    assert reply.text == "the reply"
    assert fake_openai.streamed == [True, False]


async def test_a_whole_reply_has_its_first_token_bound_and_time_to_write_its_budget(
    adapter_for, call
):
    """A call sent whole has one "token", its whole reply, written before any byte is sent: its
    bound is the first-token bound plus AEON_LLM_WHOLE_REPLY_PER_1K_S per 1,000 tokens of the
    reply budget (a budget of UNBUDGETED_REPLY_TOKENS where the call sends none)."""
    adapter = adapter_for(timeout=60.0, first_token_per_1k=30.0, whole_reply_per_1k=120.0)

    assert adapter.whole_reply_s(call, 500) == adapter.first_token_s(call) + 60.0
    assert adapter.whole_reply_s(call, None) == adapter.first_token_s(call) + 120.0 * 4.096


async def test_a_slow_whole_reply_within_its_budget_s_time_is_not_cut(
    fake_openai, adapter_for, call
):
    """Later than the first-token bound, within the allowance for its budget: one request."""
    adapter = quick(adapter_for, whole_reply_per_1k=1.0, max_tokens=2_000)  # bound: 2.8 s
    adapter.streaming = "off"
    fake_openai.planned.append(Planned(body=completion("slow but whole"), sleep=1.5))

    reply = await adapter.complete(call)

    assert reply.text == "slow but whole"
    assert fake_openai.streamed == [False]


async def test_a_whole_reply_later_than_its_bound_is_a_stall(fake_openai, adapter_for, call):
    """A reply later than the whole bound is a stall, retried, and said as such."""
    fake_openai.responder = None
    adapter = quick(adapter_for, max_retries=1, whole_reply_per_1k=0.0, max_tokens=300)
    adapter.streaming = "off"
    fake_openai.stall(STALL_S)

    with pytest.raises(LLMError, match=r"no reply \(sent whole, not streamed\) within") as cut:
        await adapter.complete(call)

    assert "AEON_LLM_WHOLE_REPLY_PER_1K_S=0s for each 1,000 of the reply's budget of 300" in str(
        cut.value
    )
    assert fake_openai.streamed == [False, False]


def cut_short(text: str = "The tides follow the Moon.") -> Planned:
    """A stream llama-cpp-python's server cuts after its role chunk, as another request comes
    while it is served (its `interrupt_requests`): `[DONE]`, no content, no finish reason."""
    return Planned(body=completion(text), cut=lambda sent: sent >= 1)


def cut_when_another_comes(fake: FakeOpenAI, *, within_s: float = 5.0) -> Planned:
    """`cut_short`, cut when the server has a second request, as that server cuts a stream
    because another request came: on a loaded machine the second of two calls sent together
    may reach the server only after the first was cut, which that server would not have cut.
    (If none comes within `within_s`, cut all the same: the test then fails, not hangs.)"""

    def cut(sent: int) -> bool:
        waited_until = time.monotonic() + within_s
        while len(fake.seen) < 2 and time.monotonic() < waited_until:
            time.sleep(0.005)
        return sent >= 1

    return Planned(body=completion("The tides follow the Moon."), cut=cut)


async def test_a_stream_cut_short_is_sent_again_and_calls_go_one_at_a_time(
    fake_openai, adapter_for, call, caplog
):
    """A stream with no finish reason is no reply: the call is sent again at once, not as a
    failure (with no retries allowed it is still answered). The server cuts a stream when
    another call comes, so calls go one at a time from then on, still streamed, each sent once
    the one before has its reply; said once, at INFO, naming the server's setting."""
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)
    served_s = 0.4
    fake_openai.planned += [cut_when_another_comes(fake_openai), cut_short()]
    fake_openai.planned.append(Planned(body=completion("answered"), sleep=served_s))
    adapter = adapter_for(max_retries=0)

    replies = await asyncio.gather(adapter.complete(call), adapter.complete(call))
    again = await adapter.complete(call)

    assert [reply.text for reply in [*replies, again]] == ["answered"] * 3
    assert fake_openai.streamed == [True] * 5 and adapter.streaming == "with_usage"
    sent_again = [seen.at for seen in fake_openai.seen[2:]]
    assert all(later - earlier >= served_s for earlier, later in itertools.pairwise(sent_again))
    said = [r for r in caplog.records if r.name == ADAPTER_LOG]
    assert [r.levelno for r in said] == [logging.INFO]
    assert "--interrupt_requests false" in said[0].getMessage()
    assert "calls are sent one at a time from now on" in said[0].getMessage()


async def test_a_stream_cut_short_when_sent_alone_steps_down_to_whole_calls(
    fake_openai, adapter_for, call, caplog
):
    """Sent in its turn, with no call of ours before it still at the server, a stream cut short
    was cut by another client's request (more processes on one server): calls are sent whole
    from then on, which such a server never cuts, said at INFO as the other step downs are."""
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)
    fake_openai.planned += [cut_short(), cut_short()]
    fake_openai.reply("whole")
    adapter = adapter_for()

    reply = await adapter.complete(call)

    assert reply.text == "whole"
    assert fake_openai.streamed == [True, True, False] and adapter.streaming == "off"
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == ADAPTER_LOG]
    assert [level for level, _ in said] == [logging.INFO, logging.INFO]
    assert "cut short a stream sent alone" in said[1][1]


async def test_a_stream_cut_short_by_our_own_earlier_call_is_no_step_down(
    fake_openai, adapter_for, call
):
    """A call sent before the turns began, still waiting at the server, cuts the stream sent in
    its turn: that is our own doing, not another client's, and calls keep streaming."""

    def respond(seen):
        if len(fake_openai.seen) == 1:  # waits at the server while the others are cut
            return Planned(body=completion("first"), sleep=1.0)
        if len(fake_openai.seen) in (2, 3):
            return cut_short()
        return Planned(body=completion("second"))

    fake_openai.responder = respond
    adapter = adapter_for()
    waiting = asyncio.create_task(adapter.complete(call))
    await asyncio.sleep(0.2)

    second = await adapter.complete(call)

    assert [(await waiting).text, second.text] == ["first", "second"]
    assert fake_openai.streamed == [True] * 4 and adapter.streaming == "with_usage"


async def test_a_stream_with_content_but_no_finish_reason_is_no_reply(
    fake_openai, adapter_for, call
):
    """Cut part way, what came is not the reply, however much it holds."""
    fake_openai.planned.append(cut_short("The tides follow the Moon, twice a day."))
    fake_openai.planned[-1].cut = lambda sent: sent >= 4
    fake_openai.reply("The whole answer.")

    reply = await adapter_for().complete(call)

    assert reply.text == "The whole answer."
    assert fake_openai.streamed == [True, True]


async def test_a_stream_without_usage_is_estimated_never_below_its_chunks(
    fake_openai, adapter_for, call
):
    """llama-cpp-python's server sends no usage in a stream, include_usage or not: the usage is
    estimated and marked so; each chunk that carried text counts at least one token."""
    text = "a b c d e f g h i j k l"  # 12 chunks of 2 characters: 6 tokens by length alone
    fake_openai.reply(text, usage=False)

    reply = await adapter_for().complete(call)

    assert fake_openai.seen[0].body["stream_options"] == {"include_usage": True}
    assert reply.usage.estimated is True
    assert reply.usage.completion_tokens == 12
    assert reply.usage.prompt_tokens == len(call.message) // 4


class Sink:
    """A TextSink that keeps what it is told, in order: ("write", text) and ("reset", "")."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    async def write(self, text: str) -> None:
        self.said.append(("write", text))

    async def reset(self) -> None:
        self.said.append(("reset", ""))

    @property
    def writes(self) -> list[str]:
        return [text for kind, text in self.said if kind == "write"]

    @property
    def shown(self) -> str:
        """What the pieces since the last reset join to."""
        resets = [n for n, (kind, _) in enumerate(self.said) if kind == "reset"]
        since = self.said[resets[-1] + 1 :] if resets else self.said
        return "".join(text for _, text in since)


def with_sink(call, sink: Sink):
    return dataclasses.replace(call, sink=sink)


async def test_a_streamed_answer_is_written_as_it_comes_and_never_its_reasoning(
    fake_openai, adapter_for, call
):
    fake_openai.reply(
        "<think>a draft of it</think>The tides follow the Moon, twice a day.",
        reasoning_content="First I think it over.",
    )
    sink = Sink()

    reply = await adapter_for().complete(with_sink(call, sink))

    assert sink.shown == reply.text == "The tides follow the Moon, twice a day."
    assert len(sink.writes) > 3  # a piece at a time, as the words came
    assert [kind for kind, _ in sink.said] == ["write"] * len(sink.writes)
    assert "draft" not in "".join(sink.writes) and "think" not in "".join(sink.writes)


async def test_a_whole_reply_is_written_once(fake_openai, adapter_for, call):
    adapter = adapter_for()
    adapter.streaming = "off"
    fake_openai.reply("<think>a draft</think>The tides follow the Moon.")
    sink = Sink()

    await adapter.complete(with_sink(call, sink))

    assert sink.said == [("write", "The tides follow the Moon.")]


async def test_an_attempt_after_one_that_wrote_resets_the_sink_first(
    fake_openai, adapter_for, call
):
    """The stalled attempt wrote its first words; the next resets before it writes, so what is
    shown since is the reply, whole."""
    fake_openai.reply("The tides stall here and", pause=(3, STALL_S))
    fake_openai.reply("The tides follow the Moon.")
    sink = Sink()

    reply = await quick(adapter_for).complete(with_sink(call, sink))

    assert sink.said[:2] == [("write", "The"), ("write", " tides")]
    assert sink.said.count(("reset", "")) == 1
    assert sink.shown == reply.text == "The tides follow the Moon."


async def test_a_stream_cut_short_and_sent_again_shows_the_whole_reply(
    fake_openai, adapter_for, call
):
    fake_openai.planned.append(cut_short("The first words, then cut"))
    fake_openai.planned[-1].cut = lambda sent: sent >= 3
    fake_openai.reply("The whole answer.")
    sink = Sink()

    await adapter_for().complete(with_sink(call, sink))

    assert sink.said[:3] == [("write", "The"), ("write", " first"), ("reset", "")]
    assert sink.said.count(("reset", "")) == 1
    assert sink.shown == "The whole answer."


async def test_thinking_the_prompt_opened_is_taken_back_then_held_back(
    fake_openai, adapter_for, call
):
    """R1's and Qwen3's templates open `<think>` in the prompt: the reply's first words are
    thinking, known as such only at the closing tag. The first such reply is taken back (a
    reset) and its answer written; the adapter has learnt, and the next shows no thinking."""
    thinking = "Okay, the user wants tides explained.\n</think>\n\nThe tides follow the Moon."
    fake_openai.reply(thinking)
    adapter = adapter_for()
    first, second = Sink(), Sink()

    await adapter.complete(with_sink(call, first))
    await adapter.complete(with_sink(call, second))

    assert "Okay," in first.writes[0] and ("reset", "") in first.said
    assert first.shown == "The tides follow the Moon."
    assert "".join(second.writes) == "The tides follow the Moon."
    assert ("reset", "") not in second.said


async def test_an_error_event_mid_stream_is_transient(fake_openai, adapter_for, call):
    fake_openai.planned.append(
        Planned(body=completion("The tides follow"), error_after=(2, "the slot was lost"))
    )
    fake_openai.reply("recovered")

    reply = await adapter_for().complete(call)

    assert reply.text == "recovered"
    assert len(fake_openai.seen) == 2


async def test_a_context_error_event_mid_stream_is_a_context_length_error(
    fake_openai, adapter_for, call
):
    message = "the request exceeds the available context size (n_ctx 4096), try increasing it"
    fake_openai.planned.append(Planned(body=completion("x"), error_after=(1, message)))

    with pytest.raises(ContextLengthError) as caught:
        await adapter_for().complete(call)

    assert caught.value.limit_tokens == 4096
    assert len(fake_openai.seen) == 1
