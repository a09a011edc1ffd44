"""Aeon as an MCP server, driven by the official `mcp` client: `aeon mcp` over stdio (a
subprocess, as Claude Desktop starts it) and `/mcp` on a real `aeon serve` over streamable HTTP,
behind its bearer tokens.

Each case checks what a desktop or IDE client sees: the one tool, `ask`; its answer as text and
the run's status, rule verdicts and usage as structured content; a progress notification per
phase line; bad input as a tool error in one line; and a cancel of the call ending the run,
answered once, `cancelled`. The model is the offline one (slowed where a run must be caught
mid-way)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import Bus, Processes, aeon_argv, assert_answered_once, child_env, wait_until
from http_support import Server
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from aeonloop import __version__

pytestmark = pytest.mark.e2e

REQUEST = "Explain tides, then summarise them for a child"
TOKEN = "mcp-test-token-0123456789"
#: Each LLM call takes this long where a run must be cancelled mid-way.
SLOW_MS = "800"
#: The phase lines of a run, in the order `aeon ask` prints them (gateway.progress).
PHASE_ORDER = ("A  profiled", "B  planned", "C  pass 1", "D  pass 2", "C  pass 2", "E  loop ended")


@contextlib.asynccontextmanager
async def over_stdio(env: dict[str, str], errlog: Path) -> AsyncIterator[Client]:
    """`aeon mcp` started by the official client, as a desktop client starts it."""
    command, *args = aeon_argv()
    parameters = StdioServerParameters(command=command, args=[*args, "mcp"], env=env)
    with errlog.open("w") as stderr:
        async with Client(stdio_client(parameters, errlog=stderr)) as client:
            yield client


@contextlib.asynccontextmanager
async def over_http(
    server: Server, token: str | None, statuses: list[int] | None = None
) -> AsyncIterator[Client]:
    """A session with `aeon serve`'s `/mcp`, sending `token` as the bearer token; the status of
    every HTTP response goes to `statuses`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    seen = statuses if statuses is not None else []

    async def note(response: httpx2.Response) -> None:
        seen.append(response.status_code)

    async with httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(30, read=120), event_hooks={"response": [note]}
    ) as http:
        url = f"http://{server.host}:{server.port}/mcp"
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


async def ask_with_progress(client: Client, **arguments: Any) -> tuple[CallToolResult, list[str]]:
    lines: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        lines.append(message or "")

    result = await client.call_tool("ask", arguments, progress_callback=progress)
    return result, lines


def assert_answered(result: CallToolResult, lines: list[str]) -> dict[str, Any]:
    """An answer as a client reads it; its structured content."""
    assert not result.is_error, result.content
    assert "offline model" in result.content[0].text
    outcome = result.structured_content
    assert outcome is not None
    assert (outcome["status"], outcome["degraded"], outcome["failed_rules"]) == (
        "converged",
        False,
        [],
    )
    assert outcome["usage"]["calls"] > 0 and outcome["usage"]["prompt_tokens"] > 0
    assert len(outcome["correlation_id"]) == 32
    starts = [next(i for i, p in enumerate(PHASE_ORDER) if line.startswith(p)) for line in lines]
    assert starts == list(range(len(PHASE_ORDER))), lines  # one per line, in order
    return outcome


async def cancel_mid_run(client: Client, bus: Bus, known: tuple[str, ...] = ()) -> str:
    """Call `ask`, cancel the call once the run is past its plan, and return the run's id (the
    one run on the bus besides those `known`)."""
    seen = asyncio.Event()

    async def progress(done: float, total: float | None, message: str | None) -> None:
        if (message or "").startswith("B  planned"):
            seen.set()

    call = asyncio.ensure_future(
        client.call_tool("ask", {"request": REQUEST}, progress_callback=progress)
    )
    await asyncio.wait_for(seen.wait(), 60)
    call.cancel()  # the client tells the server: notifications/cancelled
    with contextlib.suppress(asyncio.CancelledError):
        await call
    cids = [json.loads(fields["body"])["correlation_id"] for _, fields in bus.entries("requests")]
    (cid,) = [c for c in cids if c not in known]
    return cid


def assert_cancelled_once(bus: Bus, cid: str) -> None:
    answer = wait_until(lambda: bus.stored_answer(cid), 30, f"the answer of {cid}")
    assert answer["status"] == "cancelled", answer["status"]
    assert_answered_once(bus, [cid])


# -- over stdio -------------------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_aeon_mcp_over_stdio_answers_with_progress_on_the_embedded_stack(
    tmp_path: Path,
) -> None:
    errlog = tmp_path / "stderr.txt"
    async with over_stdio(child_env(), errlog) as client:
        assert (client.server_info.name, client.server_info.version) == ("aeon", __version__)
        tools = (await client.list_tools()).tools
        assert [tool.name for tool in tools] == ["ask"]
        assert set(tools[0].input_schema["properties"]) == {"request", "rules", "files", "max_ttl"}
        assert tools[0].output_schema["properties"]["status"]

        result, lines = await ask_with_progress(client, request=REQUEST)
        assert_answered(result, lines)

        refused = await client.call_tool("ask", {"request": "   "})
        assert refused.is_error
        assert [block.text for block in refused.content] == [
            "the request is empty: say what you want answered"
        ]
        too_many = await client.call_tool("ask", {"request": REQUEST, "max_ttl": 1000})
        assert too_many.is_error and "AEON_MAX_PASSES" in too_many.content[0].text
        assert "\n" not in too_many.content[0].text
    assert "Traceback" not in errlog.read_text()


@pytest.mark.timeout(180)
async def test_aeon_mcp_gives_rules_and_files_to_the_run_and_reports_the_verdicts(
    tmp_path: Path,
) -> None:
    rule = {"id": "cites", "check": {"type": "content", "search": "NOWHERE-IN-ANY-ANSWER"}}
    async with over_stdio(child_env(), tmp_path / "stderr.txt") as client:
        result, _ = await ask_with_progress(
            client,
            request=REQUEST,
            rules=[rule],
            files=[{"path": "notes.md", "content": "Tides follow the moon."}],
            max_ttl=1,
        )
    assert not result.is_error, result.content
    outcome = result.structured_content
    assert outcome["total_passes"] == 1
    assert [finding["id"] for finding in outcome["failed_rules"]] == ["cites"]


@pytest.mark.timeout(120)
async def test_a_bad_rule_is_a_tool_error_in_one_line(tmp_path: Path) -> None:
    async with over_stdio(child_env(), tmp_path / "stderr.txt") as client:
        refused = await client.call_tool("ask", {"request": REQUEST, "rules": [{"id": "x"}]})
    assert refused.is_error
    (block,) = refused.content
    assert block.text.startswith("rules breaks the rule schema") and "\n" not in block.text


@pytest.mark.timeout(180)
async def test_cancelling_the_call_cancels_the_run_over_stdio(
    procs: Processes, env: dict[str, str], bus: Bus, tmp_path: Path
) -> None:
    slow = {**env, "AEON_LLM_DELAY_MS": SLOW_MS}
    procs.worker(slow)
    async with over_stdio(slow, tmp_path / "stderr.txt") as client:
        cid = await cancel_mid_run(client, bus)
        assert_cancelled_once(bus, cid)
        assert (await client.list_tools()).tools  # the session goes on


# -- over streamable HTTP, behind the API's tokens --------------------------------------------


@pytest.mark.timeout(240)
async def test_aeon_serve_answers_mcp_at_slash_mcp_with_a_token_and_refuses_without(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    guarded = {**env, "AEON_HTTP_TOKENS": TOKEN, "AEON_LLM_DELAY_MS": SLOW_MS}
    procs.worker(guarded)
    server = Server(procs, guarded)

    bare = server.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert (bare.status, bare.body["field"]) == (401, "Authorization")
    for token in (None, "not-the-token-at-all"):
        statuses: list[int] = []
        with pytest.raises(ExceptionGroup):  # the SDK says no status: `statuses` do
            async with over_http(server, token, statuses) as client:
                await client.list_tools()
        assert statuses and set(statuses) == {401}
    assert bus.entries("requests") == []

    async with over_http(server, TOKEN) as client:
        result, lines = await ask_with_progress(client, request=REQUEST)
        answered = assert_answered(result, lines)["correlation_id"]
        refused_input = await client.call_tool("ask", {"request": "\x00binary"})
        assert refused_input.is_error and "control character" in refused_input.content[0].text

    async with over_http(server, TOKEN) as client:
        cid = await cancel_mid_run(client, bus, known=(answered,))
    answer = wait_until(lambda: bus.stored_answer(cid), 30, f"the answer of {cid}")
    assert answer["status"] == "cancelled"
    assert_answered_once(bus, [answered, cid])
