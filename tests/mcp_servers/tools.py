"""A test MCP server, written with the official SDK's `MCPServer`, over stdio or streamable HTTP.

    python tests/mcp_servers/tools.py stdio
    python tests/mcp_servers/tools.py http      # prints its URL on the first line of stdout

Tools: `add(a, b)` (taking MCP_TEST_DELAY_S seconds, 0 unless set), `lookup(key)` (a fixed
text), `hang()` (never answers), `fail()` (answers
isError), `secret_ok()` (whether MCP_TEST_SECRET in its env, or the `X-Test-Secret` header of
the request, equals MCP_TEST_EXPECTED) and, with MCP_TEST_EXTRA_TOOLS=1, `image()`.
MCP_TEST_PREFIX goes before every tool's name.

Every call appends a JSON line to the file MCP_TEST_CALLS names, if set: the tool, its
arguments, the request's `_meta` (the idempotency key Aeon sends), the caller's pid (over
stdio, the worker that started the server) and the time, so a test can count calls, read what
reached the server, and see a call in flight.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import sys
import time
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

LOOKUP_TEXT = "the answer to {key} is 42"
#: Put before every tool's name (MCP_TEST_PREFIX), so two of these servers can run side by side.
PREFIX = os.environ.get("MCP_TEST_PREFIX", "")
#: Seconds `add` takes after recording its call (MCP_TEST_DELAY_S): a call a worker can be
#: killed in the middle of.
DELAY_S = float(os.environ.get("MCP_TEST_DELAY_S", "0"))
server = MCPServer("aeon-test-tools")


def _record(tool: str, arguments: dict[str, Any], ctx: Context) -> None:
    path = os.environ.get("MCP_TEST_CALLS")
    if not path:
        return
    meta = dict(ctx.request_context.meta or {})
    # The caller: over stdio, the process that started this server (a worker); and when.
    said = {"tool": PREFIX + tool, "arguments": arguments, "meta": meta}
    line = json.dumps({**said, "caller": os.getppid(), "at": time.time()}, default=str)
    with open(path, "a", encoding="utf-8") as calls:
        calls.write(line + "\n")


@server.tool(PREFIX + "add")
async def add(a: int, b: int, ctx: Context) -> str:
    """Add two whole numbers."""
    _record("add", {"a": a, "b": b}, ctx)
    await asyncio.sleep(DELAY_S)
    return str(a + b)


@server.tool(PREFIX + "lookup")
def lookup(key: str, ctx: Context) -> str:
    """Look a key up."""
    _record("lookup", {"key": key}, ctx)
    return LOOKUP_TEXT.format(key=key)


@server.tool(PREFIX + "hang")
async def hang(ctx: Context) -> str:
    """Never answers."""
    _record("hang", {}, ctx)
    await asyncio.Event().wait()
    return "unreachable"


@server.tool(PREFIX + "fail")
def fail(ctx: Context) -> CallToolResult:
    """Answers with isError."""
    _record("fail", {}, ctx)
    return CallToolResult(content=[TextContent(text="the tool failed on purpose")], is_error=True)


@server.tool(PREFIX + "secret_ok")
def secret_ok(ctx: Context) -> str:
    """Whether the secret this server was given (env or header) is the expected one."""
    _record("secret_ok", {}, ctx)
    expected = os.environ.get("MCP_TEST_EXPECTED", "")
    headers = ctx.headers or {}
    given = headers.get("x-test-secret") or os.environ.get("MCP_TEST_SECRET", "")
    return "yes" if expected and given == expected else "no"


if os.environ.get("MCP_TEST_EXTRA_TOOLS") == "1":

    @server.tool(PREFIX + "image")
    def image(ctx: Context) -> list[Any]:
        """A caption and a tiny image."""
        _record("image", {}, ctx)
        data = base64.b64encode(b"\x89PNG" + bytes(96)).decode()
        return [TextContent(text="a picture"), ImageContent(data=data, mime_type="image/png")]


async def _serve_http() -> None:
    """Streamable HTTP on a loopback port the kernel picks, announced on stdout."""
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    print(f"http://127.0.0.1:{port}/mcp", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[listening])


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        asyncio.run(_serve_http())
    else:
        server.run("stdio")
