"""What the loop sees of tools: their specs, and one call that returns a result.

Phases depend on the `Toolbox` protocol only, so the loop's logic is tested with an in-process
toolbox and no MCP server; `aeonloop.tools.mcp` is the toolbox of real MCP servers.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class ToolSpec(BaseModel):
    """One tool as a plan may name it: what the server says of it, and which server has it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    #: The JSON schema of the tool's arguments, as its server lists it.
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    #: The `mcpServers` entry that serves it.
    server: str = ""


class ToolResult(BaseModel):
    """What one call came to: its content as text, and whether the tool said it failed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    #: The tool's own `isError`: the call ran and failed; `text` says why.
    is_error: bool = False


class Toolbox(Protocol):
    """The tools a worker can call: listed once at start, each call bounded in time."""

    def specs(self) -> list[ToolSpec]:
        """Every tool of every configured server, in a stable order."""
        ...

    async def call(
        self, name: str, arguments: dict[str, Any], *, timeout: float, idempotency_key: str
    ) -> ToolResult:
        """Call `name` once. Raises `ToolCallFailed` if it cannot be called or does not answer
        within `timeout` seconds; a tool that answers with `isError` is a result, not a raise.
        `idempotency_key` travels in the request's metadata so a tool can dedupe a repeat."""
        ...


class NoTools:
    """The toolbox of a deployment with no AEON_MCP_CONFIG: it has no tool to call."""

    def specs(self) -> list[ToolSpec]:
        return []

    async def call(
        self, name: str, arguments: dict[str, Any], *, timeout: float, idempotency_key: str
    ) -> ToolResult:
        from aeonloop.exceptions import ToolCallFailed

        raise ToolCallFailed(f"no tool named {name!r} is configured")
