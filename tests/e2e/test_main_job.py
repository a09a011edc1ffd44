"""The README's main job, as a person runs it on a fresh machine: no Redis configured, no key.

`aeon ask` then starts its own Redis and in-process workers, shows progress on stderr, prints
the FinalAnswer and cleans up.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_support import Processes, aeon_argv, child_env, run_on_a_terminal, wait_until

from aeonloop.gateway.progress import SET_ASIDE_WORDS
from aeonloop.llm.offline import OFFLINE_NOTICE

pytestmark = pytest.mark.e2e

MAIN_JOB = "Explain how photosynthesis works, then rewrite it for a 10-year-old"
README = Path(__file__).resolve().parents[2] / "README.md"
#: The request of the run the README shows ("What an answer looks like").
SHOWN = "Explain how photosynthesis works, then rewrite it for a 10-year-old"
#: The README's run whose answer is checked against the constraints its request states.
CHECKED = "Name three kinds of tea in three bullet points, and mention Darjeeling."


@pytest.fixture
def zero_config() -> dict[str, str]:
    """No AEON_* at all (child_env drops the runner's): what a fresh shell has."""
    env = child_env(fast=False)
    assert not any(key.startswith("AEON_") for key in env)
    return env


@pytest.mark.timeout(90)
def test_main_job_on_a_terminal_prints_the_answer_as_it_is_written(
    zero_config: dict[str, str],
) -> None:
    """Issue 34: on a terminal, the offline model's draft is printed as it writes it, set
    aside when the run goes on to its plan, then the answer as it is written, once. The
    offline model here writes at once, so the draft shows its first words only: the pieces
    that follow within a sink's gathering window (runs.answer_text.GATHER_S) would be written
    with the next, and a draft set aside needs no more."""
    shown, stderr = run_on_a_terminal([*aeon_argv(), "ask", MAIN_JOB], zero_config, 60)
    draft, set_aside, rest = shown.partition(f"\n{SET_ASIDE_WORDS}\n")
    first_words = draft.removeprefix("Answer: ").strip()
    assert set_aside and draft.startswith("Answer: ") and first_words, shown
    assert OFFLINE_NOTICE.startswith(first_words), shown
    assert rest.startswith(f"Answer: {OFFLINE_NOTICE}") and rest.count("Answer:") == 1, rest
    assert "E  loop ended" in stderr


@pytest.mark.timeout(60)
def test_main_job_answers_with_progress(procs: Processes, zero_config: dict[str, str]) -> None:
    ask = procs.run_aeon(zero_config, "ask", MAIN_JOB, timeout=45)

    assert ask.returncode == 0, ask.tail()
    assert "Answer:" in ask.stdout
    assert "photosynthesis" in ask.stdout
    progress = ask.stderr
    assert "submitted" in progress
    for line in ("A  profiled", "B  planned", "C  pass 1", "E  loop ended: converged"):
        assert line in progress, f"no progress line {line!r} on stderr:\n{progress}"
    assert "Traceback" not in progress
    # The pass that converges has its own line before the exit's.
    passes = re.findall(r"C  pass (\d+): score [\d.]+, (converged|not converged)", progress)
    assert passes and passes[-1][1] == "converged", progress
    assert [int(n) for n, _ in passes] == list(range(1, len(passes) + 1)), progress


@pytest.mark.timeout(60)
def test_main_job_as_json_has_final_answer_on_top(
    procs: Processes, zero_config: dict[str, str]
) -> None:
    ask = procs.run_aeon(zero_config, "ask", MAIN_JOB, "--json", timeout=45)

    assert ask.returncode == 0, ask.tail()
    data = json.loads(ask.stdout)
    assert isinstance(data, dict)
    assert data["final_answer"]["answer_text"]
    assert data["status"] == "converged"
    assert data["degraded"] is False
    assert len(data["correlation_id"]) == 32


def _shown_run() -> tuple[str, str]:
    """The progress (stderr) and the answer (stdout) pasted in the README."""
    section = README.read_text(encoding="utf-8").split("## What an answer looks like", 1)[-1]
    assert f'`aeon ask "{SHOWN}"`' in section, "the README no longer shows the run this checks"
    blocks = re.findall(r"```text\n(.*?)\n```", section.split("\n## ", 1)[0], re.S)
    assert len(blocks) == 2, "the README's run is no longer a progress block and an answer block"
    return blocks[0], blocks[1]


def _unvarying(output: str) -> str:
    """A run's output without what differs from one run to the next: its id and its time."""
    output = re.sub(r"\b[0-9a-f]{32}\b", "<correlation id>", output.strip())
    return re.sub(r"elapsed=[\d.]+ ?m?s\b", "elapsed=<time>", output)


@pytest.mark.timeout(60)
def test_the_run_in_the_readme_is_what_aeon_ask_prints(
    procs: Processes, zero_config: dict[str, str]
) -> None:
    # When the offline model, the phases or the prompts change what a run prints, paste the new
    # output of `aeon ask SHOWN` (run with no AEON_* set) into the README.
    progress, answer = _shown_run()
    ask = procs.run_aeon(zero_config, "ask", SHOWN, timeout=45)

    assert ask.returncode == 0, ask.tail()
    assert _unvarying(ask.stderr) == _unvarying(progress)
    assert _unvarying(ask.stdout) == _unvarying(answer)


@pytest.mark.timeout(60)
def test_the_checks_in_the_readme_are_what_aeon_ask_prints(
    procs: Processes, zero_config: dict[str, str]
) -> None:
    """The offline model prepares the request's own constraints as checks, and its answer is
    refined until they hold: the README's lines are what `aeon ask` prints, no LLM called."""
    section = README.read_text(encoding="utf-8").split("## Checked answers", 1)[-1]
    assert " ".join(CHECKED.split()) in " ".join(section.split()), "the README lost this run"
    (shown,) = re.findall(r"```text\n(.*?)\n```", section.split("\n## ", 1)[0], re.S)
    ask = procs.run_aeon(zero_config, "ask", CHECKED, timeout=45)

    assert ask.returncode == 0, ask.tail()
    assert shown in ask.stdout
    assert (
        "A  profiled: depth 3, pass budget 4 (default profile), 2 check(s) prepared" in ask.stderr
    )


def _embedded_server(ask) -> int:
    """The pid of the redis-server `aeon ask` started, once it is serving."""

    def child() -> int | None:
        found = subprocess.run(
            ["pgrep", "-P", str(ask.pid), "redis-server"], capture_output=True, text=True
        ).stdout.split()
        return int(found[0]) if found and "submitted" in ask.stderr else None

    return wait_until(child, 20, "aeon ask to start its Redis and submit")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") >= 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=str)
def test_the_embedded_redis_dies_with_aeon_ask_and_leaves_no_files(
    procs: Processes, zero_config: dict[str, str], sig: signal.Signals
) -> None:
    slow = {**zero_config, "AEON_LLM_DELAY_MS": "2000"}  # still running when the signal comes
    ask = procs.aeon(slow, "ask", MAIN_JOB)
    server = _embedded_server(ask)
    workdir = os.readlink(f"/proc/{server}/cwd")
    assert workdir.endswith("(deleted)"), "the server's directory outlives it"

    os.kill(ask.pid, sig)

    code = ask.wait(20)
    wait_until(lambda: _gone(server), 10, "the embedded redis-server to stop")
    if sig != signal.SIGKILL:
        assert code == 128 + sig, ask.tail()
        assert "Traceback" not in ask.stderr
    assert not Path(workdir.removesuffix(" (deleted)")).exists()
