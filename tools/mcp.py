"""The toolbox of real MCP servers, with the official `mcp` SDK (docs/tools.md).

`connect` starts every configured server at once (a subprocess over stdio, or a streamable HTTP
session), negotiates the protocol, lists each one's tools (every page) and keeps the sessions
open until `aclose`: a worker connects once at start. A server that cannot start or answer
within the start timeout is `ToolsNotReady`, one line naming it: a worker does not take work
with tools missing. Two servers offering one tool name are refused the same way, rather than
renamed: plans name tools as their servers do.

Each session lives in a task of its own, from its start to `aclose`: the SDK's sessions are
anyio task groups, which must be left by the task that entered them. Calls may come from any
task, several at once; each is bounded by its `timeout`, after which the SDK tells the server
the request is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from aeonloop.exceptions import ToolCallFailed, ToolsNotReady
from aeonloop.settings import bare_url, bare_urls, redact
from aeonloop.tools import observed
from aeonloop.tools.base import ToolResult, ToolSpec
from aeonloop.tools.config import HttpServer, ServerConfig, StdioServer

log = logging.getLogger("aeon.tools")

#: The request `_meta` key that carries a call's idempotency key: a tool that has side effects
#: can dedupe a call repeated after a worker crashed mid-step (docs/tools.md).
IDEMPOTENCY_META_KEY = "aeonloop/idempotency-key"
#: tools/list pages read from one server at most: a server whose cursor never ends is refused.
MAX_LIST_PAGES = 100


class McpToolbox:
    """The tools of every connected server; `call` routes a call to the server that has it."""

    def __init__(self, sessions: Sequence[_Session]) -> None:
        self._sessions = list(sessions)
        self._by_tool: dict[str, _Session] = {}
        self._specs: list[ToolSpec] = []
        for session in self._sessions:
            for spec in session.specs:
                other = self._by_tool.get(spec.name)
                if other is not None:
                    raise ToolsNotReady(
                        f"MCP servers {other.name!r} and {session.name!r} both offer a tool "
                        f"named {spec.name!r}; remove one of them from AEON_MCP_CONFIG"
                    )
                self._by_tool[spec.name] = session
                self._specs.append(spec)
        self._specs.sort(key=lambda spec: (spec.server, spec.name))

    def specs(self) -> list[ToolSpec]:
        return list(self._specs)

    async def call(
        self, name: str, arguments: dict[str, Any], *, timeout: float, idempotency_key: str
    ) -> ToolResult:
        session = self._by_tool.get(name)
        if session is None:
            raise ToolCallFailed(f"no tool named {name!r} is configured")
        where = f"tool {name!r} (MCP server {session.name!r})"
        with observed.tool_call(name, session.name) as outcome:
            try:
                async with asyncio.timeout(timeout):
                    result = await session.client.call_tool(
                        name, arguments, meta={IDEMPOTENCY_META_KEY: idempotency_key}
                    )
            except TimeoutError:
                outcome("timeout")
                raise ToolCallFailed(
                    f"{where} timed out after {timeout:g}s", timed_out=True
                ) from None
            except Exception as error:  # whatever the SDK or transport raised: no result
                outcome("failed")
                raise ToolCallFailed(f"{where} failed: {_said(error)}") from None
            outcome("error" if result.is_error else "ok")
        return ToolResult(text=result_text(result), is_error=bool(result.is_error))

    async def aclose(self) -> None:
        """End every session (stdio servers are stopped: stdin closed, then signalled)."""
        await asyncio.gather(*(session.close() for session in self._sessions))


async def connect(servers: dict[str, ServerConfig], start_timeout: float) -> McpToolbox:
    """Every server of `servers` started, initialized and listed, all at once, within
    `start_timeout` seconds; ToolsNotReady naming the first that could not be."""
    sessions = [_Session(name, config) for name, config in servers.items()]
    try:
        async with asyncio.timeout(start_timeout):
            await asyncio.gather(*(session.open() for session in sessions))
        toolbox = McpToolbox(sessions)
    except BaseException as error:
        await asyncio.gather(*(session.close() for session in sessions))
        if isinstance(error, TimeoutError):
            late = [s for s in sessions if not s.ready] or sessions
            raise ToolsNotReady(
                f"MCP server {', '.join(repr(s.name) for s in late)}: did not start and list "
                f"its tools within {start_timeout:g}s (AEON_MCP_START_TIMEOUT_S): check that "
                f"{' and that '.join(s.answers for s in late)}, or raise AEON_MCP_START_TIMEOUT_S"
            ) from None
        raise
    for session in sessions:
        log.info("MCP server %r: %d tools", session.name, len(session.specs))
    return toolbox


class _Session:
    """One server's session, held open by a task of its own until `close`."""

    def __init__(self, name: str, config: ServerConfig) -> None:
        self.name = name
        self.config = config
        self.client: Any = None
        self.specs: list[ToolSpec] = []
        self.ready = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Start the session's task and wait until it has listed the tools (or failed)."""
        listed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(listed), name=f"mcp-{self.name}")
        await listed

    async def _hold(self, listed: asyncio.Future[None]) -> None:
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await _transport(self.config, stack)
                self.client = await stack.enter_async_context(Client(transport, cache=None))
                self.specs = await _list_tools(self.client, self.name)
                self.ready = True
                if not listed.done():  # else `connect` gave up waiting: close() comes next
                    listed.set_result(None)
                await self._stop.wait()
        except Exception as error:
            if not listed.done():
                listed.set_exception(ToolsNotReady(f"MCP server {self.name!r}: {self._why(error)}"))
            elif self.ready:
                log.warning("MCP server %r: its session ended: %s", self.name, _said(error))
        finally:
            if not listed.done():  # cancelled before it answered
                listed.cancel()

    @property
    def where(self) -> str:
        """The server as a line may name it: its command (not its arguments, nor its `env`),
        or its URL without user name, password or query (nor its `headers`)."""
        if isinstance(self.config, StdioServer):
            return f"command {self.config.command!r}"
        return bare_url(self.config.url)

    @property
    def answers(self) -> str:
        """What to check of a server that did not answer in time."""
        if isinstance(self.config, StdioServer):
            return f"{self.where} starts and answers when run by hand"
        return f"{self.where} answers"

    def _why(self, error: Exception) -> str:
        """Why the session did not start, naming the command or URL, and what to do
        (docs/tools.md, "At start")."""
        said = _said(error)
        if isinstance(self.config, StdioServer):
            fix = 'correct its "command" in AEON_MCP_CONFIG'
            if isinstance(error, OSError):
                return f"cannot run {self.config.command!r}: {error.strerror or error}; {fix}"
            return (
                f"{self.where} did not answer as an MCP server ({said}): run it by hand to "
                f"see why, or {fix}"
            )
        if _cannot_connect(error):
            return (
                f"cannot connect to {self.where} ({said}): start the server, or correct its "
                '"url" in AEON_MCP_CONFIG'
            )
        return (
            f"{self.where} did not answer as an MCP server ({said}): check that it is one, and "
            'its "url" and "headers" in AEON_MCP_CONFIG'
        )

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            if not self.ready:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def _transport(config: ServerConfig, stack: contextlib.AsyncExitStack) -> Any:
    """The SDK transport for `config`: a subprocess over stdio, or streamable HTTP with the
    configured headers."""
    if isinstance(config, StdioServer):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        parameters = StdioServerParameters(
            command=config.command, args=config.args, env=config.env or None, cwd=config.cwd
        )
        # The server's stderr is this process's: its own errors reach the operator's logs.
        return stdio_client(parameters, errlog=sys.stderr)
    assert isinstance(config, HttpServer)
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    _bare_sdk_urls()

    # The SDK's default timeouts (a read may wait for a long SSE stream); calls are bounded by
    # their own timeout. The client is ours to close, after the transport that uses it.
    timeout = httpx2.Timeout(30.0, read=300.0)
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers=config.headers, timeout=timeout)
    )
    return streamable_http_client(config.url, http_client=http)


async def _list_tools(client: Any, server: str) -> list[ToolSpec]:
    """Every tool the server lists, page by page."""
    specs: list[ToolSpec] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        specs.extend(
            ToolSpec(
                name=tool.name,
                description=tool.description or "",
                input_schema=tool.input_schema,
                server=server,
            )
            for tool in page.tools
        )
        cursor = page.next_cursor
        if cursor is None:
            return specs
    raise RuntimeError(f"it lists more than {MAX_LIST_PAGES} pages of tools")


def result_text(result: Any) -> str:
    """A CallToolResult as text: its text parts joined, other parts described in a few words
    (`[image/png, 1234 bytes]`), its structured content as JSON when no part is text."""
    parts = [_describe(block) for block in result.content]
    texts = [block for block in result.content if block.type == "text"]
    if not texts and result.structured_content is not None:
        parts.insert(0, orjson.dumps(result.structured_content).decode())
    return "\n".join(parts)


def _describe(block: Any) -> str:
    if block.type == "text":
        return block.text
    if block.type in ("image", "audio"):
        return f"[{block.mime_type}, {_decoded_size(block.data)} bytes]"
    if block.type == "resource_link":
        return f"[resource {block.uri}]"
    if block.type == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return text
        kind = resource.mime_type or "binary"
        return f"[resource {resource.uri}, {kind}, {_decoded_size(resource.blob)} bytes]"
    return f"[{block.type}]"


def _decoded_size(data: str) -> int:
    """The size of base64 `data` decoded, without decoding it."""
    return len(data) * 3 // 4 - data[-2:].count("=")


def _said(error: BaseException) -> str:
    """What an error says, on one line, with no URL's credentials or query."""
    if isinstance(error, BaseExceptionGroup):
        return _said(error.exceptions[0])
    return bare_urls(redact(" ".join(str(error).split()) or type(error).__name__))


def _cannot_connect(error: BaseException) -> bool:
    """Whether nothing answered at the server's address (the connection itself failed)."""
    import httpx2

    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return isinstance(error, httpx2.ConnectError)


class _BareUrls(logging.Filter):
    """The SDK's log lines with each URL bare (settings.bare_url): it logs the server's URL
    as configured, user name, password and query included, at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        bare = bare_urls(said)
        if bare != said:
            record.msg, record.args = bare, None
        return True


_BARE_URLS = _BareUrls()


def _bare_sdk_urls() -> None:
    """Put `_BareUrls` on every logger of the SDK (a filter on a logger is not its children's:
    each is given it; again is harmless, the same filter is added once)."""
    names = [name for name in logging.root.manager.loggerDict if name.split(".")[0] == "mcp"]
    for name in names:
        logging.getLogger(name).addFilter(_BARE_URLS)
