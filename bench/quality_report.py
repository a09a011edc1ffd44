"""The quality section's tables, and `python -m bench.quality_report RESULTS` to print them from a
results file (`--quality-results`), as far as a run got: a loop run of 40 cases on a small model
takes hours, and its finished cases make a table while it goes on.

Two tables, each per case and in total: the rules as hand-written checks (one plain call, best
of k plain calls at the loop's token spend, the loop), and the rules in words (the same, with
the words loop, and how far PREPARE's checks agree with the hand-written ones on the published
answer). Held is the rules that held, "all" marks a case whose rules all held (whole), a flip
is a rule one plain call held and the loop lost.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.quality_scores import BESTOF, K_MAX, PLAIN, summarise
from bench.report import _cell, table

Layout = Callable[[Sequence[str], Sequence[Sequence[object]]], str]


def _tokens(way: Mapping[str, Any]) -> int:
    return int(way["prompt_tokens"]) + int(way["completion_tokens"])


def _held(way: Mapping[str, Any] | None) -> str | None:
    if way is None:
        return None
    if "error" in way:
        return "error"
    return f"{way['rules_held']}{' all' if way['all_held'] else ''}"


def _get(way: Mapping[str, Any] | None, key: str) -> Any:
    if way is None or "error" in way or (key not in way and key != "tokens"):
        return None
    return _tokens(way) if key == "tokens" else way[key]


def _flips(total: Mapping[str, Any]) -> str | None:
    if "flips" not in total:
        return None  # no plain call to compare with
    share = total["cases_with_flips"] / total["cases_compared"]
    return f"{total['flips']} ({total['cases_with_flips']} cases, {share:.0%})"


def markdown(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The same table in Markdown, as docs/benchmarks.md shows it (figures formatted alike)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def _loop_table(section: Mapping[str, Any], column: str, layout: Layout) -> str:
    bestof = BESTOF[column]
    words = column == "words"
    headers = ["case", "rules", "plain", "best of k", "loop", "flips", "k", "loop calls"]
    headers += ["plain tok", "best-of-k tok", "loop tok", "plain s", "best-of-k s", "loop s"]
    if words:
        headers += ["agree", "no check"]
    rows = []
    for row in section["per_case"]:
        if words and column not in row:
            continue
        loop, best, plain = row.get(column), row.get(bestof), row.get("plain")
        cells = [row["case"], row["rules"], _held(plain), _held(best), _held(loop)]
        cells += [_get(loop, "flips"), _get(best, "k"), _get(loop, "calls")]
        cells += [_get(plain, "tokens"), _get(best, "tokens"), _get(loop, "tokens")]
        cells += [_get(plain, "seconds"), _get(best, "seconds"), _get(loop, "seconds")]
        if words:
            agreement = _get(loop, "agreement")
            cells += (
                [f"{agreement['agreed']}/{agreement['checked']}", len(agreement["unchecked"])]
                if agreement
                else [None, None]
            )
        rows.append(cells)
    plain, best, loop = section.get(PLAIN[column]), section.get(bestof), section.get(column)

    def held(total: Mapping[str, Any] | None) -> str | None:
        return f"{total['rules_held']} ({total['cases_all_held']} all)" if total else None

    def figure(total: Mapping[str, Any] | None, key: str) -> Any:
        return None if total is None else _tokens(total) if key == "tokens" else total[key]

    cells = ["total", figure(plain, "rules"), held(plain), held(best)]
    cells += [held(loop), _flips(loop) if loop else None, figure(best, "k")]
    cells += [figure(loop, "calls"), figure(plain, "tokens"), figure(best, "tokens")]
    cells += [figure(loop, "tokens"), figure(plain, "seconds"), figure(best, "seconds")]
    cells += [figure(loop, "seconds")]
    if words:
        agreement = loop["agreement"] if loop else None
        cells += (
            [f"{agreement['agreed']}/{agreement['checked']}", agreement["unchecked"]]
            if agreement
            else [None, None]
        )
    rows.append(cells)
    name = "rules in words (PREPARE makes the checks)" if words else "rules as checks"
    title = (
        f"Quality, {name}: one plain call, best of k plain calls (k matched to the loop's "
        f"tokens, at most {K_MAX}), Aeon's loop; model {section['model']}"
    )
    measured = loop["cases"] if loop else (plain or {}).get("cases", 0)
    notes = [f"{title} ({measured} of {section['cases']} cases)", layout(headers, rows)]
    if loop and loop.get("errors"):
        notes.append(f"{loop['errors']} run(s) broke (timed out or failed) and count nowhere")
    return "\n".join(notes)


def render_quality(section: Mapping[str, Any], layout: Layout = table) -> str:
    """The rules-as-checks table, and the rules-in-words table when that column ran."""
    parts = [_loop_table(section, "loop", layout)]
    if "words" in section:
        parts.append(_loop_table(section, "words", layout))
    return "\n\n".join(parts)


def from_results(path: Path, cases: int | None = None) -> dict[str, Any]:
    """The section, summarised from a results file as far as it goes."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return summarise(data["model"], data["records"][: cases or None])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality_report",
        description="Print the quality tables from a --quality-results file (a run's so far).",
        epilog="Exit status: 0 printed, 2 the file could not be read.",
    )
    parser.add_argument("results", type=Path, help="the file `--quality-results` wrote")
    parser.add_argument("--cases", type=int, default=None, metavar="N", help="first N only")
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print the section as JSON")
    shape.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args(argv)
    try:
        section = from_results(args.results, args.cases)
    except (OSError, ValueError, KeyError) as error:
        print(f"quality_report: cannot read {args.results}: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(section, indent=1))
    else:
        print(render_quality(section, markdown if args.markdown else table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
