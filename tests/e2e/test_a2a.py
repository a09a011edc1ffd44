"""Aeon as an A2A agent, driven by the official `a2a-sdk` client against a real `aeon serve` and
worker, behind a bearer token (docs/a2a.md).

Each case checks what another agent sees: the card at the well-known path with the skill
`ask`; a message answered as a task whose artifact is the published answer and whose metadata
names the run; a streamed message whose status updates are the run's progress lines and whose
artifact chunks, applied as A2A says (an `append: false` chunk replaces), are the published
answer; a cancelled task ending `canceled` with its run answered once, `cancelled`; bad input
`rejected` with nothing published; and no token refused, with nothing published. The model is
the offline one, slowed so a run lasts long enough to be cancelled."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, Client, ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from e2e_support import assert_answered_once, wait_until
from google.protobuf.json_format import MessageToDict
from http_support import Stack, served

pytestmark = pytest.mark.e2e

REQUEST = "Explain tides, then summarise them for a child"
TOKEN = "a2a-test-token-0123456789"
#: Each LLM call takes this long: a run lasts long enough to be cancelled mid-way.
LLM_DELAY_MS = "400"


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("a2a-logs")
    settings = {"AEON_LLM_DELAY_MS": LLM_DELAY_MS, "AEON_HTTP_TOKENS": TOKEN}
    with served(redis_url, logs, **settings) as (server, bus, env):
        yield Stack(server, bus, env)


def base_url(stack: Stack) -> str:
    return f"http://{stack.server.host}:{stack.server.port}"


@contextlib.asynccontextmanager
async def a2a_client(
    stack: Stack, token: str | None = TOKEN, streaming: bool = True
) -> AsyncIterator[Client]:
    """The official client, made from the agent card it fetches, sending `token`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=120)) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = await create_client(base_url(stack), client_config=config)
        async with client:
            yield client


def message(text: str = REQUEST, *parts: Part) -> SendMessageRequest:
    sent = new_text_message(text, role=Role.ROLE_USER)
    sent.parts.extend(parts)
    return SendMessageRequest(message=sent)


def metadata(task: Task) -> dict[str, Any]:
    return MessageToDict(task.metadata)


def answer_text(task: Task) -> str:
    """The text of the task's one artifact, `answer`, as one part."""
    (artifact,) = task.artifacts
    (part,) = artifact.parts
    assert artifact.artifact_id == "answer"
    return part.text


async def test_the_agent_card_names_the_skill_ask_and_the_bearer_token(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:  # the card is public, as the OpenAPI document is
        card = await A2ACardResolver(http, base_url(stack)).get_agent_card()
    assert card.name == "Aeon" and card.capabilities.streaming
    (interface,) = card.supported_interfaces
    assert interface.url == base_url(stack) + "/a2a"
    assert interface.protocol_binding == "JSONRPC"
    (skill,) = card.skills
    assert skill.id == "ask"
    assert "text/plain" in skill.input_modes and "text/markdown" in skill.input_modes
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"


async def test_a_message_is_answered_as_a_task_holding_the_published_answer(
    stack: Stack,
) -> None:
    notes = Part(text="The Moon's pull makes two bulges of water.", filename="notes.md")
    async with a2a_client(stack, streaming=False) as client:
        (response,) = [r async for r in client.send_message(message(REQUEST, notes))]
        task = response.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        outcome = metadata(task)
        cid = outcome["correlation_id"]
        stored = stack.bus.stored_answer(cid)
        assert stored is not None and outcome["status"] == stored["status"] == "converged"
        assert answer_text(task) == stored["final_answer"]["answer_text"]
        assert outcome["total_passes"] == stored["total_passes"]
        # The files reached the run, by their names.
        (request,) = [f for _, f in stack.bus.entries("requests") if f["cid"].decode() == cid]
        assert b"notes.md" in request["body"]

        again = await client.get_task(GetTaskRequest(id=task.id))
        assert again.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer_text(again) == stored["final_answer"]["answer_text"]


async def test_a_streamed_message_carries_progress_and_the_answer_as_it_is_written(
    stack: Stack,
) -> None:
    events: list[StreamResponse] = []
    async with a2a_client(stack) as client:
        async for event in client.send_message(message()):
            events.append(event)
    lines = [
        e.status_update.status.message.parts[0].text
        for e in events
        if e.HasField("status_update")
        and e.status_update.status.state == TaskState.TASK_STATE_WORKING
        and e.status_update.status.HasField("message")
    ]
    phases = [line[:2] for line in lines[1:]]  # after "run ... submitted"
    assert lines[0].startswith("run ") and phases[0] == "A " and phases[-1] == "E "
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    artifact = ""
    for chunk in chunks:  # as A2A applies them: appended, or replacing
        text = "".join(part.text for part in chunk.artifact.parts)
        artifact = artifact + text if chunk.append else text
    assert chunks[-1].last_chunk and len(chunks) > 1, "the answer came whole, not as written"
    last = events[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    cid = MessageToDict(last.metadata)["correlation_id"]
    stored = wait_until(lambda: stack.bus.stored_answer(cid), 30, f"the answer of {cid}")
    assert artifact == stored["final_answer"]["answer_text"]


async def test_a_cancelled_task_ends_canceled_with_its_run_answered_once(stack: Stack) -> None:
    before = stack.bus.answer_cids()
    async with a2a_client(stack) as client:
        stream = client.send_message(message())
        cid = task_id = None
        async for event in stream:  # up to the update that names the run
            if event.HasField("status_update") and event.status_update.metadata:
                cid = MessageToDict(event.status_update.metadata)["correlation_id"]
                task_id = event.status_update.task_id
                break
        assert cid and task_id and stack.bus.stored_answer(cid) is None
        rest = asyncio.ensure_future(_drain(stream))
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        assert metadata(cancelled)["status"] == "cancelled"
        await asyncio.wait_for(rest, 30)
        got = await client.get_task(GetTaskRequest(id=task_id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
    stored = stack.bus.stored_answer(cid)
    assert stored is not None and stored["status"] == "cancelled"
    assert answer_text(got) == stored["final_answer"]["answer_text"]
    assert_answered_once(stack.bus, [*before, cid])


async def _drain(stream: AsyncIterator[StreamResponse]) -> None:
    async for _ in stream:
        pass


async def test_bad_input_is_rejected_in_one_line_and_nothing_is_published(stack: Stack) -> None:
    before = len(stack.bus.entries("requests"))
    async with a2a_client(stack, streaming=False) as client:
        (empty,) = [r async for r in client.send_message(message("   "))]
        by_url = Part(url="https://example.com/notes.md", filename="notes.md")
        (fetched,) = [r async for r in client.send_message(message(REQUEST, by_url))]
    for response, words in ((empty, "the request is empty"), (fetched, "parts[1]: a file by URL")):
        status = response.task.status
        assert status.state == TaskState.TASK_STATE_REJECTED
        (line,) = [part.text for part in status.message.parts]
        assert line.startswith(words) and "\n" not in line
    assert len(stack.bus.entries("requests")) == before


async def test_no_token_a_wrong_one_or_a_body_past_the_limit_is_refused_and_nothing_published(
    stack: Stack,
) -> None:
    before = len(stack.bus.entries("requests"))
    bare = stack.server.post("/a2a", {"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert (bare.status, bare.body["field"]) == (401, "Authorization")
    for token in (None, "not-the-token-at-all"):
        async with a2a_client(stack, token, streaming=False) as client:
            with pytest.raises(A2AClientError, match="401"):
                async for _ in client.send_message(message()):
                    pass
    auth = {"Authorization": f"Bearer {TOKEN}"}
    huge = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"x": "y" * 1_100_000}}
    too_large = stack.server.post("/a2a", huge, headers=auth)  # AEON_HTTP_MAX_BODY_BYTES
    assert (too_large.status, too_large.body["field"]) == (413, "body")
    assert len(stack.bus.entries("requests")) == before


async def test_a2a_0_3_clients_are_answered_by_its_method_names(stack: Stack) -> None:
    """`message/send` and `tasks/get`, as A2A 0.3 names them (the SDK serves both versions)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    sent = {
        "role": "user",
        "parts": [{"kind": "text", "text": REQUEST}],
        "messageId": "m-0-3",
        "kind": "message",
    }
    call = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": sent}}
    reply = stack.server.post("/a2a", call, headers=auth)
    assert reply.status == 200, reply
    task = reply.body["result"]
    assert task["status"]["state"] == "completed"
    cid = task["metadata"]["correlation_id"]
    stored = stack.bus.stored_answer(cid)
    assert stored is not None
    (artifact,) = task["artifacts"]
    assert artifact["parts"] == [{"kind": "text", "text": stored["final_answer"]["answer_text"]}]
    get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}}
    again = stack.server.post("/a2a", get, headers=auth).body["result"]
    assert again["status"]["state"] == "completed" and again["id"] == task["id"]
