"""`python -m bench.prefix` reads a llama-cpp-python server's log into calls and runs: what each
call's prompt kept from the server's cache and what the server processed (issue 33).

The log is the server's own (llama-cpp-python 0.3.36, `--verbose true --cache true`, SmolLM2-135M
answering `aeon ask`), three calls with two refused requests' tracebacks between them; no timing
is asserted, only that the figures are read as the log states them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from openai_fake import Planned, Seen, completion, serve

from bench.prefix import Call, ask, read_calls, summed

ROOT = Path(__file__).resolve().parents[1]

#: Three completions: the first processes its whole prompt (no prefix-match line), the second
#: keeps 24 tokens (the chat template's start), the third 247, its prefix-match line apart from
#: its timings by two refused requests' tracebacks.
LOG = (ROOT / "tests" / "fixtures" / "llama-cpp-python-verbose.log").read_text()


def test_each_completion_is_a_call_with_what_it_kept_and_what_was_processed() -> None:
    assert read_calls(LOG.splitlines()) == [
        Call(reused=0, processed=34, prompt_ms=0.10),
        Call(reused=24, processed=648, prompt_ms=3691.74),
        Call(reused=247, processed=428, prompt_ms=41559.25),
    ]


def test_a_run_sums_its_calls_and_the_cache_share_is_the_kept_part_of_what_was_sent() -> None:
    run = summed("tides", read_calls(LOG.splitlines()))
    assert (run.calls, run.sent, run.reused, run.processed) == (3, 1381, 271, 1110)
    assert run.share == 271 / 1381
    assert summed("none", []).share == 0.0


def test_a_prefix_match_belongs_to_its_own_call_only() -> None:
    """The next call without a prefix-match line processed its whole prompt."""
    lines = LOG.splitlines()
    second = next(i for i, line in enumerate(lines) if "prefix-match" in line)
    assert [call.reused for call in read_calls(lines[second:] + lines[:second])] == [24, 247, 0]


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
    assert run["sent"] == 1381 and run["processed"] == 1110 and run["share"] == 0.1962


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


#: A stand-in `aeon`: its run's one answered call is in the log when it answers; the call it
#: left queued (one that timed out at Aeon, say) is not yet.
FAKE_AEON = """\
import json, sys
with open(sys.argv[1], "a") as log:
    log.write("Llama.generate: 24 prefix-match hit, remaining 10 prompt tokens to eval\\n")
    log.write("llama_perf_context_print: prompt eval time = 5.00 ms / 10 tokens (x)\\n")
answer = {"answer_text": "-", "metadata": {"reason": "invalid_llm_output"}}
print(json.dumps({"status": "failed", "usage": {"prompt_tokens": 34}, "final_answer": answer}))
"""


def test_ask_counts_the_calls_a_run_left_queued_and_not_the_drain_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server answers in order: the call the run left queued is written to the log before
    the drain call is answered, and counts to the run; the drain call does not."""
    log = tmp_path / "server.log"
    log.write_text(LOG)  # an earlier run's calls: not this one's
    script = tmp_path / "aeon.py"
    script.write_text(FAKE_AEON)

    def server_side(seen: Seen) -> Planned:
        with log.open("a") as written:
            written.write("Llama.generate: 34 prefix-match hit, remaining 600 prompt tokens\n")
            written.write("llama_perf_context_print: prompt eval time = 9.00 ms / 600 tokens\n")
            written.write("Llama.generate: 24 prefix-match hit, remaining 6 prompt tokens\n")
            written.write("llama_perf_context_print: prompt eval time = 1.00 ms / 6 tokens\n")
        assert seen.body["max_tokens"] == 1
        return Planned(body=completion("1"))

    with serve() as fake:
        fake.responder = server_side
        monkeypatch.setenv("AEON_LLM_BASE_URL", fake.base_url)
        monkeypatch.setenv("AEON_LLM_MODEL", "fake-model")
        run = ask(log, "tides", [sys.executable, str(script), str(log)])
    assert (run.calls, run.reused, run.processed) == (2, 58, 610)
    assert (run.usage_prompt_tokens, run.status) == (34, "failed (invalid_llm_output)")
