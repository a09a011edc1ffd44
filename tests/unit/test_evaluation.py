"""Rule evaluation: content and executable checks (checks/running.py, checks/commands.py), verdicts
and seed 004's scoring (phases/evaluation.py)."""

from __future__ import annotations

import asyncio
import os
import shlex

import pytest

from aeonloop.checks.commands import SKIPPED_REASON, executable_check
from aeonloop.checks.running import UNPREPARED_REASON, content_check
from aeonloop.checks.threads import RunBudget
from aeonloop.checks.types import CountCheck, PatternCheck
from aeonloop.limits import LoopSettings
from aeonloop.phases.evaluation import evaluate_rules, evaluate_run, judged, score_results
from aeonloop.phases.events import RunState
from aeonloop.phases.models import Evaluation, Rule, RuleCheck, RuleResult

OUTPUT = "The total is 42 EUR.\nA second line mentions caching."


def content(rule_id: str, search: str, severity: str = "fail", weight: int = 1) -> Rule:
    check = RuleCheck(type="content", search=search)
    return Rule(id=rule_id, severity=severity, weight=weight, check=check, description=rule_id)


def executable(rule_id: str, code: str, severity: str = "fail") -> Rule:
    command = f"python3 -c {shlex.quote(code)}"
    check = RuleCheck(type="executable", command=command)
    return Rule(id=rule_id, severity=severity, check=check)


async def evaluate(rules: list[Rule], threshold: float = 0.8, **options: object):
    return await evaluate_rules(rules, OUTPUT, threshold, **options)


# ---- content checks -----------------------------------------------------------------------------


def test_content_check_is_a_regex_search() -> None:
    assert content_check(r"\b42 EUR\b", OUTPUT).held
    assert content_check(r"^A second", OUTPUT).held  # multiline: ^ matches each line
    assert not content_check(r"\bUSD\b", OUTPUT).held


async def test_content_rules_pass_and_fail() -> None:
    ev = await evaluate([content("total", r"\d+ EUR"), content("usd", "USD")])
    assert [r.verdict for r in ev.rule_results] == ["pass", "fail"]
    assert ev.score == 0.5 and not ev.passed
    assert [f.id for f in ev.failed] == ["usd"] and ev.warnings == []


# ---- scoring ------------------------------------------------------------------------------------


async def test_score_is_weighted_by_passed_over_active() -> None:
    rules = [content("a", "42", weight=2), content("b", "nope", severity="warn", weight=1)]
    ev = await evaluate(rules, threshold=0.6)
    assert ev.score == pytest.approx(2 / 3, abs=1e-4)
    assert ev.passed  # a warn failure lowers the score but does not block by itself
    assert [w.id for w in ev.warnings] == ["b"] and ev.failed == []


async def test_warn_failures_can_still_sink_the_threshold() -> None:
    rules = [content("a", "42", weight=1), content("b", "nope", severity="warn", weight=2)]
    ev = await evaluate(rules)
    assert ev.score == pytest.approx(1 / 3, abs=1e-4) and not ev.passed


async def test_a_fail_severity_failure_blocks_even_at_full_score() -> None:
    rules = [content("a", "42", weight=2), content("zero", "nope", weight=0)]
    ev = await evaluate(rules)
    assert ev.score == 1.0
    assert not ev.passed
    assert [f.id for f in ev.failed] == ["zero"]


async def test_score_equal_to_threshold_passes() -> None:
    rules = [content(f"p{n}", "42") for n in range(4)] + [content("w", "nope", severity="warn")]
    ev = await evaluate(rules, threshold=0.8)
    assert ev.score == 0.8 and ev.passed


async def test_info_rules_never_fail_and_never_count() -> None:
    rules = [content("a", "42"), content("note", "nope", severity="info", weight=2)]
    ev = await evaluate(rules)
    assert ev.score == 1.0 and ev.passed
    assert ev.failed == [] and ev.warnings == []
    info = ev.rule_results[1]
    assert info.verdict == "warn" and "never fails" in info.details


async def test_no_active_weight_scores_one() -> None:
    assert (await evaluate([])).score == 1.0
    ev = await evaluate([content("zero", "42", weight=0)])
    assert ev.score == 1.0 and ev.passed


def test_score_results_takes_verdicts_as_given() -> None:
    rules = [content("a", "x", weight=2), content("b", "x", weight=2)]
    results = [RuleResult(id="a", verdict="pass"), RuleResult(id="b", verdict="fail")]
    ev = score_results(rules, results, threshold=0.5)
    assert ev.score == 0.5 and not ev.passed  # b is fail-severity


# ---- executable checks --------------------------------------------------------------------------


async def test_executable_checks_are_skipped_unless_enabled() -> None:
    rules = [executable("exe", "raise SystemExit(1)"), content("a", "42")]
    ev = await evaluate(rules)
    skipped = ev.rule_results[0]
    assert skipped.verdict == "skipped" and skipped.details == SKIPPED_REASON
    assert ev.score == 1.0 and ev.passed  # a check that did not run says nothing either way


async def test_only_skipped_rules_leave_nothing_judged() -> None:
    rules = [executable("exe", "pass")]
    ev = await evaluate(rules)
    assert not judged(rules, ev)
    assert judged([content("a", "42")], await evaluate([content("a", "42")]))


async def test_enabled_executable_checks_read_the_output_from_stdin() -> None:
    reads = "import sys; sys.exit(0 if '42 EUR' in sys.stdin.read() else 1)"
    misses = "import sys; sys.exit(0 if 'USD' in sys.stdin.read() else 3)"
    rules = [executable("has-eur", reads), executable("has-usd", misses)]
    ev = await evaluate(rules, allow_executable=True)
    assert [r.verdict for r in ev.rule_results] == ["pass", "fail"]
    assert ev.rule_results[1].details.startswith("exit 3")


@pytest.mark.timeout(30)
async def test_a_cancelled_executable_check_kills_its_command(tmp_path) -> None:
    """A stopping worker cancels the checks in hand: their commands go with them, where they
    used to run on to their own timeout after the worker had gone."""
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    task = asyncio.ensure_future(executable_check(f"python3 -c {shlex.quote(code)}", "", 600))
    while not pid_file.exists() or not pid_file.read_text():
        await asyncio.sleep(0.02)
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    while _alive(pid):
        await asyncio.sleep(0.02)  # the test's timeout is the bound: killed, not slept out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_enabled_executable_checks_see_the_output_as_artifact_md() -> None:
    code = (
        "import pathlib, sys; "
        "sys.exit(0 if 'caching' in pathlib.Path('artifact.md').read_text() else 1)"
    )
    ev = await evaluate([executable("file", code)], allow_executable=True)
    assert ev.rule_results[0].verdict == "pass"


async def test_executable_check_times_out() -> None:
    rule = executable("slow", "import time; time.sleep(10)", severity="warn")
    ev = await evaluate([rule], allow_executable=True, timeout=0.3)
    assert ev.rule_results[0].verdict == "warn"
    assert "timed out" in ev.rule_results[0].details
    assert [w.id for w in ev.warnings] == ["slow"]


@pytest.mark.parametrize(
    ("command", "why"),
    [("'unbalanced", "cannot be parsed"), ("no-such-program-aeon --x", "cannot start")],
)
async def test_bad_commands_fail_with_the_reason(command: str, why: str) -> None:
    rule = Rule(id="bad", check=RuleCheck(type="executable", command=command))
    ev = await evaluate([rule], allow_executable=True)
    assert ev.rule_results[0].verdict == "fail" and why in ev.rule_results[0].details


async def test_no_shell_is_involved() -> None:
    # With a shell, `;` would start a second command; without one it is just an argument.
    code = "import sys; sys.exit(0 if sys.argv[1:] == [';', 'exit', '1'] else 1)"
    command = f"python3 -c {shlex.quote(code)} ';' exit 1"
    rule = Rule(id="argv", check=RuleCheck(type="executable", command=command))
    ev = await evaluate([rule], allow_executable=True)
    assert ev.rule_results[0].verdict == "pass"


def test_checks_that_ignore_their_input_pass_under_uvloop() -> None:
    """Commands that exit without reading stdin, three at once as `evaluate` runs them, on the
    loop `aeon` runs: feeding them through a pipe failed every time under uvloop."""
    uvloop = pytest.importorskip("uvloop")
    output = "the output\n" * 20_000  # more than a pipe holds: a writer would still be busy
    commands = ["true", "test -f artifact.md", "grep -q output artifact.md"]

    async def run_all() -> list[tuple[bool, str]]:
        runs = [executable_check(c, output, 10.0) for c in commands for _ in range(3)]
        return [(o.held, o.details) for o in await asyncio.gather(*runs)]

    for held, details in uvloop.run(run_all()):
        assert held, details


# ---- vocabulary checks, rules in words and prepared checks -------------------------------------


def in_words(rule_id: str, words: str, severity: str = "fail") -> Rule:
    return Rule(id=rule_id, severity=severity, check=words)


async def test_a_vocabulary_check_in_a_rule_is_run() -> None:
    rule = Rule(id="two-lines", check=CountCheck(unit="lines", min=2, max=2))
    ev = await evaluate([rule])
    assert ev.rule_results[0].verdict == "pass"
    assert ev.rule_results[0].details == "2 non-blank line(s), wanted exactly 2"


async def test_a_rule_in_words_with_no_prepared_check_is_skipped() -> None:
    rules = [in_words("short", "the answer is short"), content("a", "42")]
    ev = await evaluate(rules)
    skipped = ev.rule_results[0]
    assert skipped.verdict == "skipped" and skipped.details == UNPREPARED_REASON
    assert ev.score == 1.0 and ev.passed and not judged(rules[:1], ev_of(rules[:1], ev))


def ev_of(rules: list[Rule], ev: Evaluation) -> Evaluation:
    return ev.model_copy(update={"rule_results": ev.rule_results[: len(rules)]})


async def test_a_rule_in_words_holds_when_all_its_prepared_checks_hold() -> None:
    rule = in_words("euro", "mentions the total in euros, on two lines")
    prepared = {
        "euro": [PatternCheck(pattern=r"\d+ EUR"), CountCheck(unit="lines", min=2, max=2)],
    }
    ev = await evaluate([rule], prepared=prepared)
    assert ev.rule_results[0].verdict == "pass"
    assert "found /\\d+ EUR/" in ev.rule_results[0].details


async def test_a_rule_in_words_fails_naming_the_prepared_check_that_did_not_hold() -> None:
    rule = in_words("euro", "mentions euros, in three bullets")
    prepared = {"euro": [PatternCheck(pattern="EUR"), CountCheck(unit="bullets", min=3, max=3)]}
    ev = await evaluate([rule], prepared=prepared)
    result = ev.rule_results[0]
    assert result.verdict == "fail"
    assert result.details == "exactly 3 bullet line(s): 0 bullet line(s), wanted exactly 3"
    assert ev.failed[0].message.startswith("mentions euros, in three bullets: exactly 3 bullet")


async def test_prepared_checks_apply_to_rules_in_words_alone() -> None:
    """A rule with a check of its own is judged by it, whatever was prepared under its id."""
    prepared = {"a": [PatternCheck(pattern="nowhere")]}
    ev = await evaluate([content("a", "42")], prepared=prepared)
    assert ev.rule_results[0].verdict == "pass"


@pytest.mark.timeout(60)
async def test_a_catastrophic_pattern_fails_its_rule_and_leaves_the_loop_free() -> None:
    """The pattern runs in a thread, and `regex` releases the GIL while it matches: the event
    loop goes on ticking while it runs, and the rule fails saying why."""
    text = " ".join(c * 4 for c in "abcdefghijklmnopqrstuvwxyz") * 20 + "!#"
    rules = [content("slow", r"(\w+\s?)*#"), content("quick", "aaaa")]
    ticks = 0
    task = asyncio.ensure_future(evaluate_rules(rules, text, 0.8, pattern_timeout=0.5))
    while not task.done():
        await asyncio.sleep(0.01)
        ticks += 1
    ev = task.result()
    assert [r.verdict for r in ev.rule_results] == ["fail", "pass"]
    assert "ran out of its 0.5 s time bound" in ev.rule_results[0].details
    assert ticks >= 5, "the event loop was held while the pattern ran"


@pytest.mark.timeout(120)
async def test_eight_runs_of_slow_patterns_do_not_hold_up_another_runs_checks() -> None:
    """Issue 41, finding 2: eight evaluations of 100 backtracking patterns each, then one of a
    quick check. The quick one is judged before any slow one ends (the check threads serve the
    run that has spent least first; in the loop's default executor it waited for slow ones to
    free a thread), and each slow one stops at its run's budget, saying so."""
    slow_rules = [content(f"slow-{i}", "(a|aa)+#") for i in range(100)]
    text = "a" * 60 + " tides"
    finished: list[str] = []

    async def judge(name: str, rules: list[Rule], budget: RunBudget) -> Evaluation:
        evaluation = await evaluate_rules(rules, text, 0.8, pattern_timeout=0.05, budget=budget)
        finished.append(name)
        return evaluation

    slow = [
        asyncio.ensure_future(judge(f"slow-{i}", slow_rules, RunBudget(0.25))) for i in range(8)
    ]
    await asyncio.sleep(0.05)  # the slow runs' checks have the threads
    quick = await judge("quick", [content("quick", "tides")], RunBudget(0.25))
    assert quick.passed
    assert finished == ["quick"], "a slow run's checks ended before the quick one's"
    for evaluation in await asyncio.gather(*slow):
        details = [result.details for result in evaluation.rule_results]
        assert all(result.verdict == "fail" for result in evaluation.rule_results)
        assert "used up their 0.25 s of CPU time (AEON_RUN_CHECK_CPU_S)" in details[-1]


async def test_a_runs_evaluation_is_charged_to_its_state() -> None:
    """`evaluate_run` starts from what the run's checks spent before and leaves the new total in
    its state, which the run's next hop carries on."""
    run = RunState(request="Explain tides", rules=[content("tides", "tide")], check_cpu_s=1.0)
    settings = LoopSettings(run_check_cpu_s=5.0)
    evaluation = await evaluate_run(run, "tides", settings, {})
    assert evaluation.passed
    assert run.check_cpu_s > 1.0
    run.check_cpu_s = 5.0
    spent = await evaluate_run(run, "tides", settings, {})
    assert spent.rule_results[0].verdict == "fail"
    assert "used up their 5 s of CPU time" in spent.rule_results[0].details


async def test_a_failed_rule_the_request_implied_says_so() -> None:
    rule = Rule(
        id="three-bullets",
        check=CountCheck(unit="bullets", min=3, max=3),
        origin="request",
    )
    ev = await evaluate([rule])
    assert ev.failed[0].message == (
        "exactly 3 bullet line(s) (stated in the request): 0 bullet line(s), wanted exactly 3"
    )
