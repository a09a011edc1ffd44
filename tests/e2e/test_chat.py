"""Issue 34's chat endpoint, driven by the official `openai` client, sync and async, against a
real `aeon serve` and a real `aeon worker` on the session's Redis (the offline model, slowed so
a run lasts a second or two and can be left mid-way).

What a program using the OpenAI SDK sees: `aeon` listed as the model; a completion whose text,
id and usage are the run's own; a stream whose `reasoning_content` is the run's progress, one
line per phase as `aeon ask` prints it, and whose `content` joins to the published answer; the
usage chunk; a run's option through `extra_body`; bad input raised as the client's
BadRequestError (nothing published), no token or a wrong one as its AuthenticationError; and a
client that leaves before the answer: its run is cancelled and answered once, or, with
AEON_CHAT_FINISH_ON_DISCONNECT, it runs to its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from e2e_support import Bus, Processes, wait_until
from http_support import Server, served

from aeonloop.gateway.http.chat import SET_ASIDE_LINE
from aeonloop.llm.offline import OFFLINE_NOTICE

pytestmark = pytest.mark.e2e

#: Each LLM call of the offline model takes this long: a run lasts a couple of seconds, so a
#: client can leave it after its first phase with most of its calls still to come.
LLM_DELAY_MS = "150"
TOKEN = "chat-test-token-" + "5" * 20
REQUEST = "Explain tides, then summarise them for a child"
#: The phase lines of a run, in the order `aeon ask` prints them (gateway.progress).
PHASE_ORDER = ("A  profiled", "B  planned", "C  pass 1", "D  pass 2", "C  pass 2", "E  loop ended")


@dataclass
class Stack:
    server: Server
    bus: Bus
    env: dict[str, str]

    def client(self, api_key: str = TOKEN, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, **options)

    def async_client(self, api_key: str = TOKEN, **options: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, **options)

    @property
    def base_url(self) -> str:
        return f"http://{self.server.host}:{self.server.port}/v1"

    def run(self, correlation_id: str) -> dict[str, Any]:
        """The run as `GET /v1/runs/{id}` gives it, once answered."""

        def answered() -> dict[str, Any] | None:
            reply = self.server.get(
                f"/v1/runs/{correlation_id}", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            return reply.body if reply.status == 200 else None

        return wait_until(answered, 60, f"run {correlation_id} answered")

    def requests(self) -> dict[str, dict[str, Any]]:
        """Every request published under the stack's prefix, by correlation id."""
        bodies = (json.loads(fields["body"]) for _, fields in self.bus.entries("requests"))
        return {body["correlation_id"]: body for body in bodies}

    def answered_once(self, correlation_id: str) -> None:
        assert self.bus.answer_cids().count(correlation_id) == 1
        assert self.bus.stored_answer(correlation_id) is not None


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One worker and one server, behind a bearer token, under a prefix of their own."""
    logs = tmp_path_factory.mktemp("chat-logs")
    settings = {"AEON_LLM_DELAY_MS": LLM_DELAY_MS, "AEON_HTTP_TOKENS": TOKEN}
    with served(redis_url, logs, **settings) as (server, bus, env):
        yield Stack(server, bus, env)


@pytest.fixture(scope="module")
def slow_stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A worker whose offline model takes 1.5 s a call, writing its reply in chunks over it,
    and a server without tokens: an answer is written over long enough to be watched."""
    logs = tmp_path_factory.mktemp("chat-slow-logs")
    with served(redis_url, logs, AEON_LLM_DELAY_MS="1500") as (server, bus, env):
        yield Stack(server, bus, env)


def phase_starts(lines: list[str]) -> list[int]:
    """Where each line is in PHASE_ORDER: 0, 1, 2, ... when there is one line per phase."""
    return [
        next(i for i, phase in enumerate(PHASE_ORDER) if line.startswith(phase)) for line in lines
    ]


# -- the model, a completion ------------------------------------------------------------------


def test_the_one_model_is_aeon(stack: Stack) -> None:
    client = stack.client()
    assert [model.id for model in client.models.list()] == ["aeon"]
    assert client.models.retrieve("aeon").owned_by == "aeon"
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("gpt-4o")
    assert refused.value.body["param"] == "model"


def test_a_completion_is_the_runs_answer_with_its_usage_and_conversation(stack: Stack) -> None:
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Which floor is the pool on?"},
        {"role": "assistant", "content": "The third."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "the gym?"}],
        },
    ]
    raw = stack.client().chat.completions.with_raw_response.create(model="aeon", messages=messages)
    completion = raw.parse()
    assert raw.headers["x-aeon-run-id"] == completion.id
    assert (completion.object, completion.model) == ("chat.completion", "aeon")
    (choice,) = completion.choices
    assert (choice.message.role, choice.finish_reason) == ("assistant", "stop")

    run = stack.run(completion.id)
    result = run["result"]
    assert choice.message.content == result["final_answer"]["answer_text"]
    assert run["request"] == "And the gym?"  # the last user message, its text parts joined
    usage = result["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert completion.usage.total_tokens == usage["prompt_tokens"] + usage["completion_tokens"]
    assert completion.aeon["status"] == "converged" and completion.aeon["degraded"] is False
    # The messages before the request are its earlier turns, the system's as a user turn.
    turns = stack.requests()[completion.id]["messages"]
    assert [(turn["role"], turn["content"]) for turn in turns] == [
        ("user", "Answer briefly."),
        ("user", "Which floor is the pool on?"),
        ("assistant", "The third."),
    ]
    stack.answered_once(completion.id)


def test_a_runs_option_comes_through_extra_body(stack: Stack) -> None:
    rule = {"id": "cites", "check": {"type": "content", "search": "NOWHERE-IN-ANY-ANSWER"}}
    completion = stack.client().chat.completions.create(
        model="aeon",
        messages=[{"role": "user", "content": REQUEST}],
        temperature=0.2,  # a standard field that tunes one call: taken, and ignored
        reasoning_effort="high",  # the loop, which a rule and nothing to use skip at medium
        extra_body={"rules": [rule], "max_ttl": 1},
    )
    assert completion.aeon["total_passes"] == 1
    assert any("cites" in line for line in completion.aeon["degraded_because"])
    run = stack.run(completion.id)
    failed = run["result"]["final_answer"]["metadata"]["failed_rules"]
    assert [finding["id"] for finding in failed] == ["cites"]
    assert completion.choices[0].message.content == run["result"]["final_answer"]["answer_text"]


def test_the_openapi_document_describes_the_chat_endpoint(stack: Stack) -> None:
    document = stack.server.get("/openapi.json").body
    assert {"/v1/chat/completions", "/v1/models", "/v1/models/{model}"} <= set(document["paths"])
    request = document["components"]["schemas"]["ChatRequest"]
    assert request["properties"]["model"]["enum"] == ["aeon"]
    assert request["additionalProperties"] is False
    assert {"temperature", "rules", "max_ttl", "stream_options"} <= set(request["properties"])
    assert request["properties"]["max_ttl"]["maximum"] == 8  # AEON_MAX_PASSES
    answers = document["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert set(answers["200"]["content"]) == {"application/json", "text/event-stream"}
    assert answers["400"]["content"]["application/json"]["schema"]["$ref"].endswith("OpenAIError")


# -- streamed ---------------------------------------------------------------------------------


async def test_a_stream_gives_progress_as_reasoning_then_the_answer_then_usage(
    stack: Stack,
) -> None:
    async with stack.async_client() as client:
        stream = await client.chat.completions.create(
            model="aeon",
            messages=[{"role": "user", "content": REQUEST}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    (cid,) = {chunk.id for chunk in chunks}
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert deltas[0].role == "assistant"
    reasoning = [d.reasoning_content for d in deltas if getattr(d, "reasoning_content", None)]
    pieces = [d.content for d in deltas if d.content]

    lines = [text.removesuffix("\n") for text in reasoning if text.startswith(PHASE_ORDER)]
    assert phase_starts(lines) == list(range(len(PHASE_ORDER))), lines
    # The draft, a candidate the host's checks judge, was shown as thinking, and set aside
    # when the run went on to its plan.
    thinking = "".join(text for text in reasoning if not text.startswith(PHASE_ORDER))
    assert thinking.startswith(OFFLINE_NOTICE) and thinking.endswith(SET_ASIDE_LINE), thinking
    run = stack.run(cid)
    answer = run["result"]["final_answer"]["answer_text"]
    assert len(pieces) > 1 and "".join(pieces) == answer
    # Every line before any of the answer; then the finish, then the usage chunk.
    first_content = next(i for i, d in enumerate(deltas) if d.content)
    assert all(not getattr(d, "reasoning_content", None) for d in deltas[first_content:])
    finish = next(chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason)
    assert finish.choices[0].finish_reason == "stop" and finish.aeon["status"] == "converged"
    *_, last = chunks
    assert last.choices == [] and last.usage is not None
    usage = run["result"]["usage"]
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert all(chunk.usage is None for chunk in chunks[:-1])
    stack.answered_once(cid)


async def test_the_answer_comes_as_content_while_it_is_written(slow_stack: Stack) -> None:
    """Issue 34: the answer's tokens reach the client as they are written, as `content`, and
    join to the published answer exactly (the offline model writes it in chunks, as a
    streaming server sends it; the run has no check to set its answer aside)."""
    started = time.monotonic()
    first_content: float | None = None
    status_then = None
    chunks = []
    async with slow_stack.async_client() as client:
        stream = await client.chat.completions.create(
            model="aeon", messages=[{"role": "user", "content": REQUEST}], stream=True
        )
        async for chunk in stream:
            chunks.append(chunk)
            if first_content is None and chunk.choices and chunk.choices[0].delta.content:
                first_content = time.monotonic() - started
                status_then = slow_stack.server.get(f"/v1/runs/{chunk.id}").status
    whole = time.monotonic() - started
    assert first_content is not None
    print(f"\nfirst content token at {first_content:.2f} s of a {whole:.2f} s streamed run")
    assert status_then == 202  # the run was still writing its answer
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    content = [delta.content for delta in deltas if delta.content]
    answer = slow_stack.run(chunks[0].id)["result"]["final_answer"]["answer_text"]
    assert len(content) > 1 and "".join(content) == answer


def test_a_sync_stream_without_usage_has_no_usage_chunk(stack: Stack) -> None:
    with stack.client().chat.completions.create(
        model="aeon", messages=[{"role": "user", "content": REQUEST}], stream=True
    ) as stream:
        chunks = list(stream)
    assert all(chunk.choices and chunk.usage is None for chunk in chunks)
    content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert content == stack.run(chunks[0].id)["result"]["final_answer"]["answer_text"]


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"messages": [{"role": "assistant", "content": "Hi"}]}, "messages", "must be the user's"),
        ({"messages": []}, "messages", "holds no message: give at least one"),
        ({"messages": [{"role": "user", "content": "   "}]}, "messages.0.content", "empty"),
        ({"n": 2}, "n", "one answer"),
        ({"response_format": {"type": "json_object"}}, "response_format", "cannot promise JSON"),
        ({"extra_body": {"max_ttl": 1000}}, "max_ttl", "AEON_MAX_PASSES"),
        ({"extra_body": {"colour": "blue"}}, "colour", "is not a field"),
        ({"extra_body": {"approve_plan": True}, "stream": True}, "approve_plan", "stream"),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}]},
            "tools",
            "does not hand function calls back",
        ),
    ],
)
def test_bad_input_is_a_bad_request_error_and_nothing_is_published(
    stack: Stack, fields: dict[str, Any], param: str, words: str
) -> None:
    before = stack.bus.xlen("requests")
    arguments = {"model": "aeon", "messages": [{"role": "user", "content": REQUEST}], **fields}
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client().chat.completions.create(**arguments)
    error = refused.value
    assert (error.status_code, error.param, error.type) == (400, param, "invalid_request_error")
    assert words in error.message and "\n" not in error.message
    assert stack.bus.xlen("requests") == before


async def test_the_async_client_raises_the_same(stack: Stack) -> None:
    async with stack.async_client() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="aeon", messages=[{"role": "user", "content": REQUEST}], n=3
            )
        assert refused.value.param == "n"
        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": REQUEST}]
            )
        assert unknown.value.param == "model"


def test_the_apis_guards_say_no_in_openais_shape(stack: Stack) -> None:
    client = stack.client()
    message = [{"role": "user", "content": "x" * 1_100_000}]  # over AEON_HTTP_MAX_BODY_BYTES
    with pytest.raises(openai.APIStatusError) as too_large:
        client.chat.completions.create(model="aeon", messages=message)
    assert (too_large.value.status_code, too_large.value.param) == (413, "body")
    foreign = stack.client(default_headers={"Host": "evil.example"})
    with pytest.raises(openai.BadRequestError) as host:
        foreign.models.list()
    assert host.value.param == "Host" and "AEON_HTTP_ALLOWED_HOSTS" in host.value.message


@pytest.mark.parametrize("token", [None, "not-the-token-at-all-0123"], ids=["none", "wrong"])
async def test_no_token_or_a_wrong_one_is_an_authentication_error(
    stack: Stack, token: str | None
) -> None:
    before = stack.bus.xlen("requests")
    # No token: the Authorization header left out altogether.
    arguments: dict[str, Any] = {
        "model": "aeon",
        "messages": [{"role": "user", "content": REQUEST}],
        "extra_headers": {"Authorization": openai.Omit()} if token is None else None,
    }
    # The headers as sent, read by an httpx request hook: the client applies its key through
    # httpx's auth flow, so the request the error keeps (`response.request`) may not show it.
    sent: list[httpx.Headers] = []
    http_client = httpx.Client(
        event_hooks={"request": [lambda request: sent.append(request.headers)]}
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        stack.client(token or "unused", http_client=http_client).chat.completions.create(
            **arguments
        )
    assert refused.value.type == "authentication_error"
    assert len(sent) == 1 and ("authorization" in sent[0]) == (token is not None)
    assert "AEON_HTTP_TOKENS" in refused.value.message
    async with stack.async_client(token or "unused") as client:
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(**arguments, stream=True)
        with pytest.raises(openai.AuthenticationError):
            await client.models.list(extra_headers=arguments["extra_headers"])
    assert stack.bus.xlen("requests") == before
    assert TOKEN not in stack.server.proc.output


# -- a client that leaves ---------------------------------------------------------------------


async def leave_after_the_first_line(stack: Stack, base_url: str | None = None) -> str:
    """Stream a completion, hang up once the run has profiled, and return the run's id."""
    client = openai.AsyncOpenAI(base_url=base_url or stack.base_url, api_key=TOKEN, max_retries=0)
    async with client:
        stream = await client.chat.completions.create(
            model="aeon", messages=[{"role": "user", "content": REQUEST}], stream=True
        )
        async for chunk in stream:
            delta = chunk.choices[0].delta
            if (getattr(delta, "reasoning_content", None) or "").startswith("A  profiled"):
                break
        await stream.close()
    return chunk.id


async def test_a_client_that_leaves_mid_stream_has_its_run_cancelled_and_answered_once(
    stack: Stack,
) -> None:
    cid = await leave_after_the_first_line(stack)
    run = stack.run(cid)
    assert run["result"]["status"] == "cancelled", run["result"]["status"]
    stack.answered_once(cid)
    wait_until(
        lambda: (
            f"run {cid}: its chat client left before the answer; cancel requested"
            in stack.server.proc.stderr
        ),
        10,
        "the cancel logged",
    )


async def test_a_client_that_drops_a_request_it_waits_on_has_its_run_cancelled(
    stack: Stack,
) -> None:
    before = set(stack.requests())

    def submitted() -> str | None:
        new = set(stack.requests()) - before
        return new.pop() if new else None

    async with stack.async_client() as client:
        call = asyncio.ensure_future(
            client.chat.completions.create(
                model="aeon", messages=[{"role": "user", "content": REQUEST}]
            )
        )
        cid = await asyncio.to_thread(wait_until, submitted, 30, "the run submitted")
        call.cancel()  # the client gives up waiting, and its connection closes
        with contextlib.suppress(asyncio.CancelledError):
            await call
    assert stack.run(cid)["result"]["status"] == "cancelled"
    stack.answered_once(cid)


async def test_with_finish_on_disconnect_the_run_of_a_client_that_left_is_answered(
    stack: Stack, procs: Processes
) -> None:
    finishing = Server(procs, {**stack.env, "AEON_CHAT_FINISH_ON_DISCONNECT": "true"})
    cid = await leave_after_the_first_line(stack, f"http://{finishing.host}:{finishing.port}/v1")
    run = stack.run(cid)
    assert run["result"]["status"] == "converged", run["result"]["status"]
    stack.answered_once(cid)
    assert "AEON_CHAT_FINISH_ON_DISCONNECT" in finishing.proc.stderr
