"""The quality harness (`python -m bench --only quality`): its suite, and a run end to end.

The suite is checked for what the issue asks of it (40 cases or more, each a request with rules
in Aeon's rule format). The run goes against a fake OpenAI-compatible server that answers every
call "ok", so the figures mean nothing; what is held is that both ways ran for every case and
their calls and tokens were counted. The real model's figures come from the real-server tier
(tests/e2e/test_real_server.py), as CI runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from openai_fake import serve

from bench.quality import load_cases

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_has_forty_cases_of_rules_aeon_can_check() -> None:
    cases = load_cases()
    assert len(cases) >= 40
    assert len({case.id for case in cases}) == len(cases)
    for case in cases:
        assert case.request.strip() and case.rules
        assert all(rule.check.type == "content" and rule.description for rule in case.rules)


@pytest.mark.parametrize(
    ("case_id", "rule_id", "text", "holds"),
    [
        ("sky", "short", "word " * 150, True),
        ("sky", "short", "word " * 151, False),
        ("haiku", "lines", "one line\ntwo line\nthree line", True),
        ("haiku", "lines", "one\ntwo", False),
        ("primes", "no9", "2, 3, 5, 7, 11, 13, 17, 19", True),
        ("primes", "no9", "2, 3, 5, 7, 9", False),
        ("closing", "summary", "Text.\nSummary: it is dense.", True),
        ("closing", "summary", "Summary: it is dense.\nMore text.", False),
    ],
)
def test_word_line_and_absence_rules_are_written_as_patterns(
    case_id: str, rule_id: str, text: str, holds: bool
) -> None:
    """Counts and absences need no check type of their own: a content check's pattern says
    them (docs/benchmarks.md, "quality")."""
    [case] = [c for c in load_cases() if c.id == case_id]
    [rule] = [r for r in case.rules if r.id == rule_id]
    assert bool(re.search(rule.check.search or "", text, flags=re.MULTILINE)) is holds


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_quality_runs_both_ways_for_every_case(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    with serve() as fake:
        argv = [sys.executable, "-m", "bench", "--only", "quality", "--llm-url", fake.base_url]
        argv += ["--model", "fake-model", "--quality-cases", "2", "--redis-url", redis_url]
        done = subprocess.run(
            [*argv, "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=220,
        )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Quality: one plain call vs Aeon's loop, model fake-model" in done.stdout
    section = json.loads(out.read_text())["quality"]
    assert section["cases"] == 2 and [r["case"] for r in section["per_case"]] == ["tides", "sky"]
    for row in section["per_case"]:
        assert row["plain"]["calls"] == 1 and row["loop"]["calls"] >= 1
        assert row["plain"]["prompt_tokens"] > 0 and row["loop"]["prompt_tokens"] > 0
    assert section["loop"]["calls"] == sum(r["loop"]["calls"] for r in section["per_case"])


def test_quality_needs_a_server_and_a_model() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "quality"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "bench: the quality section needs --llm-url and --model"
