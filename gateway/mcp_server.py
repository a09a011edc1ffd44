"""Aeon as an MCP server: one tool, `ask`, for desktop and IDE assistants (docs/mcp.md).

    aeon mcp                      over stdio, for a client that starts it (Claude Desktop, VS Code)
    aeon serve  ...  /mcp         over streamable HTTP, behind the API's bearer tokens

Built with the official SDK's `MCPServer`, over the Python client every gateway uses: a call
is an ordinary run, checked as `aeon ask` checks its input, published, followed and answered.

- The answer is the result's text; its structured content (`AskOutcome`) is the run's status,
  the rules it failed and the checks its answer holds (what the answer's metadata has), and
  its token usage.
- Each progress line `aeon ask` prints (gateway.progress) is sent as an MCP progress
  notification, when the client asked for them (a progress token).
- A client that cancels the call (`notifications/cancelled`) cancels the run
  (`AeonClient.cancel`): it stops at its next hop and is answered `cancelled`, once.
- Bad input is a tool error (`isError`) with the one line `aeon ask` would print; nothing is
  published. Over stdio, stdout is the protocol: the SDK points it away from everything else
  while it serves, and Aeon logs to stderr only.

The SDK is imported here alone, and this module only by the commands that serve MCP (`aeon
mcp`, `aeon serve`), when they run, so no other command starts slower.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aeonloop import __version__
from aeonloop.bus.settings import BusSettings
from aeonloop.contracts import AttachedFile, Usage
from aeonloop.exceptions import AnswerTimeout, BadInput
from aeonloop.gateway.client import ANSWER_GRACE_S, DEFAULT_TIMEOUT_S, AeonClient
from aeonloop.gateway.embedded import embedded_pipeline
from aeonloop.gateway.progress import Progress, lines_until
from aeonloop.gateway.validation import parse_rules
from aeonloop.llm.factory import ready_adapter
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import ExitReason
from aeonloop.phases.outcome import CheckVerdict
from aeonloop.tools.toolbox import open_toolbox

log = logging.getLogger("aeon.mcp")

#: What the server calls itself in the MCP handshake.
SERVER_NAME = "aeon"
#: Where `aeon serve` answers MCP over streamable HTTP.
MCP_PATH = "/mcp"
#: What the tool says it does: what a client's model reads when it picks a tool.
ASK_DESCRIPTION = (
    "Ask Aeon, a multi-pass reasoning pipeline: it profiles the request, plans steps, runs and "
    "checks them pass after pass until the answer converges, and answers. Give it questions "
    "that deserve deliberate work. Optional: rules the answer must meet, text files as "
    "context, and a cap on passes (max_ttl). Progress is reported per phase."
)


class AskOutcome(BaseModel):
    """The structured content of an answer: how the run ended, what was checked, what it cost."""

    model_config = ConfigDict(extra="forbid")

    correlation_id: str = Field(..., description="the run's id (`aeon answer ID`, the run page)")
    status: ExitReason = Field(..., description="how the loop ended (converged, cancelled, ...)")
    degraded: bool = Field(..., description="the answer was made short of a converged loop")
    total_passes: int
    failed_rules: list[dict[str, Any]] = Field(
        default_factory=list, description="the rules the answer did not meet, with the verdicts"
    )
    checks: list[CheckVerdict] | None = Field(
        None, description="each check of the answer with its verdict on the published text"
    )
    usage: Usage


def outcome_of(correlation_id: str, result: ExecutionResult) -> AskOutcome:
    """The structured content of `result`: what its answer's outcome says of rules and checks."""
    outcome = result.outcome
    return AskOutcome(
        correlation_id=correlation_id,
        status=result.status,
        degraded=result.degraded,
        total_passes=result.total_passes,
        failed_rules=[finding.model_dump() for finding in outcome.failed_rules],
        checks=outcome.checks or None,
        usage=result.usage,
    )


class _Server(MCPServer):
    """The SDK's server, saying arguments that break the tool's schema in one line."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """As the SDK calls a tool, but an argument of the wrong type is reported as `aeon ask`
        reports bad input, `max_ttl: Input should be a valid integer`, where the SDK would
        send pydantic's report of several lines."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, ValidationError):
                raise ToolError(_one_line(error.__cause__)) from None
            raise


def _one_line(error: ValidationError) -> str:
    """The first problem of `error`, named by its argument: what to fix, in one line."""
    problem = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in problem["loc"]) or "arguments"
    return f"{where}: {problem['msg']}"


def build_server(client: AeonClient, timeout_s: float = DEFAULT_TIMEOUT_S) -> MCPServer:
    """The MCP server whose `ask` tool runs requests through `client`, each given `timeout_s`
    seconds (its deadline in the pipeline)."""
    server = _Server(SERVER_NAME, instructions=ASK_DESCRIPTION, version=__version__)

    @server.tool("ask", description=ASK_DESCRIPTION)
    async def ask(
        request: Annotated[str, Field(description="the question or task, in natural language")],
        ctx: Context,
        rules: Annotated[
            list[dict[str, Any]] | None,
            Field(description="rules the answer must meet, as `aeon ask --rules` takes them"),
        ] = None,
        files: Annotated[
            list[AttachedFile] | None,
            Field(description="text files given as context: each {path, content}"),
        ] = None,
        max_ttl: Annotated[
            int | None,
            Field(description="the most passes the run may take, 1 to AEON_MAX_PASSES"),
        ] = None,
    ) -> Annotated[CallToolResult, AskOutcome]:
        return await _ask(client, ctx, request, rules, files, max_ttl, timeout_s)

    return server


async def _ask(
    client: AeonClient,
    ctx: Context,
    request: str,
    rules: list[dict[str, Any]] | None,
    files: list[AttachedFile] | None,
    max_ttl: int | None,
    timeout_s: float,
) -> CallToolResult:
    """One run: submitted, followed with a progress notification per line, answered; cancelled
    if the call is."""
    lines: asyncio.Queue[Progress] = asyncio.Queue()
    try:
        correlation_id = await client.submit(
            request,
            rules=parse_rules(rules, source="rules") if rules is not None else None,
            files=files,
            max_ttl=max_ttl,
            timeout=timeout_s,
            on_progress=lines.put_nowait,
        )
    except BadInput as error:  # the one line `aeon ask` would print, as the tool's error
        return CallToolResult(content=[TextContent(text=str(error))], is_error=True)
    log.info("run %s submitted over MCP", correlation_id)
    waiting = asyncio.ensure_future(client.wait(correlation_id, timeout_s + ANSWER_GRACE_S))
    try:
        await _report(ctx, lines, waiting)
        result = waiting.result()
    except AnswerTimeout as error:  # past its deadline and grace: say so, as `aeon ask` does
        return CallToolResult(content=[TextContent(text=str(error))], is_error=True)
    except BaseException:
        # The call was cancelled (or the transport went away): so is the run. Shielded, since
        # the scope this runs in is being cancelled and would stop the cancel too.
        waiting.cancel()
        with anyio.CancelScope(shield=True):
            outcome = await client.cancel(correlation_id)
        log.info("run %s: the MCP call ended early; cancel %s", correlation_id, outcome.value)
        raise
    outcome = outcome_of(correlation_id, result)
    return CallToolResult(
        content=[TextContent(text=result.final_answer.answer_text)],
        structured_content=outcome.model_dump(mode="json"),
    )


async def _report(
    ctx: Context, lines: asyncio.Queue[Progress], waiting: asyncio.Future[ExecutionResult]
) -> None:
    """Send each progress line as a notification until the answer is in (the lines before it
    first); the SDK sends nothing when the client gave no progress token."""
    sent = 0
    async for progress in lines_until(lines, waiting):
        sent += 1
        await ctx.report_progress(sent, message=progress.line)


# -- over streamable HTTP, inside `aeon serve` ----------------------------------------------------


def http_sessions(server: MCPServer, max_body_bytes: int) -> StreamableHTTPSessionManager:
    """The streamable HTTP sessions of `server`, as `aeon serve` mounts them at MCP_PATH.

    The API's guards stand before them (gateway.http.guards: the Host check, the rate limit,
    the bearer tokens), so the SDK's own DNS-rebinding check is off rather than a second,
    different list of hosts; bodies are held to AEON_HTTP_MAX_BODY_BYTES like the API's.
    Sessions are stateful (Mcp-Session-Id), as a cancel must reach the call it cancels: behind
    a balancer, send a session's requests to one `aeon serve` (docs/mcp.md)."""
    return StreamableHTTPSessionManager(
        # The low-level server the SDK's own streamable_http_app mounts; MCPServer keeps it.
        app=server._lowlevel_server,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=max_body_bytes,
    )


def http_endpoint(sessions: StreamableHTTPSessionManager) -> StreamableHTTPASGIApp:
    """The ASGI app answering MCP_PATH (once `sessions.run()` is entered)."""
    return StreamableHTTPASGIApp(sessions)


# -- over stdio: `aeon mcp` ----------------------------------------------------------------------


async def serve_stdio(args: argparse.Namespace) -> int:
    """`aeon mcp`: serve until the client closes stdin. With AEON_REDIS_URL, a gateway of that
    deployment; without, on the stack `aeon ask` embeds (a private Redis and workers in this
    process), whose runs go away with it."""
    async with _client(args) as client:
        await build_server(client, args.timeout).run_stdio_async()
    return 0


@contextlib.asynccontextmanager
async def _client(args: argparse.Namespace) -> AsyncIterator[AeonClient]:
    settings: BusSettings = args.settings
    options = {"loop": args.loop, "file_limits": args.file_limits}
    if settings.redis_url:
        async with AeonClient(settings=settings, **options) as client:
            yield client
        return
    llm = await ready_adapter(args.llm)
    try:
        async with (
            open_toolbox(args.tools) as tools,
            embedded_pipeline(settings, llm, args.loop, tools) as embedded,
            AeonClient(settings=embedded, **options) as client,
        ):
            yield client
    finally:
        await llm.aclose()
