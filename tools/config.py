"""The MCP servers a worker connects to: AEON_MCP_CONFIG names a JSON file in the format MCP
clients share (docs/tools.md), read and checked here.

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "some-mcp-server"], "env": {"TOKEN": "..."}},
        "search": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "..."}}
    }}

An entry with `command` is started as a subprocess and spoken to over stdio; one with `url` is
reached over streamable HTTP. `env` values and `headers` are secrets: they are kept out of every
repr, log line and error message, which name the server, the file and the field, never a value.

What connects them is tools/toolbox.py (`open_toolbox`); this module only reads the file, so
the MCP client (tools/mcp.py) depends on it and not the other way round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aeonloop.exceptions import ToolsNotReady
from aeonloop.settings import AeonSettings

Seconds = Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)]


class ToolSettings(AeonSettings):
    #: The MCP client configuration file (`mcpServers`); unset: no tools.
    mcp_config: Path | None = None
    #: Seconds every server has, together, to start, answer the handshake and list its tools.
    mcp_start_timeout_s: Seconds = 30.0


class StdioServer(BaseModel):
    """A server started as `command args...`, spoken to over its stdin and stdout."""

    # Other clients' own keys (`autoApprove`, `timeout`, ...) are theirs: ignored here.
    model_config = ConfigDict(extra="ignore", frozen=True)

    command: Annotated[str, Field(min_length=1)]
    args: list[str] = Field(default_factory=list)
    #: Added to the few variables the SDK passes on (PATH, HOME, ...): secrets, never shown.
    env: Annotated[dict[str, str], Field(repr=False)] = Field(default_factory=dict)
    cwd: str | None = None


class HttpServer(BaseModel):
    """A server reached over streamable HTTP at `url`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    url: Annotated[str, Field(pattern=r"^https?://")]
    #: Sent with every request (an `Authorization`, an API key): secrets, never shown.
    headers: Annotated[dict[str, str], Field(repr=False)] = Field(default_factory=dict)


ServerConfig = StdioServer | HttpServer

#: `type` values other clients write for a transport; `sse` (the deprecated one) is refused.
_STDIO_TYPES = ("stdio",)
_HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")


class _Entry(BaseModel):
    """One `mcpServers` entry, before it is told apart as stdio or HTTP."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str | None = None
    disabled: bool = False

    @model_validator(mode="after")
    def _one_transport(self) -> _Entry:
        extra = self.model_extra or {}
        if ("command" in extra) == ("url" in extra):
            raise ValueError('needs either "command" (a stdio server) or "url" (streamable HTTP)')
        wanted = _STDIO_TYPES if "command" in extra else _HTTP_TYPES
        if self.type is not None and self.type not in wanted:
            raise ValueError(
                f'"type": {self.type!r} does not go with '
                f"{'command' if 'command' in extra else 'url'}; only stdio and streamable HTTP "
                "servers are supported"
            )
        return self

    def server(self) -> ServerConfig:
        extra = self.model_extra or {}
        return StdioServer(**extra) if "command" in extra else HttpServer(**extra)


class _File(BaseModel):
    model_config = ConfigDict(extra="ignore")

    mcpServers: dict[str, Any]  # the format's own name


def load_servers(path: Path) -> dict[str, ServerConfig]:
    """The enabled servers `path` configures, by name. ToolsNotReady (one line naming the file,
    the entry and the field, never a value) when it cannot be read or has the wrong shape."""
    where = f"AEON_MCP_CONFIG={str(path)!r}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ToolsNotReady(f"{where}: cannot read it ({error.strerror or error})") from None
    except ValueError as error:
        raise ToolsNotReady(f"{where}: is not JSON ({error})") from None
    try:
        servers = _File.model_validate(data).mcpServers
    except ValidationError:
        raise ToolsNotReady(
            f'{where}: must be a JSON object with "mcpServers": {{"name": {{...}}, ...}}'
        ) from None
    if not servers:
        raise ToolsNotReady(f'{where}: "mcpServers" names no server; add one or unset it')
    configured: dict[str, ServerConfig] = {}
    for name, entry in servers.items():
        try:
            parsed = _Entry.model_validate(entry)
            if not parsed.disabled:
                configured[name] = parsed.server()
        except ValidationError as error:
            raise ToolsNotReady(f"{where}: server {name!r}: {_problem(error)}") from None
    return configured


def _problem(error: ValidationError) -> str:
    """The first problem, by field and rule: pydantic's `input` (which may be a secret) is
    never part of it."""
    problem = error.errors(include_url=False, include_input=False)[0]
    message = problem["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
    field = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "string_pattern_mismatch":
        message = "must start with http:// or https://"
    return f'"{field}" {message}' if field else message
