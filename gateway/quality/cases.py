"""`aeon eval`'s cases and their scoring: read a JSONL file of cases, judge a text by the case's
checks, and total what each path held and spent.

A case is one JSON object a line (`cases.jsonl` beside this module holds the 40 shipped ones):

    {"id": "capital", "request": "What is the capital of Australia?",
     "rules": [{"id": "short", "description": "Use at most 40 words.", "check": {...}}],
     "expect": ["Canberra"]}

- `request`: what is asked, as `aeon ask` takes it;
- `rules` (optional): Aeon's rules (docs/verified-answers.md, "Rules and scoring"), each with a
  check the host runs or a check in words; every path is told them, a plain call as
  instructions (prompts/baseline.py) and Aeon as the run's rules;
- `expect` (optional): phrases the answer should hold, scored as rules are but told to no path:
  the answer key, which a path can only meet by answering right.

Every text is judged by the check code Aeon's own verification runs (`evaluate_rules`): a
rule's own check, a rule in words by the checks the host reads in its words (`stated_checks`,
PREPARE's floor), and an expected phrase by a `phrase_count` check. A rule nothing reads is
judged by nothing (skipped) and counted neither way.

The figures (`summarise`) read only what the paths recorded (plain JSON, the `--json` file's
`records`): best of the first k samples for each k of the ladder, flips, agreement of prepared
checks, totals per path. A take whose run broke has `error` instead of a text and counts
nowhere, except in its path's `errors`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aeonloop.checks.stated import stated_checks
from aeonloop.checks.types import parse_check
from aeonloop.exceptions import BadInput
from aeonloop.limits import LoopSettings
from aeonloop.phases.evaluation import evaluate_rules
from aeonloop.phases.models import Rule

#: The 40 shipped cases, package data beside this module.
SHIPPED = "cases.jsonl"
#: The two ways a case's rules reach Aeon: as the checks they are, or in words only (each
#: check replaced by its rule's description), so the run's PREPARE must make the checks.
Mode = Literal["checks", "words"]
MODES: tuple[Mode, ...] = ("checks", "words")
#: Where an expected phrase's rule id starts: `expect.1`, `expect.2`, ...
EXPECT_PREFIX = "expect."
#: What one way's figures count.
COUNTED = ("calls", "prompt_tokens", "completion_tokens", "seconds")

Take = Mapping[str, Any]


class Case(BaseModel):
    """One line of a cases file."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field("", max_length=128)
    request: str = Field(..., min_length=1)
    rules: list[Rule] = Field(default_factory=list)
    expect: list[str] = Field(default_factory=list)

    def scored(self) -> list[Rule]:
        """What a text is judged by: the rules, then each expected phrase as a rule."""
        return self.rules + [
            Rule(
                id=f"{EXPECT_PREFIX}{number}",
                description=f'Say "{phrase}".',
                check={"type": "phrase_count", "phrase": phrase, "min": 1},
            )
            for number, phrase in enumerate(self.expect, 1)
        ]

    def rules_for(self, mode: Mode) -> list[Rule]:
        """The rules Aeon is given in `mode`."""
        return self.rules if mode == "checks" else in_words(self.rules)


def in_words(rules: Sequence[Rule]) -> list[Rule]:
    """The rules as plain language only: each check becomes its rule's description (or, with
    none, the check's own one-line account), so the run's PREPARE must turn it into checks."""
    return [
        rule
        if rule.in_words
        else rule.model_copy(update={"check": rule.description or rule.check_text()})
        for rule in rules
    ]


class Loaded(BaseModel):
    """The cases read from a file (`where`), and one line for each line that was skipped."""

    where: str
    cases: list[Case]
    skipped: list[str]

    def checked(self) -> list[Case]:
        """The cases; BadInput (one line, exit 2) when there is none."""
        if not self.cases:
            raise BadInput(
                f"{self.where}: no valid case (each line is one case, with at least a "
                "request; see docs/cli.md#aeon-eval)"
            )
        return self.cases


def load_cases(path: Path | None = None) -> Loaded:
    """The cases of a JSONL file (None: the shipped ones). A line that is not a case is named
    with its number and why, and skipped; a file that cannot be read is BadInput (one line,
    exit 2), and so is one with no case, once its skipped lines are shown (`Loaded.checked`)."""
    if path is None:
        text = resources.files(__package__).joinpath(SHIPPED).read_text(encoding="utf-8")
        where = SHIPPED
    else:
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BadInput(f"{where}: no such file; give a JSONL file of cases") from None
        except (OSError, UnicodeDecodeError) as error:
            raise BadInput(f"{where}: cannot be read: {error}") from None
    cases: list[Case] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError(f"a case is a JSON object, not {type(data).__name__}")
            case = Case.model_validate(data)
        except ValueError as error:  # json's, ours and pydantic's alike
            skipped.append(f"{where}:{number}: skipped: {_why(error)}")
            continue
        case = case if case.id else case.model_copy(update={"id": f"line-{number}"})
        if case.id in seen:
            skipped.append(f"{where}:{number}: skipped: the id {case.id!r} is taken already")
            continue
        seen.add(case.id)
        cases.append(case)
    return Loaded(where=where, cases=cases, skipped=skipped)


def _why(error: ValueError) -> str:
    if isinstance(error, ValidationError):
        problem = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        return f"{where}: {problem['msg']}" if where else problem["msg"]
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON: {error}"
    return str(error)


async def verdicts(case: Case, text: str, settings: LoopSettings) -> dict[str, str]:
    """Each scored rule's verdict on `text`, by Aeon's own check code, bounded as a run's
    checks are (`settings`: an executable check runs only where AEON_ALLOW_EXECUTABLE_CHECKS
    allows it, else it is skipped): a rule in words by the checks the host reads in its words,
    as PREPARE's floor."""
    lines = "\n".join(f"- {r.id}: {r.check}" for r in case.rules if isinstance(r.check, str))
    prepared: dict[str, list[Any]] = {}
    for item in stated_checks("", lines):
        prepared.setdefault(item["rule_id"], []).append(parse_check(item["check"]))
    evaluation = await evaluate_rules(
        case.scored(),
        text,
        threshold=1.0,
        prepared=prepared,
        allow_executable=settings.allow_executable_checks,
        timeout=settings.executable_check_timeout,
        pattern_timeout=settings.check_pattern_timeout_s,
    )
    return {result.id: result.verdict for result in evaluation.rule_results}


# -- the figures ----------------------------------------------------------------------------


def held(take: Take, ids: Sequence[str] | None = None) -> int:
    """Rules that held on the take's text (of `ids`, when given)."""
    return sum(
        1 for rule, v in take["verdicts"].items() if v == "pass" and (ids is None or rule in ids)
    )


def whole(take: Take) -> bool:
    """Every rule that was judged held, and one was at least: the case is whole (a case with
    nothing judged says nothing of the answer)."""
    judged = [v for v in take["verdicts"].values() if v != "skipped"]
    return bool(judged) and all(v == "pass" for v in judged)


def tokens(take: Take) -> int:
    return int(take["prompt_tokens"]) + int(take["completion_tokens"])


def usable(take: Take | None) -> bool:
    return take is not None and "error" not in take


def ladder(k_max: int) -> list[int]:
    """The k best of k is shown for: 1, 2, 4, ... up to k_max, and k_max itself."""
    ks = [1]
    while ks[-1] * 2 <= k_max:
        ks.append(ks[-1] * 2)
    return ks if ks[-1] == k_max else [*ks, k_max]


def best_of(samples: Sequence[Take], k: int, rule_ids: Sequence[str]) -> tuple[int, Take]:
    """The first k samples' best by the case's rules (the checks every path is told; never the
    expected phrases, which no path sees): most held, ties to the first."""
    pool = samples[:k]
    best = max(range(len(pool)), key=lambda i: (held(pool[i], rule_ids), -i))
    return best, pool[best]


def flips(plain: Take, other: Take) -> list[str]:
    """Rules one plain call held and the other path lost."""
    return [
        rule
        for rule, verdict in plain["verdicts"].items()
        if verdict == "pass" and other["verdicts"].get(rule) != "pass"
    ]


def agreement(take: Take) -> dict[str, Any]:
    """How far the checks PREPARE made from rules in words agree with the case's own checks on
    the same text. The answer lists each rule with its verdict by the run's checks
    (`Outcome.checks`); a rule PREPARE made no check for is counted apart (unchecked), as
    are the rules PREPARE made from the request itself (origin "request")."""
    by_rule = {check["id"]: check for check in take.get("checks") or []}
    agreed, disagreed, unchecked = [], [], []
    for rule, verdict in take["verdicts"].items():
        if rule.startswith(EXPECT_PREFIX):
            continue  # told to no path: nothing was prepared for it
        prepared = by_rule.get(rule, {}).get("verdict", "skipped")
        if prepared == "skipped":
            unchecked.append(rule)
        elif (prepared == "pass") == (verdict == "pass"):
            agreed.append(rule)
        else:
            disagreed.append(rule)
    return {
        "checked": len(agreed) + len(disagreed),
        "agreed": len(agreed),
        "disagreed": disagreed,
        "unchecked": unchecked,
        "request_checks": sum(1 for c in by_rule.values() if c.get("origin") == "request"),
    }


def _way(take: Take, **extra: Any) -> dict[str, Any]:
    return {
        "rules_held": held(take),
        "all_held": whole(take),
        **{key: take[key] for key in COUNTED},
        **extra,
    }


def case_row(record: Mapping[str, Any], mode: Mode, ks: Sequence[int]) -> dict[str, Any]:
    """One case's figures in `mode`: `plain` (the first sample), `best of k` for each k of
    `ks` past 1 (the first k samples' best, and what all k cost), and each Aeon path; each but
    plain with its flips against the plain call."""
    samples = [s for s in record["samples"] if usable(s)]
    row: dict[str, Any] = {"case": record["case"], "rules": len(record["scored"])}
    if samples:
        row["plain"] = _way(samples[0])
        for k in ks[1:]:  # best of 1 is plain
            used = samples[:k]
            picked, best = best_of(samples, k, record["rules"])
            lost = flips(samples[0], best)
            row[f"best of {k}"] = {
                **_way(best, picked=picked + 1, k=len(used), flips=len(lost), flipped=lost),
                **{key: sum(s[key] for s in used) for key in COUNTED},
            }
    for path, take in record["aeon"].get(mode, {}).items():
        if not usable(take):
            row[path] = {"error": take["error"], "seconds": take.get("seconds", 0)}
            continue
        row[path] = _way(take, status=take.get("status"))
        if samples:
            lost = flips(samples[0], take)
            row[path].update(flips=len(lost), flipped=lost)
        if mode == "words":
            row[path]["agreement"] = agreement(take)
    return row


def total(rows: Sequence[Mapping[str, Any]], path: str) -> dict[str, Any]:
    """One path's figures over the rows that have it (a broken run counts nowhere)."""
    counted = [row for row in rows if path in row and "error" not in row[path]]
    ways = [row[path] for row in counted]
    result: dict[str, Any] = {
        "cases": len(ways),
        "rules": sum(row["rules"] for row in counted),
        "rules_held": sum(w["rules_held"] for w in ways),
        "cases_whole": sum(1 for w in ways if w["all_held"]),
        **{key: sum(w[key] for w in ways) for key in COUNTED},
    }
    result["tokens"] = result["prompt_tokens"] + result["completion_tokens"]
    result["seconds"] = round(result["seconds"], 1)
    compared = [w for w in ways if "flips" in w]
    if compared:
        result["flips"] = sum(w["flips"] for w in compared)
        result["cases_with_flips"] = sum(1 for w in compared if w["flips"])
    if ways and "agreement" in ways[0]:
        parts = [w["agreement"] for w in ways]
        result["agreement"] = {
            "checked": sum(p["checked"] for p in parts),
            "agreed": sum(p["agreed"] for p in parts),
            "disagreed": sum(len(p["disagreed"]) for p in parts),
            "unchecked": sum(len(p["unchecked"]) for p in parts),
            "request_checks": sum(p["request_checks"] for p in parts),
        }
    return result


def summarise(
    model: str, records: Sequence[Mapping[str, Any]], modes: Sequence[Mode], aeon: Sequence[str]
) -> dict[str, Any]:
    """The report: per mode, per case and in total for each path (plain, best of k for each k
    of the ladder, each Aeon path), over the cases every path of the mode finished, so the
    totals compare like with like; a case one path broke on is left out of every total of its
    mode and named."""
    taken = [sum(1 for s in r["samples"] if usable(s)) for r in records]
    k_max = max(taken, default=1)
    ks = ladder(max(k_max, 1))
    report: dict[str, Any] = {
        "model": model,
        "cases": len(records),
        "k_max": k_max,
        "ks": ks,
        "modes": {},
    }
    for mode in modes:
        rows = [case_row(record, mode, ks) for record in records]
        paths = ["plain", *(f"best of {k}" for k in ks[1:]), *aeon]
        broken = [row["case"] for row in rows if any(_broken(row, path) for path in paths)]
        finished = [row for row in rows if row["case"] not in broken]
        report["modes"][mode] = {
            "per_case": rows,
            "broken": broken,
            "totals": {
                path: {**total(finished, path), "errors": sum(_errored(r, path) for r in rows)}
                for path in paths
            },
            "short_of_k": {str(k): sum(1 for n in taken if n < k) for k in ks[1:]},
        }
    return report


def _errored(row: Mapping[str, Any], path: str) -> bool:
    return "error" in row.get(path, {})


def _broken(row: Mapping[str, Any], path: str) -> bool:
    return path not in row or "error" in row[path]
