"""The MCP toolbox against real MCP servers (the official SDK's, tests/mcp_servers/tools.py),
over stdio and streamable HTTP: no mock anywhere between the toolbox and the tool."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp_fixtures import calls, http_config, http_server, stdio_entry, stdio_server
from prometheus_client import REGISTRY

from aeonloop.exceptions import ToolCallFailed, ToolsNotReady
from aeonloop.telemetry import metrics, tracing
from aeonloop.tools.base import NoTools
from aeonloop.tools.config import HttpServer, StdioServer, ToolSettings
from aeonloop.tools.mcp import IDEMPOTENCY_META_KEY, McpToolbox, connect
from aeonloop.tools.toolbox import open_toolbox

pytestmark = pytest.mark.timeout(90)

START_S = 30.0
CALL_S = 20.0
SECRET = "s3cr3t-value-that-must-not-leak"
#: An argument a span must not carry.
SECRET_NUMBER = 987654321


@pytest.fixture
def calls_file(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


@pytest.fixture
async def both(calls_file: Path) -> AsyncIterator[McpToolbox]:
    """A toolbox of a stdio server (`add`, ...) and an HTTP one (`web_add`, ...)."""
    with http_server(MCP_TEST_PREFIX="web_", MCP_TEST_CALLS=str(calls_file)) as url:
        toolbox = await connect(
            {"local": stdio_server(MCP_TEST_CALLS=str(calls_file)), "web": http_config(url)},
            START_S,
        )
        try:
            yield toolbox
        finally:
            await toolbox.aclose()


async def test_both_transports_list_their_tools(both: McpToolbox) -> None:
    specs = {spec.name: spec for spec in both.specs()}
    names = {"add", "lookup", "hang", "fail", "secret_ok"}
    assert set(specs) == names | {f"web_{name}" for name in names}
    assert specs["add"].server == "local" and specs["web_add"].server == "web"
    assert set(specs["add"].input_schema["properties"]) == {"a", "b"}
    assert specs["lookup"].description == "Look a key up."


async def test_calls_answer_over_both_transports(both: McpToolbox) -> None:
    added = await both.call("add", {"a": 2, "b": 3}, timeout=CALL_S, idempotency_key="k-1")
    looked = await both.call("web_lookup", {"key": "tides"}, timeout=CALL_S, idempotency_key="k-2")
    assert (added.text, added.is_error) == ("5", False)
    assert (looked.text, looked.is_error) == ("the answer to tides is 42", False)


async def test_the_idempotency_key_reaches_the_server(both: McpToolbox, calls_file: Path) -> None:
    await both.call("add", {"a": 1, "b": 1}, timeout=CALL_S, idempotency_key="run-7:step-2")
    await both.call("web_add", {"a": 1, "b": 2}, timeout=CALL_S, idempotency_key="run-7:step-3")
    received = {call["tool"]: call for call in calls(calls_file)}
    assert received["add"]["meta"][IDEMPOTENCY_META_KEY] == "run-7:step-2"
    assert received["web_add"]["meta"][IDEMPOTENCY_META_KEY] == "run-7:step-3"
    assert received["add"]["arguments"] == {"a": 1, "b": 1}


async def test_a_tool_that_hangs_times_out_and_the_others_still_answer(both: McpToolbox) -> None:
    for name in ("hang", "web_hang"):
        with pytest.raises(ToolCallFailed) as failed:
            await both.call(name, {}, timeout=0.5, idempotency_key="k")
        assert "timed out after 0.5s" in str(failed.value) and failed.value.timed_out
        assert repr(name) in str(failed.value)
    added = await both.call("web_add", {"a": 4, "b": 4}, timeout=CALL_S, idempotency_key="k")
    assert added.text == "8"


async def test_a_tool_answering_is_error_is_a_result(both: McpToolbox) -> None:
    for name in ("fail", "web_fail"):
        result = await both.call(name, {}, timeout=CALL_S, idempotency_key="k")
        assert result.is_error
        assert result.text == "the tool failed on purpose"


async def test_calls_run_at_once(both: McpToolbox) -> None:
    hung = asyncio.create_task(both.call("hang", {}, timeout=CALL_S, idempotency_key="h"))
    sums = await asyncio.gather(
        *(
            both.call(name, {"a": n, "b": 100}, timeout=CALL_S, idempotency_key=f"k{n}")
            for n in range(8)
            for name in ("add", "web_add")
        )
    )
    assert [result.text for result in sums] == [str(n + 100) for n in range(8) for _ in "ab"]
    assert not hung.done(), "a hanging call held the others back, or ended"
    hung.cancel()
    await asyncio.gather(hung, return_exceptions=True)


async def test_an_unknown_tool_fails_the_call(both: McpToolbox) -> None:
    with pytest.raises(ToolCallFailed, match="no tool named 'nope'"):
        await both.call("nope", {}, timeout=CALL_S, idempotency_key="k")


async def test_other_content_is_described(tmp_path: Path) -> None:
    toolbox = await connect({"x": stdio_server(MCP_TEST_EXTRA_TOOLS="1")}, START_S)
    try:
        result = await toolbox.call("image", {}, timeout=CALL_S, idempotency_key="k")
    finally:
        await toolbox.aclose()
    assert result.text == "a picture\n[image/png, 100 bytes]"


async def test_calls_are_counted_by_tool_and_outcome(
    both: McpToolbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "_enabled", True)  # recording on for this test alone

    def count(tool: str, outcome: str) -> float:
        labels = {"tool": tool, "outcome": outcome}
        return REGISTRY.get_sample_value("aeon_tool_calls_total", labels) or 0.0

    def timed(tool: str) -> float:
        return REGISTRY.get_sample_value("aeon_tool_call_seconds_count", {"tool": tool}) or 0.0

    before = {key: count(*key) for key in [("add", "ok"), ("fail", "error"), ("hang", "timeout")]}
    timed_before = timed("add")
    await both.call("add", {"a": 1, "b": 2}, timeout=CALL_S, idempotency_key="k")
    await both.call("fail", {}, timeout=CALL_S, idempotency_key="k")
    with pytest.raises(ToolCallFailed):
        await both.call("hang", {}, timeout=0.3, idempotency_key="k")
    assert {key: count(*key) - value for key, value in before.items()} == {
        ("add", "ok"): 1,
        ("fail", "error"): 1,
        ("hang", "timeout"): 1,
    }
    assert timed("add") - timed_before == 1


# -- at start ---------------------------------------------------------------------------------


async def _not_ready(servers: dict, start_s: float = START_S) -> str:
    with pytest.raises(ToolsNotReady) as refused:
        await connect(servers, start_s)
    message = str(refused.value)
    assert "\n" not in message and "Traceback" not in message
    return message


async def test_a_command_that_does_not_exist_is_not_ready() -> None:
    message = await _not_ready(
        {"ok": stdio_server(), "gone": StdioServer(command="/nonexistent/mcp-server")}
    )
    assert message == (
        "MCP server 'gone': cannot run '/nonexistent/mcp-server': No such file or directory; "
        'correct its "command" in AEON_MCP_CONFIG'
    )


#: Said, since issue 35, of a command that starts and is no MCP server.
NOT_MCP = (
    "did not answer as an MCP server ({}): run it by hand to see why, "
    'or correct its "command" in AEON_MCP_CONFIG'
)


@pytest.mark.parametrize("args", [["-c", "0"], ["-c", "import sys; sys.exit(3)"]])
async def test_a_server_that_exits_at_once_is_not_ready(args: list[str]) -> None:
    message = await _not_ready({"quits": StdioServer(command=sys.executable, args=args)})
    assert message.startswith(f"MCP server 'quits': command {sys.executable!r} ")
    assert NOT_MCP.format("Connection closed") in message


async def test_bin_false_is_named_with_what_to_do() -> None:
    """Issue 35: `command: /bin/false` was `MCP server 'f': Connection closed`."""
    message = await _not_ready({"f": StdioServer(command="/bin/false", args=["--token=t0k"])})
    assert message == f"MCP server 'f': command '/bin/false' {NOT_MCP.format('Connection closed')}"
    assert "t0k" not in message  # its arguments are not shown: they may hold a secret


async def test_an_unreachable_url_is_named_bare_with_what_to_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 35: a `url` on a closed port was `MCP server 'away': All connection attempts
    failed`, and the SDK logged the URL, its password and query too, at DEBUG."""
    caplog.set_level(logging.DEBUG)
    url = "http://alice:hunter2pw@127.0.0.1:9/mcp?key=q-s3cret"
    message = await _not_ready({"away": HttpServer(url=url)})
    assert message.startswith("MCP server 'away': cannot connect to http://127.0.0.1:9/mcp (")
    assert message.endswith('): start the server, or correct its "url" in AEON_MCP_CONFIG')
    assert "http://127.0.0.1:9/mcp" in caplog.text, "the SDK logged no URL: this proves nothing"
    for secret in ("hunter2pw", "q-s3cret"):
        assert secret not in message + caplog.text


async def test_a_url_that_is_no_mcp_endpoint_is_named_bare_with_what_to_do() -> None:
    with http_server() as url:
        wrong = url.replace("/mcp", "/not-mcp") + "?key=q-s3cret"
        message = await _not_ready({"wrong": HttpServer(url=wrong)})
    bare = wrong.split("?")[0]
    assert message.startswith(f"MCP server 'wrong': {bare} did not answer as an MCP server (")
    assert message.endswith('check that it is one, and its "url" and "headers" in AEON_MCP_CONFIG')
    assert "q-s3cret" not in message


async def test_a_server_that_never_answers_is_not_ready_after_the_start_timeout() -> None:
    """Only the silent server is named: the other starts within the timeout, which is long
    enough for it to on a loaded machine (3 s was not, with the suite's workers beside it)."""
    silent = StdioServer(command=sys.executable, args=["-c", "import time; time.sleep(60)"])
    message = await _not_ready({"ok": stdio_server(), "silent": silent}, start_s=10)
    assert message.startswith("MCP server 'silent': did not start and list its tools within 10s")
    assert message.endswith(
        f"check that command {sys.executable!r} starts and answers when run by hand, "
        "or raise AEON_MCP_START_TIMEOUT_S"
    )


async def test_two_servers_offering_one_tool_name_are_refused() -> None:
    message = await _not_ready({"one": stdio_server(), "two": stdio_server()})
    assert message == (
        "MCP servers 'one' and 'two' both offer a tool named 'add'; "
        "remove one of them from AEON_MCP_CONFIG"
    )


# -- secrets ----------------------------------------------------------------------------------


async def test_env_and_header_secrets_reach_the_server_and_no_log(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the SDK's and httpx's included
    local = stdio_server(MCP_TEST_SECRET=SECRET, MCP_TEST_EXPECTED=SECRET)
    with http_server(MCP_TEST_PREFIX="web_", MCP_TEST_EXPECTED=SECRET) as url:
        web = http_config(url, **{"X-Test-Secret": SECRET})
        assert SECRET not in repr(local) + repr(web) + str(local) + str(web)
        toolbox = await connect({"local": local, "web": web}, START_S)
        try:
            mine = await toolbox.call("secret_ok", {}, timeout=CALL_S, idempotency_key="k")
            theirs = await toolbox.call("web_secret_ok", {}, timeout=CALL_S, idempotency_key="k")
            with pytest.raises(ToolCallFailed) as failed:
                await toolbox.call("web_hang", {}, timeout=0.3, idempotency_key="k")
        finally:
            await toolbox.aclose()
    assert (mine.text, theirs.text) == ("yes", "yes"), "the secret did not reach the server"
    out, err = capfd.readouterr()
    seen = caplog.text + out + err + str(failed.value)
    assert "secret_ok" in caplog.text, "the SDK logged nothing at DEBUG: the check proves nothing"
    assert SECRET not in seen


async def test_no_config_is_no_tools() -> None:
    async with open_toolbox(ToolSettings()) as tools:
        assert isinstance(tools, NoTools)
        assert tools.specs() == []


async def test_open_toolbox_connects_and_closes(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"local": stdio_entry()}}), encoding="utf-8")
    async with open_toolbox(ToolSettings(mcp_config=config)) as tools:
        result = await tools.call("add", {"a": 20, "b": 22}, timeout=CALL_S, idempotency_key="k")
    assert result.text == "42"
    with pytest.raises(ToolCallFailed, match=r"'add' .* failed"):
        await tools.call("add", {"a": 1, "b": 1}, timeout=CALL_S, idempotency_key="k")


async def test_each_call_is_a_span_naming_the_tool_and_outcome(
    both: McpToolbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))  # tracing.on()
    await both.call("add", {"a": 1, "b": SECRET_NUMBER}, timeout=CALL_S, idempotency_key="k")
    with pytest.raises(ToolCallFailed):
        await both.call("web_hang", {}, timeout=0.3, idempotency_key="k")
    spans = {span.name: span for span in exported.get_finished_spans()}
    added, hung = spans["execute_tool add"], spans["execute_tool web_hang"]
    assert added.attributes is not None and hung.attributes is not None
    assert added.attributes["gen_ai.tool.name"] == "add"
    assert added.attributes["aeon.tool.server"] == "local"
    assert added.attributes["aeon.tool.outcome"] == "ok"
    assert (hung.attributes["aeon.tool.outcome"], hung.attributes["error.type"]) == (
        "timeout",
        "timeout",
    )
    assert str(SECRET_NUMBER) not in str(dict(added.attributes))
