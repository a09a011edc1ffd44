"""The quality harness: `aeon eval` (aeonloop.gateway.quality), and `python -m bench --only
quality`, its caller on the 40 shipped cases.

The shipped cases are checked for what the issue asks of them (40 or more, each a request with
rules in Aeon's rule format). Reading a cases file: a malformed line is named with its number
and skipped; a file that is missing or holds no case is one line and exit 2. The figures (best
of the first k for each k, flips, agreement of prepared checks, totals over the cases every path
finished) are checked on records written by hand. The runs: `aeon eval` on the offline model,
and against a stand-in OpenAI server whose replies fix what each figure must be, where the
calls and tokens the report counts are held to what the server was sent. The real model's
figures come from the real-server tier (tests/e2e/test_real_server.py).
"""

from __future__ import annotations

import io
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

from aeonloop.exceptions import BadInput
from aeonloop.gateway.quality.cases import (
    agreement,
    best_of,
    case_row,
    flips,
    ladder,
    load_cases,
    summarise,
)
from aeonloop.gateway.quality.paths import (
    DEFAULT_EFFORT,
    Step,
    _effort_options,
    efforts_to_run,
    path_name,
)
from aeonloop.gateway.quality.report import ProgressBar, render
from aeonloop.prompts.registry import PromptId

ROOT = Path(__file__).resolve().parents[1]
TIDES = load_cases().cases[0]


def test_the_shipped_suite_has_forty_cases_of_rules_aeon_can_check() -> None:
    loaded = load_cases()
    cases = loaded.cases
    assert len(cases) >= 40 and not loaded.skipped
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
    [case] = [c for c in load_cases().cases if c.id == case_id]
    [rule] = [r for r in case.rules if r.id == rule_id]
    assert bool(re.search(rule.check.search or "", text, flags=re.MULTILINE)) is holds


# -- reading a cases file -------------------------------------------------------------------

GOOD = '{"id": "fr", "request": "What is the capital of France?", "expect": ["Paris"]}'
WORDS = (
    '{"id": "fruits", "request": "Name three fruits.", "rules": [{"id": "bullets", '
    '"description": "Three bullet points.", "check": "Use three bullet points."}]}'
)


def test_a_malformed_line_is_named_with_its_number_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    lines = [GOOD, "not json", '{"request": ""}', "", WORDS, '{"request": "x", "rule": []}', GOOD]
    path.write_text("\n".join(lines) + "\n")
    loaded = load_cases(path)
    assert [case.id for case in loaded.cases] == ["fr", "fruits"]
    assert loaded.skipped == [
        f"{path}:2: skipped: not JSON: Expecting value: line 1 column 1 (char 0)",
        f"{path}:3: skipped: request: String should have at least 1 character",
        f"{path}:6: skipped: rule: Extra inputs are not permitted",
        f"{path}:7: skipped: the id 'fr' is taken already",
    ]


def test_a_missing_file_or_one_with_no_case_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such file; give a JSONL file of cases"):
        load_cases(tmp_path / "nowhere.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("[]\n\n")
    loaded = load_cases(empty)
    assert loaded.skipped == [f"{empty}:1: skipped: a case is a JSON object, not list"]
    with pytest.raises(BadInput, match=r"empty.jsonl: no valid case \(each line is one case"):
        loaded.checked()


def _eval(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`aeon eval` in a fresh process, with `env` (AEON_*) added to the environment."""
    inherited = {name: value for name, value in os.environ.items() if not name.startswith("AEON_")}
    return subprocess.run(
        [sys.executable, str(Path(sys.executable).with_name("aeon")), "eval", *argv],
        cwd=ROOT,
        env={**inherited, **env},
        capture_output=True,
        text=True,
        timeout=200,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("content", [None, "nothing here\n"])
def test_aeon_eval_without_a_case_is_one_line_and_exit_2(
    tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "cases.jsonl"
    if content is not None:
        path.write_text(content)
    done = _eval(str(path))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    if content is None:
        assert lines == [f"aeon: {path}: no such file; give a JSONL file of cases"]
    else:
        assert lines[0].startswith(f"aeon: {path}:1: skipped: not JSON")
        assert lines[1].startswith(f"aeon: {path}: no valid case")
        assert len(lines) == 2 and "Traceback" not in done.stderr


@pytest.mark.e2e
def test_aeon_eval_with_nowhere_to_write_runs_nothing(tmp_path: Path) -> None:
    done = _eval("--json", str(tmp_path / "no" / "report.json"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"aeon: --json: {tmp_path / 'no'} is not a directory; nothing was run\n"


# -- the figures, from records written by hand ----------------------------------------------


def take(verdicts: dict[str, str], tokens: int = 100, **more: Any) -> dict[str, Any]:
    """A take as the harness records one: the verdicts and what it cost."""
    cost = {"calls": 1, "prompt_tokens": tokens - 10, "completion_tokens": 10, "seconds": 1.0}
    return {"text": "…", "verdicts": verdicts, **cost, **more}


P, F = "pass", "fail"


def record(case: str, samples: list[dict[str, Any]], **aeon: Any) -> dict[str, Any]:
    scored = sorted(samples[0]["verdicts"])
    rules = [rule for rule in scored if not rule.startswith("expect.")]
    return {"case": case, "rules": rules, "scored": scored, "samples": samples, "aeon": aeon}


@pytest.mark.parametrize(
    ("k_max", "ks"), [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])]
)
def test_best_of_k_is_shown_for_powers_of_two_up_to_k_max(k_max: int, ks: list[int]) -> None:
    assert ladder(k_max) == ks


def test_best_of_k_picks_by_the_rules_never_by_the_expected_phrases() -> None:
    """Ties go to the first; an expected phrase, told to no path, picks nothing."""
    samples = [take({"a": F, "expect.1": P}), take({"a": P, "expect.1": F})]
    samples += [take({"a": P, "expect.1": P})]
    assert best_of(samples, 1, ["a"]) == (0, samples[0])
    assert best_of(samples, 3, ["a"]) == (1, samples[1])


def test_a_flip_is_a_rule_one_plain_call_held_and_the_other_path_lost() -> None:
    plain = take({"a": P, "b": P, "c": F, "d": P})
    other = take({"a": P, "b": F, "c": P, "d": "skipped"})
    assert flips(plain, other) == ["b", "d"]


def test_prepared_checks_agree_with_the_cases_own_rule_by_rule() -> None:
    checks = [
        {"id": "a", "origin": "rules", "verdict": P},
        {"id": "b", "origin": "rules", "verdict": F},
        {"id": "c", "origin": "rules", "verdict": P},  # holds by its checks, fails by the case's
        {"id": "d", "origin": "rules", "verdict": "skipped"},  # no check was prepared
        {"id": "request.bullets", "origin": "request", "verdict": P},
    ]
    words = take({"a": P, "b": F, "c": F, "d": P, "e": P, "expect.1": P}, checks=checks)
    assert agreement(words) == {
        "checked": 3,
        "agreed": 2,
        "disagreed": ["c"],
        "unchecked": ["d", "e"],
        "request_checks": 1,
    }


def test_a_case_row_holds_each_k_and_each_aeon_path() -> None:
    samples = [take({"a": P, "b": F}), take({"a": F, "b": F}), take({"a": P, "b": P})]
    samples += [take({"a": F, "b": F})]
    aeon = take({"a": F, "b": P}, tokens=250, status="converged")
    row = case_row(record("c1", samples, checks={"aeon": aeon}), "checks", [1, 2, 4])
    assert row["plain"]["rules_held"] == 1 and not row["plain"]["all_held"]
    assert row["best of 2"] == {**row["best of 2"], "rules_held": 1, "picked": 1, "calls": 2}
    assert row["best of 4"]["picked"] == 3 and row["best of 4"]["all_held"]
    assert row["best of 4"]["prompt_tokens"] == 360 and row["best of 4"]["k"] == 4
    assert row["aeon"]["flips"] == 1 and row["aeon"]["flipped"] == ["a"]
    assert row["aeon"]["status"] == "converged"


def test_best_of_k_flips_where_its_pick_loses_a_rule_the_first_call_held() -> None:
    """It picks by rules held, so a pick that holds more may still lose one plain held."""
    samples = [take({"a": P, "b": F, "c": F}), take({"a": F, "b": P, "c": P})]
    row = case_row(record("c1", samples), "checks", [1, 2])
    assert row["best of 2"]["picked"] == 2 and row["best of 2"]["flipped"] == ["a"]
    assert not row["plain"]["all_held"] and "flips" not in row["plain"]


def test_a_case_with_nothing_judged_is_not_whole() -> None:
    row = case_row(record("c1", [take({"a": "skipped"})]), "checks", [1])
    assert row["plain"]["rules_held"] == 0 and not row["plain"]["all_held"]


def test_totals_leave_out_a_case_a_path_broke_on_and_name_it() -> None:
    two = [take({"a": P}), take({"a": F})]
    records = [
        record("one", two, checks={"aeon": take({"a": F}, tokens=300)}),
        record("two", two, checks={"aeon": {"error": "AnswerTimeout: no answer", "seconds": 9}}),
    ]
    report = summarise("m", records, ["checks"], ["aeon"])
    checks = report["modes"]["checks"]
    assert checks["broken"] == ["two"] and report["ks"] == [1, 2]
    assert checks["totals"]["aeon"] == {
        **checks["totals"]["aeon"],
        "cases": 1,
        "rules_held": 0,
        "flips": 1,
        "cases_with_flips": 1,
        "calls": 1,
        "tokens": 300,
        "errors": 1,
    }
    assert checks["totals"]["plain"]["cases"] == checks["totals"]["best of 2"]["cases"] == 1
    text = render(report)
    assert "model m, 1 of 2 cases" in text
    assert "left out, a path broke on them: two" in text


@pytest.mark.parametrize(
    ("asked", "efforts"),
    [([], (DEFAULT_EFFORT,)), (["medium"], ("medium",)), (["low", "high", "low"], ("low", "high"))],
)
def test_each_effort_asked_runs_once_and_none_asked_runs_the_default(
    asked: list[str], efforts: tuple[str, ...]
) -> None:
    """Each effort asked is a path of its own (`aeon low`), passed on with the request
    (`_effort_options`); none asked runs at the workers' AEON_EFFORT, shown as `aeon`."""
    assert efforts_to_run(asked) == efforts
    assert path_name(DEFAULT_EFFORT) == "aeon" and path_name("low") == "aeon low"
    assert _effort_options("low") == {"effort": "low"} and _effort_options(DEFAULT_EFFORT) == {}


# -- `aeon eval` end to end ---------------------------------------------------------------


def _rows(table: str) -> dict[str, list[str]]:
    """A printed table's rows by path: the cells, split on two spaces or more."""
    rows = {}
    for line in table.splitlines()[2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == "plain" or cells[0].startswith(("best of", "aeon")):
            rows[cells[0]] = cells
    return rows


def _calls(report: dict[str, Any]) -> int:
    """Every call the report's takes made: each plain sample and each Aeon run."""
    records = report["records"]
    samples = sum(s["calls"] for r in records for s in r["samples"])
    runs = [t for r in records for paths in r["aeon"].values() for t in paths.values()]
    return samples + sum(t["calls"] for t in runs if "same_run_as" not in t)


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_aeon_eval_on_the_offline_model(tmp_path: Path) -> None:
    """Two cases and a malformed line: the line is named and skipped, every path runs for both
    cases, the table's totals are the JSON's, and a plain line reports each case done."""
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join([GOOD, "{oops", WORDS]) + "\n")
    out, picture = tmp_path / "report.json", tmp_path / "frontier.png"
    done = _eval(str(cases), "--k", "2", "--json", str(out), "--plot", str(picture))
    assert done.returncode == 0, done.stderr
    assert f"aeon: {cases}:2: skipped: not JSON" in done.stderr
    assert "aeon eval: 1/2 cases (fr done)" in done.stderr
    assert "aeon eval: 2/2 cases (fruits done), took" in done.stderr
    report = json.loads(out.read_text())
    assert report["model"] == "offline" and report["cases"] == 2 and report["ks"] == [1, 2]
    assert [r["case"] for r in report["records"]] == ["fr", "fruits"]
    for record in report["records"]:
        assert [s["calls"] for s in record["samples"]] == [1, 1]
        assert record["aeon"]["checks"]["aeon"]["calls"] >= 1
        # fruits' rule is in words already, fr has none: in words, each is the same run.
        words = record["aeon"]["words"]["aeon"]
        assert words == {**record["aeon"]["checks"]["aeon"], "same_run_as": "checks"}
    assert report["records"][0]["scored"] == ["expect.1"]
    for mode, title in (("checks", "rules as checks"), ("words", "rules in words")):
        totals = report["modes"][mode]["totals"]
        table = done.stdout.split(f"Quality, {title}")[1].split("\n\n")[0]
        rows = _rows(table)
        assert set(rows) == set(totals) == {"plain", "best of 2", "aeon"}
        for path, total in totals.items():
            assert rows[path][1] == f"{total['rules_held']} of 2"
            assert rows[path][4:6] == [f"{total['calls']:,}", f"{total['tokens']:,}"]
        assert totals["best of 2"]["calls"] == 4 and totals["plain"]["calls"] == 2
        aeon_calls = sum(r["aeon"][mode]["aeon"]["calls"] for r in report["records"])
        assert totals["aeon"]["calls"] == aeon_calls
    assert picture.read_bytes().startswith(b"\x89PNG")


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_without_the_bench_extra_the_picture_is_one_line_and_the_table_is_printed(
    tmp_path: Path,
) -> None:
    """matplotlib missing (a module of that name that will not import stands in for it)."""
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    cases = tmp_path / "cases.jsonl"
    cases.write_text(GOOD + "\n")
    picture = tmp_path / "frontier.png"
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    argv = [str(cases), "--k", "1", "--modes", "checks", "--plot", str(picture)]
    done = _eval(*argv, PYTHONPATH=path)
    assert done.returncode == 0, done.stderr
    assert (
        'aeon: --plot: the picture needs matplotlib: pip install "aeonloop[bench]"; the table '
        "is printed"
    ) in done.stderr.splitlines()
    assert "Quality, rules as checks: model offline, 1 of 1 cases" in done.stdout
    assert not picture.exists()


@pytest.mark.e2e
@pytest.mark.timeout(200)
def test_resume_keeps_the_cases_a_report_holds_and_runs_the_rest(tmp_path: Path) -> None:
    """A run cut short after its first case, then run again with --resume: the first case's
    record is kept as it was (nothing of it runs again), the second is run; a case asked
    another way (other modes) is not the same record and runs again."""
    cases, out = tmp_path / "cases.jsonl", tmp_path / "report.json"
    cases.write_text(GOOD + "\n")
    first = _eval(str(cases), "--k", "2", "--modes", "checks", "--json", str(out))
    assert first.returncode == 0, first.stderr
    [before] = json.loads(out.read_text())["records"]
    cases.write_text(GOOD + "\n" + WORDS + "\n")
    again = _eval(str(cases), "--k", "2", "--modes", "checks", "--json", str(out), "--resume")
    assert again.returncode == 0, again.stderr
    kept, ran = json.loads(out.read_text())["records"]
    assert kept == before and ran["case"] == "fruits"
    assert "aeon eval: 1/2 cases (fr done), time left not known yet" in again.stderr
    other = _eval(str(cases), "--k", "2", "--json", str(out), "--resume")
    assert other.returncode == 0, other.stderr
    [asked_anew, _] = json.loads(out.read_text())["records"]
    assert asked_anew["fingerprint"] != before["fingerprint"] and "words" in asked_anew["aeon"]

    out.write_text("not a report")
    refused = _eval(str(cases), "--json", str(out), "--resume")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"aeon: {out} is not a report of `aeon eval --json`")


#: The stand-in server's plain replies, in turn: the Aeon run's one draft, then the samples:
#: the first holds "moon" only, the second none, the third all three tides rules.
PLAIN_REPLIES = [
    "Tides.",
    "The Moon pulls the sea.",
    "Water moves.",
    "The Moon's gravity gives most places two high tides a day.",
]
#: Every step of the run holds all three tides rules; its answer and each refinement none.
STEP = "The Moon's gravity pulls the sea, so most places get two high tides a day."
PUBLISHED = "The sea rises and falls as the Earth turns."


class TidesModel:
    """An OpenAI-compatible stand-in that tells plain calls (the request as it is) from Aeon's
    prompts (its XML) and answers each as above; Aeon's other prompts get the pipeline
    stand-in's replies (tests/openai_styles.py)."""

    def __init__(self) -> None:
        self.pipeline = PipelineModel(STYLES["plain"])
        self.plain: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, seen: Seen) -> Planned:
        content = seen.body["messages"][0]["content"]
        if not content.lstrip().startswith("<"):
            with self._lock:
                text = PLAIN_REPLIES[min(len(self.plain), len(PLAIN_REPLIES) - 1)]
                self.plain.append(text)
            return Planned(body=completion(text))
        prompt_id, _ = read(seen)
        if prompt_id == PromptId.REASONING_STEP_USER:
            return Planned(body=completion(STEP))
        if prompt_id == PromptId.ANSWER_SYNTHESIS_USER:
            return Planned(body=completion(json.dumps({**ANSWER, "answer_text": PUBLISHED})))
        if prompt_id == PromptId.ANSWER_REWRITE_USER:
            return Planned(body=completion(PUBLISHED))
        if prompt_id == PromptId.PLAN_GENERATION_USER:
            return Planned(body=completion(json.dumps(PLAN)))
        return self.pipeline(seen)


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_aeon_eval_against_a_server_counts_what_the_server_was_sent(tmp_path: Path) -> None:
    """The tides case against a stand-in server: the report's calls and tokens are the
    server's (every call answered with 11 prompt and 7 completion tokens), the samples are the
    server's plain replies in order, best of k picks by the case's checks, and Aeon is scored on
    its answer as published, never a step's output: its steps hold every rule, and its draft,
    its answer and its rewrites none, so it publishes its draft (a tie: the one pass did not
    converge, and a rewrite wins no tie), holds none and loses the rule the first plain call
    held (a flip)."""
    cases = tmp_path / "cases.jsonl"
    cases.write_text(TIDES.model_dump_json(exclude_defaults=True) + "\n")
    out = tmp_path / "report.json"
    model = TidesModel()
    with serve() as fake:
        fake.responder = model
        done = _eval(
            str(cases),
            "--modes",
            "checks",
            "--k",
            "3",
            "--json",
            str(out),
            AEON_LLM="openai",
            AEON_LLM_BASE_URL=fake.base_url,
            AEON_LLM_MODEL="fake-model",
            AEON_DRAFT_SAMPLES="1",
            AEON_MAX_PASSES="1",
        )
        sent = [seen for seen in fake.seen if seen.path == "/v1/chat/completions"]
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    [record] = report["records"]
    assert _calls(report) == len(sent)
    for take in [*record["samples"], record["aeon"]["checks"]["aeon"]]:
        assert take["prompt_tokens"] == 11 * take["calls"]
        assert take["completion_tokens"] == 7 * take["calls"]
    assert model.plain == PLAIN_REPLIES  # the run's one draft, then the three samples
    assert [s["text"] for s in record["samples"]] == PLAIN_REPLIES[1:]

    totals = report["modes"]["checks"]["totals"]
    assert report["ks"] == [1, 2, 3]
    assert totals["plain"]["rules_held"] == 1
    assert totals["best of 2"]["rules_held"] == 1 and totals["best of 2"]["calls"] == 2
    assert totals["best of 3"]["rules_held"] == 3 and totals["best of 3"]["cases_whole"] == 1
    [row] = report["modes"]["checks"]["per_case"]
    assert row["best of 3"]["picked"] == 3
    aeon = record["aeon"]["checks"]["aeon"]
    assert aeon["text"] == PLAIN_REPLIES[0] and STEP not in aeon["text"]
    assert totals["aeon"]["rules_held"] == 0 and row["aeon"]["flipped"] == ["moon"]
    assert totals["aeon"]["calls"] == len(sent) - 3
    rows = _rows(done.stdout)
    assert rows["aeon"][3] == "1 (1 case)" and rows["aeon"][4] == str(totals["aeon"]["calls"])
    assert rows["aeon"][5] == f"{18 * totals['aeon']['calls']:,}"


# -- `python -m bench --only quality`, its caller -----------------------------------------


def test_bench_quality_needs_a_server_and_a_model() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "quality"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "bench: the quality section needs --llm-url and --model"


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_bench_quality_is_aeon_eval_on_the_shipped_cases(redis_url: str, tmp_path: Path) -> None:
    """The section is `aeon eval`'s report on the first shipped cases, printed as its tables,
    with its results file written as it goes."""
    out, results = tmp_path / "r.json", tmp_path / "results.json"
    with serve() as fake:
        fake.responder = PipelineModel(STYLES["plain"])
        argv = [sys.executable, "-m", "bench", "--only", "quality", "--llm-url", fake.base_url]
        argv += ["--model", "fake-model", "--redis-url", redis_url, "--out", str(out)]
        argv += ["--quality-cases", "2", "--quality-k", "2", "--quality-results", str(results)]
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env={**os.environ, "AEON_MAX_PASSES": "1"},
            capture_output=True,
            text=True,
            timeout=220,
        )
        sent = [seen for seen in fake.seen if seen.path == "/v1/chat/completions"]
    assert done.returncode == 0, done.stderr + done.stdout
    section = json.loads(out.read_text())["quality"]
    assert section["model"] == "fake-model" and section["cases"] == 2
    assert [r["case"] for r in section["records"]] == ["tides", "sky"]
    assert set(section["modes"]) == {"checks", "words"}
    assert _calls(section) == len(sent)
    assert json.loads(results.read_text())["records"] == section["records"]
    assert "Quality, rules as checks: model fake-model, 2 of 2 cases" in done.stdout
    assert "Quality, rules in words (PREPARE makes the checks)" in done.stdout


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_shows_the_cases_done_and_the_time_left(terminal: bool) -> None:
    """On a terminal a bar redrawn in place, with what runs now; elsewhere a line a case."""
    stream = _Terminal() if terminal else io.StringIO()
    bar = ProgressBar(stream, 4)
    bar(Step(1, 4, "tides", "aeon, rules as checks"))
    bar(Step(1, 4, "tides", "done", done=True))
    bar(Step(2, 4, "sky", "plain call 3"))
    text = stream.getvalue()
    if terminal:
        first, second, third = text.split("\r")[1:]
        assert first.startswith("[....................] 0/4 cases, time left not known yet, tides")
        assert second.startswith("[#####...............] 1/4 cases, about ")
        assert "left, sky: plain call 3" in third and "\n" not in text
    else:
        assert re.fullmatch(r"aeon eval: 1/4 cases \(tides done\), about \d+ s left\n", text)
