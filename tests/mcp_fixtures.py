"""Starting the test MCP server (tests/mcp_servers/tools.py, the official SDK's `MCPServer`)
from a test, over stdio or streamable HTTP, and reading the calls it received.

    config = stdio_server(MCP_TEST_CALLS=str(calls_file))      # started by the toolbox
    with http_server(MCP_TEST_PREFIX="web_") as url: ...       # started here, on loopback
    received = calls(calls_file)                               # one dict per call
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aeonloop.tools.config import HttpServer, StdioServer

SERVER = Path(__file__).parent / "mcp_servers" / "tools.py"
#: How long an HTTP server may take to say its URL.
START_S = 30


def stdio_server(**env: str) -> StdioServer:
    """The config entry of a stdio server with `env` (the toolbox starts it)."""
    return StdioServer(command=sys.executable, args=[str(SERVER)], env=env)


def stdio_entry(**env: str) -> dict[str, Any]:
    """The same, as an `mcpServers` entry of a config file."""
    return {"command": sys.executable, "args": [str(SERVER)], "env": env}


@contextlib.contextmanager
def http_server(**env: str) -> Iterator[str]:
    """A streamable HTTP server on a free loopback port, with `env`; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # printed once listening
        assert url.startswith("http://127.0.0.1:"), f"the test MCP server said {url!r}"
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=START_S)


def http_config(url: str, **headers: str) -> HttpServer:
    return HttpServer(url=url, headers=headers)


def calls(path: Path) -> list[dict[str, Any]]:
    """The calls a server recorded in MCP_TEST_CALLS: tool, arguments, `_meta`."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
