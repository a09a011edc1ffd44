"""AEON_MCP_CONFIG: the file's shape, checked at start as one line naming the file, the server
and the field, never a secret."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aeonloop.exceptions import SettingsError, ToolsNotReady
from aeonloop.limits import LoopSettings
from aeonloop.tools.config import HttpServer, StdioServer, ToolSettings, load_servers

SECRET = "ghp_not-a-real-token-but-secret"


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_stdio_and_http_entries_are_read(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "files"], "env": {"TOKEN": SECRET}},
                "web": {"type": "http", "url": "https://mcp.example.com/mcp"},
                "off": {"command": "x", "disabled": True},
            },
            "otherClientSetting": 1,
        },
    )
    servers = load_servers(path)
    assert servers == {
        "files": StdioServer(command="npx", args=["-y", "files"], env={"TOKEN": SECRET}),
        "web": HttpServer(url="https://mcp.example.com/mcp"),
    }


BAD = {
    "not JSON": ("{mcpServers", "is not JSON"),
    "a list": ("[]", 'must be a JSON object with "mcpServers"'),
    "no servers": ({"mcpServers": {}}, '"mcpServers" names no server'),
    "neither command nor url": (
        {"mcpServers": {"s": {"args": []}}},
        'server \'s\': needs either "command" (a stdio server) or "url"',
    ),
    "both": (
        {"mcpServers": {"s": {"command": "x", "url": "http://h/mcp"}}},
        "server 's': needs either",
    ),
    "sse": (
        {"mcpServers": {"s": {"type": "sse", "url": "http://h/sse"}}},
        "server 's': \"type\": 'sse' does not go with url",
    ),
    "not a url": ({"mcpServers": {"s": {"url": "h:80"}}}, '"url" must start with http://'),
    "env not text": (
        {"mcpServers": {"s": {"command": "x", "env": {"TOKEN": 12}}}},
        "server 's': \"env.TOKEN\" must be a valid string",
    ),
}


@pytest.mark.parametrize(("data", "message"), BAD.values(), ids=BAD.keys())
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, data: Any, message: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ToolsNotReady) as refused:
        load_servers(path)
    said = str(refused.value)
    assert said.startswith(f"AEON_MCP_CONFIG={str(path)!r}: "), said
    assert message in said and "\n" not in said


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ToolsNotReady, match=r"mcp\.json': cannot read it \(No such file"):
        load_servers(tmp_path / "mcp.json")


@pytest.mark.parametrize(
    "entry",
    [
        {"command": "x", "env": {"TOKEN": SECRET, "N": 1}},
        {"url": "ftp://h", "headers": {"Authorization": SECRET}},
        {"url": "http://h/mcp", "headers": {"Authorization": [SECRET]}},
        {"command": "", "env": {"TOKEN": SECRET}},
    ],
)
def test_secrets_are_never_in_the_message(tmp_path: Path, entry: dict[str, Any]) -> None:
    with pytest.raises(ToolsNotReady) as refused:
        load_servers(_write(tmp_path, {"mcpServers": {"s": entry}}))
    assert SECRET not in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_secrets_are_never_in_a_repr() -> None:
    stdio = StdioServer(command="x", env={"TOKEN": SECRET})
    http = HttpServer(url="http://h/mcp", headers={"Authorization": SECRET})
    assert SECRET not in repr(stdio) + str(stdio) + repr(http) + str(http)


def test_settings(read_env: Callable[[type, dict[str, str]], Any]) -> None:
    settings = read_env(ToolSettings, {"AEON_MCP_CONFIG": "/etc/aeon/mcp.json"})
    assert settings.mcp_config == Path("/etc/aeon/mcp.json")
    assert settings.mcp_start_timeout_s == 30
    assert read_env(ToolSettings, {}).mcp_config is None
    with pytest.raises(SettingsError, match="AEON_TOOL_TIMEOUT_S='0': must be more than 0"):
        read_env(LoopSettings, {"AEON_TOOL_TIMEOUT_S": "0"})
