"""`python -m bench.prefix` reads a llama-cpp-python server's log into calls and runs: what each
call's prompt kept from the server's cache and what the server processed (issue 33).

The log lines are the server's own (llama-cpp-python 0.3 with `--verbose true`), from a run of
SmolLM2-135M; no timing is asserted, only that the figures are read as the log states them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.prefix import Call, read_calls, summed

ROOT = Path(__file__).resolve().parents[1]

#: Three completions: the first processes its whole prompt (no prefix-match line), the second
#: keeps 212 tokens of it, the third is the same prompt again (one token replayed).
LOG = (ROOT / "tests" / "fixtures" / "llama-cpp-python-verbose.log").read_text()


def test_each_completion_is_a_call_with_what_it_kept_and_what_was_processed() -> None:
    assert read_calls(LOG.splitlines()) == [
        Call(reused=0, processed=742, prompt_ms=1479.52),
        Call(reused=212, processed=530, prompt_ms=998.10),
        Call(reused=741, processed=1, prompt_ms=12.50),
    ]


def test_a_run_sums_its_calls_and_the_cache_share_is_the_kept_part_of_what_was_sent() -> None:
    run = summed("tides", read_calls(LOG.splitlines()))
    assert (run.calls, run.sent, run.reused, run.processed) == (3, 2226, 953, 1273)
    assert run.share == 953 / 2226
    assert summed("none", []).share == 0.0


def test_a_prefix_match_belongs_to_its_own_call_only() -> None:
    """The next call without a prefix-match line processed its whole prompt."""
    lines = LOG.splitlines()[7:12] + LOG.splitlines()[1:6]
    assert [call.reused for call in read_calls(lines)] == [212, 0]


def test_the_command_prints_the_log_as_one_run(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)
    done = subprocess.run(
        [sys.executable, "-m", "bench.prefix", str(log), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(done.stdout)
    assert run["sent"] == 2226 and run["processed"] == 1273 and run["share"] == 0.4281


def test_a_missing_log_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.prefix", str(tmp_path / "none.log")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no log at" in done.stderr
