"""The quality harness (`python -m bench --only quality`): its suite, its figures, and runs end to
end.

The suite is checked for what the issue asks of it (40 cases or more, each a request with rules
in Aeon's rule format). The figures (best of k at the loop's spend, flips, agreement of prepared
checks, totals over a partial run) are checked on case records written by hand. The runs go
against fake OpenAI-compatible servers: one answers every call "ok", so its figures mean
nothing and what is held is that every column ran for every case and was counted; another
answers plain calls and the loop's prompts with texts chosen so that each figure has one right
value. The real model's figures come from the real-server tier (tests/e2e/test_real_server.py),
as CI runs it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from openai_fake import Planned, Seen, completion, serve
from openai_styles import ANSWER, PLAN, PipelineModel, read
from openai_styles import CASES as STYLES

from aeonloop.prompts.registry import PromptId
from bench.quality import COLUMNS, load_cases
from bench.quality_report import from_results, render_quality
from bench.quality_report import markdown as layout
from bench.quality_scores import (
    K_MAX,
    agreement,
    best_of,
    case_row,
    flips,
    spend_matched_k,
    summarise,
)

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


def _bench(
    base_url: str, redis_url: str, out: Path, *extra: str, **settings: str
) -> dict[str, Any]:
    """`python -m bench --only quality` against the given server, with `settings` (AEON_*) in
    its environment; its section of the report."""
    argv = [sys.executable, "-m", "bench", "--only", "quality", "--llm-url", base_url]
    argv += ["--model", "fake-model", "--redis-url", redis_url, "--out", str(out), *extra]
    env = {**os.environ, **settings}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(out.read_text())
    report["stdout"] = done.stdout
    return report


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_quality_runs_every_column_for_every_case(redis_url: str, tmp_path: Path) -> None:
    with serve() as fake:
        report = _bench(fake.base_url, redis_url, tmp_path / "r.json", "--quality-cases", "2")
    assert "Quality, rules as checks: one plain call, best of k" in report["stdout"]
    assert "model fake-model (2 of 2 cases)" in report["stdout"]
    section = report["quality"]
    assert section["cases"] == 2 and [r["case"] for r in section["per_case"]] == ["tides", "sky"]
    assert section["columns"] == list(COLUMNS)
    assert "Quality, rules in words (PREPARE makes the checks)" in report["stdout"]
    for row in section["per_case"]:
        assert row["plain"]["calls"] == 1 and row["loop"]["calls"] >= 1
        assert row["plain"]["prompt_tokens"] > 0 and row["loop"]["prompt_tokens"] > 0
        assert 1 <= row["bestof"]["k"] == row["bestof"]["calls"] <= K_MAX
        assert row["words"]["calls"] >= 1 and "agreement" in row["words"]
    for way in ("loop", "words", "bestof", "words_bestof"):
        assert section[way]["calls"] == sum(r[way]["calls"] for r in section["per_case"])


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


# -- the figures, from case records written by hand ---------------------------------------------


def take(verdicts: dict[str, str], tokens: int = 100, **more: Any) -> dict[str, Any]:
    """A take as the harness records one: the verdicts and what it cost."""
    cost = {"calls": 1, "prompt_tokens": tokens - 10, "completion_tokens": 10, "seconds": 1.0}
    return {"text": "…", "verdicts": verdicts, **cost, **more}


P, F = "pass", "fail"


@pytest.mark.parametrize(
    ("budget", "k"),
    [(None, 8), (50, 1), (100, 1), (199, 1), (200, 2), (450, 4), (10_000, 8)],
)
def test_best_of_k_spends_about_what_the_loop_spent(budget: int | None, k: int) -> None:
    """The most plain calls whose tokens stay within the loop's, at least one, at most K_MAX;
    with no loop measured, all of them."""
    samples = [take({"a": F}) for _ in range(K_MAX)]
    assert spend_matched_k(samples, budget) == k


def test_best_of_k_picks_most_rules_held_and_ties_go_to_the_first() -> None:
    samples = [take({"a": F, "b": F}), take({"a": P, "b": F}), take({"a": F, "b": P})]
    samples += [take({"a": P, "b": P}), take({"a": P, "b": P})]
    assert best_of(samples, 1) == (0, samples[0])
    assert best_of(samples, 3) == (1, samples[1])  # 1 and 2 hold one each: the first
    assert best_of(samples, 5) == (3, samples[3])


def test_a_flip_is_a_rule_one_plain_call_held_and_the_loop_lost() -> None:
    plain = take({"a": P, "b": P, "c": F, "d": P})
    loop = take({"a": P, "b": F, "c": P, "d": "skipped"})
    assert flips(plain, loop) == ["b", "d"]


def test_prepared_checks_agree_with_the_hand_written_ones_rule_by_rule() -> None:
    """The answer's metadata gives each rule's verdict by the checks PREPARE made for it; a rule
    it made none for is skipped, and rules it made from the request count apart."""
    checks = [
        {"id": "a", "origin": "rules", "verdict": P},
        {"id": "b", "origin": "rules", "verdict": F},
        {"id": "c", "origin": "rules", "verdict": P},  # holds by its checks, fails by hand
        {"id": "d", "origin": "rules", "verdict": "skipped"},  # no check was prepared
        {"id": "request.bullets", "origin": "request", "verdict": P},
    ]
    words = take({"a": P, "b": F, "c": F, "d": P, "e": P}, checks=checks)
    assert agreement(words) == {
        "checked": 3,
        "agreed": 2,
        "disagreed": ["c"],
        "unchecked": ["d", "e"],
        "request_checks": 1,
    }


def record(case: str, plain: list[dict[str, Any]], **loops: Any) -> dict[str, Any]:
    rules = sorted(plain[0]["verdicts"])
    return {"case": case, "rules": rules, "plain": plain, "loop": None, "words": None, **loops}


def test_a_case_row_holds_each_column_at_its_own_spend() -> None:
    plain = [take({"a": P, "b": F}), take({"a": F, "b": F}), take({"a": P, "b": P})]
    plain += [take({"a": F, "b": F}) for _ in range(K_MAX - 3)]
    loop = take({"a": F, "b": P}, tokens=250, status="converged")
    words = take({"a": P, "b": P}, tokens=900, checks=[{"id": "a", "verdict": P}])
    row = case_row(record("c1", plain, loop=loop, words=words))

    assert row["plain"]["rules_held"] == 1 and not row["plain"]["all_held"]
    assert row["bestof"]["k"] == 2 and row["bestof"]["rules_held"] == 1  # 250 tokens: 2 calls
    assert row["bestof"]["picked"] == 1 and row["bestof"]["calls"] == 2
    assert row["bestof"]["prompt_tokens"] == 180
    assert row["loop"]["flips"] == 1 and row["loop"]["flipped"] == ["a"]
    assert row["words_bestof"]["k"] == K_MAX and row["words_bestof"]["all_held"]
    assert row["words_bestof"]["picked"] == 3 and "capped" in row["words_bestof"]
    assert row["words"]["flips"] == 0 and row["words"]["all_held"]
    assert row["words"]["agreement"]["agreed"] == 1 and row["words"]["agreement"]["unchecked"]


def test_a_partial_run_totals_like_with_like_and_prints_a_table(tmp_path: Path) -> None:
    """A loop run cut short: its totals, and plain's and best of k's beside them, cover the
    cases the loop finished; a run that broke counts nowhere and is named."""
    eight = [take({"a": P}) for _ in range(K_MAX)]
    records = [
        record("one", eight, loop=take({"a": F}, tokens=300, status="converged")),
        record("two", eight, loop={"error": "AnswerTimeout: no answer", "seconds": 900.0}),
        record("three", eight),
    ]
    section = summarise("m", records)
    assert section["cases"] == 3
    assert section["loop"]["cases"] == section["plain"]["cases"] == 1
    assert section["loop"]["rules"] == section["plain"]["rules"] == 1 and section["rules"] == 3
    assert section["loop"]["flips"] == section["loop"]["cases_with_flips"] == 1
    assert section["bestof"]["k"] == 3 and section["loop"]["errors"] == 1
    assert "words" not in section and "words_bestof" not in section

    path = tmp_path / "results.json"
    path.write_text(json.dumps({"model": "m", "records": records}))
    text = render_quality(from_results(path))
    assert "model m (1 of 3 cases)" in text
    assert "1 run(s) broke" in text
    [two] = [line for line in text.splitlines() if line.startswith("two ")]
    assert "error" in two
    done = subprocess.run(
        [sys.executable, "-m", "bench.quality_report", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == text.strip(), done.stderr
    markdown = render_quality(from_results(path), layout).splitlines()
    assert markdown[1].startswith("| case | rules | plain | best of k | loop | flips |")
    assert markdown[-2].startswith("| total | 1 | 1 (1 all) | 1 (1 all) | 0 (0 all) | 1 (1 cases")


def test_the_baseline_alone_is_best_of_k_max_over_every_case() -> None:
    records = [record(name, [take({"a": F}), take({"a": P})]) for name in ("one", "two")]
    section = summarise("m", records)
    assert section["plain"]["rules_held"] == 0 and section["bestof"]["rules_held"] == 2
    assert section["bestof"]["k"] == 4 and "loop" not in section
    assert "total" in render_quality(section)


# -- runs against stand-ins whose replies fix what each figure must be ------------------------

#: Plain calls of the tides case, in turn: the first holds "moon" only, the third all three.
PLAIN_REPLIES = [
    "The Moon pulls the sea.",
    "Water moves.",
    "The Moon's gravity gives most places two high tides a day.",
]
#: Every step of the loop holds all three tides rules; its answer and every refinement of it
#: hold none, and so does its draft (a plain call past the three above: "Tides.").
STEP = "The Moon's gravity pulls the sea, so most places get two high tides a day."
PUBLISHED = "The sea rises and falls as the Earth turns."


class TidesModel:
    """An OpenAI-compatible stand-in that tells plain calls (the request as it is) from the
    loop's prompts (Aeon's XML) and answers each as above; the loop's other prompts get the
    pipeline stand-in's replies (tests/openai_styles.py)."""

    def __init__(self, prepared: list[dict[str, Any]] | None = None) -> None:
        self.pipeline = PipelineModel(STYLES["plain"])
        #: What PREPARE answers: checks in the host's vocabulary, each under a rule id.
        self.prepared = prepared or []
        self.plain_calls = 0
        self._lock = threading.Lock()

    def __call__(self, seen: Seen) -> Planned:
        content = seen.body["messages"][0]["content"]
        if not content.lstrip().startswith("<"):
            with self._lock:
                turn = self.plain_calls
                self.plain_calls += 1
            return _reply(PLAIN_REPLIES[turn] if turn < len(PLAIN_REPLIES) else "Tides.")
        prompt_id, _ = read(seen)
        if prompt_id == PromptId.REASONING_STEP_USER:
            return _reply(STEP)
        if prompt_id == PromptId.ANSWER_SYNTHESIS_USER:
            return _reply(json.dumps({**ANSWER, "answer_text": PUBLISHED}))
        if prompt_id in (PromptId.ANSWER_DRAFT_USER, PromptId.ANSWER_REFINE_USER):
            return _reply(PUBLISHED)  # the run's draft and refinements hold none either
        if prompt_id == PromptId.CHECKS_PREPARE_USER:
            return _reply(json.dumps({"checks": self.prepared}))
        if prompt_id == PromptId.PLAN_GENERATION_USER:
            return _reply(json.dumps(PLAN))
        return self.pipeline(seen)


def _reply(text: str) -> Planned:
    return Planned(body=completion(text))


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_every_column_is_scored_on_the_answer_as_published(redis_url: str, tmp_path: Path) -> None:
    """The loop's steps hold every rule and its published answer none: the loop is scored 0,
    as its answer is (never its steps), and loses the rule the first plain call held (a flip).
    Best of k takes the third plain call, the one that holds all three. The baseline and the
    loop run apart, as the real model's are: the second run keeps the first's plain calls from
    the results file, and its plain calls are the loop's own drafts (sent as the request
    alone, llm.session.PLAIN), which hold none of the rules here."""
    model = TidesModel()
    results = tmp_path / "cases.json"
    keep = ["--quality-cases", "1", "--quality-results", str(results)]
    with serve() as fake:
        fake.responder = model
        baseline = _bench(
            fake.base_url,
            redis_url,
            tmp_path / "a.json",
            *keep,
            "--quality-columns",
            "plain,bestof",
        )
        assert model.plain_calls == K_MAX
        report = _bench(
            fake.base_url, redis_url, tmp_path / "b.json", *keep, "--quality-columns", "loop"
        )
    # The loop's drafts: the first ("Tides."), then a second that repeats it, which ends the
    # sampling (verification.best_draft); the baseline's calls were kept.
    assert model.plain_calls == K_MAX + 2
    [first] = baseline["quality"]["per_case"]
    assert first["bestof"]["k"] == K_MAX and "loop" not in first
    [row] = report["quality"]["per_case"]
    assert row["plain"]["rules_held"] == 1
    assert row["bestof"]["picked"] == 3 and row["bestof"]["all_held"], row["bestof"]
    assert row["loop"]["rules_held"] == 0 and row["loop"]["flipped"] == ["moon"]
    [kept] = json.loads(results.read_text())["records"]
    # Published degraded (no check held): the host's opening names the failed checks in their
    # own words ("Name the Moon as a cause."), and is not scored.
    assert kept["loop"]["text"].startswith("Degraded answer: ")
    assert kept["loop"]["text"].endswith("\n\n" + PUBLISHED)
    assert [s["text"] for s in kept["plain"][:3]] == PLAIN_REPLIES


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_rules_in_words_are_judged_by_prepared_checks_against_the_hand_written(
    redis_url: str, tmp_path: Path
) -> None:
    """The tides rules in words: PREPARE makes a check for moon that agrees with the
    hand-written one on the published answer (both fail), one for two that does not (it holds,
    the hand-written one fails), none for gravity, which the host reads itself ("Mention
    gravity.": its check fails, as the hand-written one does), and one from the request. One
    draft (AEON_DRAFT_SAMPLES=1): a second sample would be the plain reply that holds every
    rule, and the answer these checks are judged on would be that draft."""
    prepared = [
        {"rule_id": "moon", "check": {"type": "phrase_count", "phrase": "moon", "min": 1}},
        {"rule_id": "two", "check": {"type": "pattern", "pattern": "sea"}},
        {"rule_id": "request.short", "check": {"type": "count", "unit": "words", "max": 100}},
    ]
    model = TidesModel(prepared)
    with serve() as fake:
        fake.responder = model
        argv = ["--quality-cases", "1", "--quality-columns", "plain,words"]
        report = _bench(
            fake.base_url, redis_url, tmp_path / "r.json", *argv, AEON_DRAFT_SAMPLES="1"
        )
    section = report["quality"]
    [row] = section["per_case"]
    assert row["words"]["rules_held"] == 0 and row["words"]["flipped"] == ["moon"]
    assert row["words"]["agreement"] == {
        "checked": 3,
        "agreed": 2,
        "disagreed": ["two"],
        "unchecked": [],
        "request_checks": 1,
    }
    assert section["words"]["agreement"]["agreed"] == 2
    words_table = report["stdout"].split("Quality, rules in words")[1]
    [line] = [ln for ln in words_table.splitlines() if ln.startswith("tides ")]
    assert line.split()[-2:] == ["2/3", "0"]  # agreed of checked, and rules with no check
