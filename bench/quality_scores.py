"""The quality harness's figures, from what it measured: best of k, flips, agreement, totals.

`bench/quality.py` measures; this module only reads what it measured (the results file's case
records, plain JSON) and adds nothing a column did not spend. Kept apart so the figures can be
computed again from a results file (a partial run, or the baseline of one run merged with the
loop of another) and tested without a model.

A case record:

    {"case": id, "rules": [rule ids],
     "plain": [take, ...],      # up to K_MAX plain calls of the same prompt, in order
     "loop": take | None,       # the request and its rules through Aeon's loop
     "words": take | None}      # the same with the rules in words only (PREPARE makes checks)

A take is one answer as published and what it cost: `text` (the answer text that was scored),
`verdicts` (each rule id's verdict on `text` by the case's hand-written checks), `calls`,
`prompt_tokens`, `completion_tokens`, `seconds`; a loop's take adds `status`, `degraded` and
`checks` (the answer's `metadata["checks"]`: each rule of the run with its verdict by the run's
own checks). A take whose run broke has `error` instead of a text and counts nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Most plain calls best-of-k takes for a case: the loop spends 30-100 plain calls' tokens on a
#: small model, so the cap is what bounds the baseline's cost (and the harness's time).
K_MAX = 8
#: The loop columns, each compared with one plain call and with best of k at its own spend,
#: and the names of those two ways' totals in its table.
LOOPS = ("loop", "words")
BESTOF = {"loop": "bestof", "words": "words_bestof"}
PLAIN = {"loop": "plain", "words": "words_plain"}
#: What one way's figures hold.
COUNTED = ("calls", "prompt_tokens", "completion_tokens", "seconds")

Take = Mapping[str, Any]


def held(take: Take) -> int:
    """Rules that held on the take's text (a rule a check skipped is not counted either way)."""
    return sum(1 for verdict in take["verdicts"].values() if verdict == "pass")


def whole(take: Take) -> bool:
    """Every rule that was judged held: the case is whole."""
    judged = [v for v in take["verdicts"].values() if v != "skipped"]
    return all(v == "pass" for v in judged)


def tokens(take: Take) -> int:
    return int(take["prompt_tokens"]) + int(take["completion_tokens"])


def spend_matched_k(samples: Sequence[Take], budget: int | None) -> int:
    """How many plain calls spend about what the loop spent (`budget` tokens): the most whose
    tokens together stay within it, at least one, at most the samples there are (K_MAX). With
    no loop to match (None), every sample: best of K_MAX."""
    if budget is None:
        return len(samples)
    k, spent = 0, 0
    for sample in samples:
        spent += tokens(sample)
        if spent > budget:
            break
        k += 1
    return max(1, k)


def best_of(samples: Sequence[Take], k: int) -> tuple[int, Take]:
    """The first k samples' best by the host's checks: most rules held, ties to the first."""
    pool = samples[:k]
    best = max(range(len(pool)), key=lambda i: (held(pool[i]), -i))
    return best, pool[best]


def flips(plain: Take, loop: Take) -> list[str]:
    """Rules one plain call held and the loop lost."""
    return [
        rule
        for rule, verdict in plain["verdicts"].items()
        if verdict == "pass" and loop["verdicts"].get(rule) != "pass"
    ]


def agreement(take: Take) -> dict[str, Any]:
    """How far the checks PREPARE made from the rules in words agree with the hand-written
    ones, on the same text. The run's answer lists each rule with its verdict by the run's checks
    on the published text (`metadata["checks"]`: for a rule in words, held when every check
    PREPARE made for it held); the harness ran the hand-written checks on that text. A rule
    PREPARE made no check for is judged by nothing (skipped) and counted apart, as are the
    rules PREPARE made from the request itself (origin "request")."""
    by_rule = {check["id"]: check for check in take.get("checks") or []}
    agreed, disagreed, unchecked = [], [], []
    for rule, verdict in take["verdicts"].items():
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
    way = {
        "rules_held": held(take),
        "all_held": whole(take),
        **{key: take[key] for key in COUNTED},
    }
    return {**way, **extra}


def _usable(take: Take | None) -> bool:
    return take is not None and "error" not in take


def case_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """One case's figures: plain (the first plain call), and for each loop column measured, the
    loop, best of k at its spend, and the rules the loop lost against the plain call."""
    samples = [s for s in record["plain"] if _usable(s)]
    row: dict[str, Any] = {"case": record["case"], "rules": len(record["rules"])}
    if samples:
        row["plain"] = _way(samples[0])
    for column in LOOPS:
        take = record.get(column)
        if take is not None and not _usable(take):
            row[column] = {"error": take["error"], "seconds": take.get("seconds", 0)}
            continue
        if take is None and column != "loop":
            continue
        budget = tokens(take) if take is not None else None
        if len(samples) > 1:  # the best-of-k column was measured
            k = spend_matched_k(samples, budget)
            picked, best = best_of(samples, k)
            ways = samples[:k]
            row[BESTOF[column]] = {
                **_way(best, k=k, picked=picked + 1),
                **{key: sum(s[key] for s in ways) for key in COUNTED},
            }
            if budget is not None and budget > sum(tokens(s) for s in samples):
                row[BESTOF[column]]["capped"] = True  # the loop spent more than every sample
        if take is None:
            continue
        row[column] = _way(take, status=take.get("status"))
        if samples:  # flips need the plain call to compare with
            lost = flips(samples[0], take)
            row[column].update(flips=len(lost), flipped=lost)
        if column == "words":
            row[column]["agreement"] = agreement(take)
    return row


def total(rows: Sequence[Mapping[str, Any]], way: str) -> dict[str, Any]:
    """One way's figures over the rows that have it (a broken run counts nowhere)."""
    counted = [row for row in rows if way in row and "error" not in row[way]]
    ways = [row[way] for row in counted]
    result: dict[str, Any] = {
        "cases": len(ways),
        "rules": sum(row["rules"] for row in counted),
        "cases_all_held": sum(1 for w in ways if w["all_held"]),
        "rules_held": sum(w["rules_held"] for w in ways),
        **{key: sum(w[key] for w in ways) for key in COUNTED},
    }
    result["seconds"] = round(result["seconds"], 1)
    compared = [w for w in ways if "flips" in w]
    if compared:
        result["flips"] = sum(w["flips"] for w in compared)
        result["cases_with_flips"] = sum(1 for w in compared if w["flips"])
        result["cases_compared"] = len(compared)
    if ways and "agreement" in ways[0]:
        parts = [w["agreement"] for w in ways]
        result["agreement"] = {
            "checked": sum(p["checked"] for p in parts),
            "agreed": sum(p["agreed"] for p in parts),
            "disagreed": sum(len(p["disagreed"]) for p in parts),
            "unchecked": sum(len(p["unchecked"]) for p in parts),
            "request_checks": sum(p["request_checks"] for p in parts),
        }
    if ways and "k" in ways[0]:
        result["k"] = sum(w["k"] for w in ways)
    return result


def summarise(model: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The section's report from the case records: per case, and in total for each way.

    Each loop column's table (rules as checks: `loop`; rules in words: `words`) totals over
    the cases that column finished, so a partial run compares like with like; plain is totalled
    over the same cases as the loop (`plain`) and as the words loop (`words_plain`)."""
    rows = [case_row(record) for record in records]
    section: dict[str, Any] = {
        "model": model,
        "cases": len(rows),
        "rules": sum(row["rules"] for row in rows),
        "k_max": K_MAX,
        "per_case": rows,
    }
    for column in LOOPS:
        finished = [row for row in rows if column in row and "error" not in row[column]]
        if column == "loop" and not finished:
            finished = rows  # the baseline alone: plain and best of K_MAX over every case
        if not finished:
            continue
        section[PLAIN[column]] = total(finished, "plain")
        if any(BESTOF[column] in row for row in finished):
            section[BESTOF[column]] = total(finished, BESTOF[column])
        if any(column in row for row in finished):
            section[column] = total(finished, column)
            section[column]["errors"] = sum(1 for row in rows if "error" in row.get(column, {}))
    return section
