"""Rule evaluation (docs/requirements.md, EVALUATE): the host runs the checks, never the LLM.

Each rule's check gives a verdict, scored as in docs/architecture.md, "Rules and scoring":

- score = Σ weight of passed rules / Σ weight of active rules, 1.0 when that sum is 0;
- passed = score ≥ threshold and no fail-severity rule failed.

Which rules are *active* (counted in the score): fail- and warn-severity rules whose check was
actually run. An executable check that was not run (disabled) says nothing about the output, so
counting it either way would be a guess; an info rule is reported and never scored, since "info
never fails" would otherwise only inflate the score.

Verdicts: "pass"; "fail" for a failed fail-severity rule (listed in `failed`); "warn" for a failed
warn-severity rule (listed in `warnings`, lowering the score but not blocking `passed` by
itself); "warn" for an info rule whose check did not hold (listed nowhere); "skipped" with the
reason for an executable check that was not run.

Content checks search the pass's combined output with the rule's regular expression, on the host,
deterministically. Executable checks run only when an operator allows them: the command is split
with shlex and run without a shell, in a fresh temporary directory holding the output as
`artifact.md`, with the output also on stdin; exit 0 passes, a timeout fails.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from aeonloop.phases.models import Evaluation, Rule, RuleFinding, RuleResult, Verdict

ARTIFACT_NAME = "artifact.md"
_DETAIL_LIMIT = 300
SKIPPED_REASON = (
    "executable checks are disabled; an operator enables them with AEON_ALLOW_EXECUTABLE_CHECKS=1"
)


@dataclass(frozen=True)
class CheckOutcome:
    """A check's raw result, before the rule's severity turns it into a verdict."""

    held: bool
    details: str
    ran: bool = True


def content_check(pattern: str, output: str) -> CheckOutcome:
    """Whether the regular expression occurs anywhere in the output."""
    match = re.search(pattern, output, flags=re.MULTILINE)
    if match:
        return CheckOutcome(True, f"found /{pattern}/: {_clip(match.group(0))!r}")
    return CheckOutcome(False, f"/{pattern}/ not found in the output")


async def executable_check(command: str, output: str, timeout: float) -> CheckOutcome:
    """Run `command` (no shell) with the output on stdin and in ./artifact.md; exit 0 holds."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return CheckOutcome(False, f"command cannot be parsed: {exc}")
    if not argv:
        return CheckOutcome(False, "command is empty")
    with tempfile.TemporaryDirectory(prefix="aeon-check-") as workdir:
        artifact = Path(workdir, ARTIFACT_NAME)
        artifact.write_text(output, encoding="utf-8")
        with artifact.open("rb") as stdin:
            return await _run(argv, stdin, workdir, timeout)


async def _run(argv: list[str], stdin: BinaryIO, workdir: str, timeout: float) -> CheckOutcome:
    """Run the command with `stdin` as a file, not a pipe: a command that exits without
    reading its input (`true`, `grep -q` on ./artifact.md) then cannot make the write fail.
    Under uvloop such a write fails with "unable to perform operation on <WriteUnixTransport
    closed=True>" rather than the BrokenPipeError asyncio's communicate() ignores."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workdir,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return CheckOutcome(False, f"command cannot start: {exc}")
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        return CheckOutcome(False, f"timed out after {timeout:g}s")
    said = _clip((err or out).decode(errors="replace").strip())
    details = f"exit {process.returncode}" + (f": {said}" if said else "")
    return CheckOutcome(process.returncode == 0, details)


async def run_check(rule: Rule, output: str, allow_executable: bool, timeout: float) -> RuleResult:
    """The rule's verdict on the output (see the module docstring for the verdicts)."""
    check = rule.check
    if check.type == "content":
        outcome = content_check(check.search or "", output)
    elif not allow_executable:
        outcome = CheckOutcome(False, SKIPPED_REASON, ran=False)
    else:
        outcome = await executable_check(check.command or "", output, timeout)
    return RuleResult(id=rule.id, verdict=verdict(rule, outcome), details=_details(rule, outcome))


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
    message = rule.description or rule.check.expected or "the rule's check did not hold"
    return RuleFinding(id=rule.id, severity=rule.severity, message=f"{message}: {result.details}")


async def evaluate_rules(
    rules: list[Rule],
    output: str,
    threshold: float,
    *,
    allow_executable: bool = False,
    timeout: float = 10.0,
) -> Evaluation:
    """Check every rule against the output (concurrently) and score the verdicts."""
    results = await asyncio.gather(
        *(run_check(rule, output, allow_executable, timeout) for rule in rules)
    )
    return score_results(rules, list(results), threshold)


def judged(rules: list[Rule], evaluation: Evaluation | None) -> bool:
    """Whether the rules said anything: at least one active rule. If not, the rubric decides."""
    if evaluation is None:
        return False
    return any(is_active(r, res) for r, res in zip(rules, evaluation.rule_results, strict=True))


def _clip(text: str) -> str:
    return text if len(text) <= _DETAIL_LIMIT else text[:_DETAIL_LIMIT] + "…"
