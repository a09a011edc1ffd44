"""`aeon` with AEON_MCP_CONFIG: the commands that run phases connect the MCP servers at start;
one that cannot start is one line and exit 2, never a traceback. A gateway of a deployment
(AEON_REDIS_URL set) does not connect: its workers do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Processes, child_env
from mcp_fixtures import stdio_entry
from test_clear_errors import assert_one_line

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

SECRET = "tok-must-not-be-printed"


def _config(tmp_path: Path, servers: dict[str, Any]) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return str(path)


def test_embedded_ask_connects_the_servers_and_answers(procs: Processes, tmp_path: Path) -> None:
    config = _config(tmp_path, {"local": stdio_entry(MCP_TEST_SECRET=SECRET)})
    ask = procs.run_aeon(child_env(AEON_MCP_CONFIG=config), "ask", "Explain tides", timeout=60)
    assert ask.returncode in (0, 1), ask.output
    assert "Traceback" not in ask.output and SECRET not in ask.output


@pytest.mark.parametrize("command", [["ask", "Explain tides"], ["serve", "--port", "0"]])
def test_a_command_that_cannot_start_is_one_line_and_exit_2(
    procs: Processes, tmp_path: Path, command: list[str]
) -> None:
    gone = {"command": "/nonexistent/mcp-server", "env": {"TOKEN": SECRET}}
    config = _config(tmp_path, {"local": stdio_entry(), "gone": gone})
    # ERROR: `aeon serve` warns, first, that it runs an embedded stack.
    quiet = child_env(AEON_MCP_CONFIG=config, AEON_LOG_LEVEL="ERROR")
    proc = procs.run_aeon(quiet, *command, timeout=60)
    assert_one_line(proc, 2, "MCP server 'gone': cannot run '/nonexistent/mcp-server': No such")
    assert SECRET not in proc.output


def test_a_worker_with_a_bad_file_is_one_line_and_exit_2(
    procs: Processes, env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text("{not json", encoding="utf-8")
    worker = procs.run_aeon({**env, "AEON_MCP_CONFIG": str(path)}, "worker", timeout=60)
    assert_one_line(worker, 2, f"AEON_MCP_CONFIG={str(path)!r}: is not JSON")


def test_ask_on_a_deployment_does_not_connect(
    procs: Processes, env: dict[str, str], tmp_path: Path
) -> None:
    config = _config(tmp_path, {"gone": {"command": "/nonexistent/mcp-server"}})
    ask = procs.run_aeon(
        {**env, "AEON_MCP_CONFIG": config}, "ask", "Explain tides", "--timeout", "1", timeout=60
    )
    assert ask.returncode == 3, ask.output  # no worker answered; nothing refused the config
    assert "MCP" not in ask.output
