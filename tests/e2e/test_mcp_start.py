"""`aeon` with AEON_MCP_CONFIG: the commands that run phases connect the MCP servers at start;
one that cannot start is one line and exit 2, never a traceback. A gateway of a deployment
(AEON_REDIS_URL set) does not connect: its workers do."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import Processes, child_env
from mcp_fixtures import config_file, stdio_entry
from test_clear_errors import assert_one_line

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

SECRET = "tok-must-not-be-printed"


def test_embedded_ask_connects_the_servers_and_answers(procs: Processes, tmp_path: Path) -> None:
    config = config_file(tmp_path, {"local": stdio_entry(MCP_TEST_SECRET=SECRET)})
    ask = procs.run_aeon(child_env(AEON_MCP_CONFIG=config), "ask", "Explain tides", timeout=60)
    assert ask.returncode in (0, 1), ask.output
    assert "Traceback" not in ask.output and SECRET not in ask.output


@pytest.mark.parametrize("command", [["ask", "Explain tides"], ["serve", "--port", "0"]])
def test_a_command_that_cannot_start_is_one_line_and_exit_2(
    procs: Processes, tmp_path: Path, command: list[str]
) -> None:
    gone = {"command": "/nonexistent/mcp-server", "env": {"TOKEN": SECRET}}
    config = config_file(tmp_path, {"local": stdio_entry(), "gone": gone})
    # ERROR: `aeon serve` warns, first, that it runs an embedded stack.
    quiet = child_env(AEON_MCP_CONFIG=config, AEON_LOG_LEVEL="ERROR")
    proc = procs.run_aeon(quiet, *command, timeout=60)
    assert_one_line(proc, 2, "MCP server 'gone': cannot run '/nonexistent/mcp-server': No such")
    assert SECRET not in proc.output


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            {"url": "http://alice:hunter2pw@127.0.0.1:9/mcp?key=q-s3cret"},
            "MCP server 'bad': cannot connect to http://127.0.0.1:9/mcp (All connection attempts "
            'failed): start the server, or correct its "url" in AEON_MCP_CONFIG',
        ),
        (
            {"command": "/bin/false"},
            "MCP server 'bad': command '/bin/false' did not answer as an MCP server (Connection "
            'closed): run it by hand to see why, or correct its "command" in AEON_MCP_CONFIG',
        ),
    ],
)
def test_a_start_failure_names_the_url_or_command_and_what_to_do(
    procs: Processes, env: dict[str, str], tmp_path: Path, entry: dict, said: str
) -> None:
    """Issue 35: these were `...: All connection attempts failed` and `...: Connection closed`."""
    config = config_file(tmp_path, {"bad": entry})
    worker = procs.run_aeon({**env, "AEON_MCP_CONFIG": config}, "worker", timeout=60)
    assert_one_line(worker, 2, said)
    assert "hunter2pw" not in worker.output and "q-s3cret" not in worker.output


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
    config = config_file(tmp_path, {"gone": {"command": "/nonexistent/mcp-server"}})
    ask = procs.run_aeon(
        {**env, "AEON_MCP_CONFIG": config}, "ask", "Explain tides", "--timeout", "1", timeout=60
    )
    assert ask.returncode == 3, ask.output  # no worker answered; nothing refused the config
    assert "MCP" not in ask.output
