"""Rule evaluation (docs/requirements.md, EVALUATE): the host runs the checks, never the LLM.

Each rule's check gives a verdict, scored as in docs/verified-answers.md, "Rules and scoring":

- score = Σ weight of passed rules / Σ weight of active rules, 1.0 when that sum is 0;
- passed = score ≥ threshold and no fail-severity rule failed.

Which rules are *active* (counted in the score): fail- and warn-severity rules whose check was
actually run. A check that was not run (an executable one that is disabled, a rule in words with
no prepared check) says nothing about the output, so counting it either way would be a guess; an
info rule is reported and never scored, since "info never fails" would otherwise only inflate the
score.

Verdicts: "pass"; "fail" for a failed fail-severity rule (listed in `failed`); "warn" for a failed
warn-severity rule (listed in `warnings`, lowering the score but not blocking `passed` by
itself); "warn" for an info rule whose check did not hold (listed nowhere); "skipped" with the
reason for a check that was not run.

How each form of check is run:

- a content check, and every check of the host's vocabulary (aeonloop.checks), by
  `checks.running.run_check` on the output, on the host, deterministically, in a check thread
  (checks.threads: shared fairly by the runs, never waited on by a stopping worker): patterns
  run under a time bound (AEON_CHECK_PATTERN_TIMEOUT_S), and all of a run's checks under a
  budget of CPU time (AEON_RUN_CHECK_CPU_S, `evaluate_run`), so a pattern that backtracks
  without end fails its rule and never stalls the event loop or another run's checks;
- a rule in words, by the checks PREPARE made of it (`prepared`, by rule id): it holds when all of
  them hold, and its details name the first that did not; with none prepared it is skipped;
- an executable check, only when an operator allows it (checks.commands): the command is split
  with shlex and run without a shell, in a fresh temporary directory holding the output as
  `artifact.md`, with the output also on stdin; exit 0 passes, a timeout fails.

The checks and their outcomes are aeonloop.checks'; what is here is what needs the run's rules
(phases.models): their verdicts, the score, and running them all at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from aeonloop.checks import threads
from aeonloop.checks.commands import command_outcome
from aeonloop.checks.running import CheckOutcome, all_hold, run_check
from aeonloop.checks.threads import RunBudget
from aeonloop.checks.types import Check, PatternCheck
from aeonloop.limits import DEFAULT_PATTERN_TIMEOUT_S, DEFAULT_RUN_CHECK_CPU_S, LoopSettings
from aeonloop.phases.events import RunState
from aeonloop.phases.models import Evaluation, Rule, RuleCheck, RuleFinding, RuleResult, Verdict


def host_outcome(
    rule: Rule,
    output: str,
    prepared: Sequence[Check] = (),
    pattern_timeout: float = DEFAULT_PATTERN_TIMEOUT_S,
    budget: RunBudget | None = None,
) -> CheckOutcome:
    """The outcome of a rule the host judges itself (every form of check but a command):
    synchronous, bounded by `pattern_timeout` for each check it runs and charged to the run's
    `budget`."""
    check = rule.check
    if isinstance(check, str):
        return all_hold(prepared, output, pattern_timeout, budget)
    if isinstance(check, RuleCheck):
        check = PatternCheck(pattern=check.search or "")  # a content check wants it present
    return run_check(check, output, timeout=pattern_timeout, budget=budget)


def _command(rule: Rule) -> RuleCheck | None:
    check = rule.check
    return check if isinstance(check, RuleCheck) and check.type == "executable" else None


def verdict(rule: Rule, outcome: CheckOutcome) -> Verdict:
    if not outcome.ran:
        return "skipped"
    if outcome.held:
        return "pass"
    return "fail" if rule.severity == "fail" else "warn"


def _details(rule: Rule, outcome: CheckOutcome) -> str:
    if outcome.ran and not outcome.held and rule.severity == "info":
        return f"{outcome.details} (info rule: reported, never fails)"
    return outcome.details


def is_active(rule: Rule, result: RuleResult) -> bool:
    """Counted in the score: a fail- or warn-severity rule whose check was run."""
    return rule.severity != "info" and result.verdict != "skipped"


def score_results(rules: list[Rule], results: list[RuleResult], threshold: float) -> Evaluation:
    """The EVALUATE formula (docs/requirements.md) over verdicts; `results` align with `rules`."""
    active = [(r, res) for r, res in zip(rules, results, strict=True) if is_active(r, res)]
    total = sum(r.weight for r, _ in active)
    earned = sum(r.weight for r, res in active if res.verdict == "pass")
    score = round(earned / total, 4) if total else 1.0
    failed = [_finding(r, res) for r, res in active if res.verdict == "fail"]
    warnings = [_finding(r, res) for r, res in active if res.verdict == "warn"]
    return Evaluation(
        score=score,
        passed=score >= threshold and not failed,
        failed=failed,
        warnings=warnings,
        rule_results=results,
    )


def _finding(rule: Rule, result: RuleResult) -> RuleFinding:
    """A failed rule as the answer names it; a rule the request's own text implied says so."""
    expected = rule.check.expected if isinstance(rule.check, RuleCheck) else ""
    message = rule.description or expected or rule.check_text()
    if rule.origin == "request":
        message = f"{message} (stated in the request)"
    return RuleFinding(id=rule.id, severity=rule.severity, message=f"{message}: {result.details}")


async def evaluate_rules(
    rules: list[Rule],
    output: str,
    threshold: float,
    *,
    prepared: Mapping[str, Sequence[Check]] | None = None,
    allow_executable: bool = False,
    timeout: float = 10.0,
    pattern_timeout: float = DEFAULT_PATTERN_TIMEOUT_S,
    budget: RunBudget | None = None,
) -> Evaluation:
    """Check every rule against the output and score the verdicts. `prepared` holds the checks
    PREPARE made, by rule id: a rule in words is judged by them alone.

    The host's own checks run in the check threads (checks.threads), off the event loop, one
    rule per job in its turn among other runs' (this evaluation is one lane), charged to the
    run's `budget` (None: a budget of AEON_RUN_CHECK_CPU_S's default for these rules alone);
    executable checks run as subprocesses at the same time.
    """
    known = prepared or {}
    lane = budget or RunBudget(DEFAULT_RUN_CHECK_CPU_S)
    commands = {i: check for i, rule in enumerate(rules) if (check := _command(rule))}
    on_host = [i for i in range(len(rules)) if i not in commands]

    def judge(rule: Rule) -> Callable[[], CheckOutcome]:
        return lambda: host_outcome(rule, output, known.get(rule.id, ()), pattern_timeout, lane)

    hosted, executed = await asyncio.gather(
        asyncio.gather(*(threads.shared.run(lane, judge(rules[i])) for i in on_host)),
        asyncio.gather(
            *(
                command_outcome(c.command or "", output, allow_executable, timeout)
                for c in commands.values()
            )
        ),
    )
    outcomes = dict(zip(on_host, hosted, strict=True))
    outcomes |= dict(zip(commands, executed, strict=True))
    results = [_result(rule, outcomes[i]) for i, rule in enumerate(rules)]
    return score_results(rules, results, threshold)


async def evaluate_run(
    run: RunState, output: str, settings: LoopSettings, prepared: Mapping[str, Sequence[Check]]
) -> Evaluation:
    """Every rule of `run` on `output` (`evaluate_rules`), within what is left of the run's
    budget of check time (AEON_RUN_CHECK_CPU_S), which the run's state then carries on."""
    budget = RunBudget(settings.run_check_cpu_s, spent=run.check_cpu_s)
    try:
        return await evaluate_rules(
            run.rules,
            output,
            run.threshold,
            prepared=prepared,
            allow_executable=settings.allow_executable_checks,
            timeout=settings.executable_check_timeout,
            pattern_timeout=settings.check_pattern_timeout_s,
            budget=budget,
        )
    finally:
        run.check_cpu_s = budget.spent


def _result(rule: Rule, outcome: CheckOutcome) -> RuleResult:
    return RuleResult(id=rule.id, verdict=verdict(rule, outcome), details=_details(rule, outcome))


def judged(rules: list[Rule], evaluation: Evaluation | None) -> bool:
    """Whether the rules said anything: at least one active rule. If not, the rubric decides."""
    if evaluation is None:
        return False
    return any(is_active(r, res) for r, res in zip(rules, evaluation.rule_results, strict=True))
