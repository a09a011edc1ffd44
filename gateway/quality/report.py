"""`aeon eval`'s output: the progress bar, the tables, the JSON file and the frontier picture.

Reads only the report `cases.summarise` makes. The picture needs matplotlib (the `bench`
extra: `pip install "aeonloop[bench]"`), imported here only when a picture is asked for, with
the `Agg` backend (a file, no display).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from aeonloop.exceptions import BadInput
from aeonloop.gateway.quality.paths import Step

#: How each mode is named in a table's title and the picture.
MODE_TITLES = {"checks": "rules as checks", "words": "rules in words (PREPARE makes the checks)"}
#: What to install for the picture.
PICTURE_EXTRA = 'pip install "aeonloop[bench]"'
_BAR_WIDTH = 20


class ProgressBar:
    """Progress on `stream`: on a terminal, one bar redrawn in place (cases done of all, the
    time left, what runs now); elsewhere, a plain line as each case finishes."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.done = 0
        #: Cases kept from an earlier run: done, but no time went into them here.
        self.kept = 0
        self.started = time.monotonic()
        self.terminal = stream.isatty()

    def __call__(self, step: Step) -> None:
        if step.done:
            self.done = step.number
            self.kept += step.kept
        if self.terminal:
            line = f"{self._bar()} {step.case}: {step.doing}"
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + line[:width].ljust(width))
            if step.done and step.number == step.total:
                self.stream.write("\n")
        elif step.done:
            self.stream.write(f"aeon eval: {self._counted()} ({step.case} done), {self._left()}\n")
        self.stream.flush()

    def _counted(self) -> str:
        return f"{self.done}/{self.total} cases"

    def _bar(self) -> str:
        filled = _BAR_WIDTH * self.done // max(self.total, 1)
        return f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {self._counted()}, {self._left()},"

    def _left(self) -> str:
        ran = self.done - self.kept
        if self.done >= self.total:
            return f"took {_duration(time.monotonic() - self.started)}"
        if not ran:
            return "time left not known yet"
        each = (time.monotonic() - self.started) / ran
        return f"about {_duration(each * (self.total - self.done))} left"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _held(total: Mapping[str, Any]) -> str:
    return f"{total['rules_held']} of {total['rules']}"


def _flips(total: Mapping[str, Any]) -> str:
    if "flips" not in total:
        return "-"
    cases = total["cases_with_flips"]
    return f"{total['flips']} ({cases} case{'' if cases == 1 else 's'})"


def mode_table(report: Mapping[str, Any], mode: str) -> str:
    """One mode's table: a row for each path, its totals over the cases every path finished."""
    section = report["modes"][mode]
    totals: Mapping[str, Mapping[str, Any]] = section["totals"]
    headers = ["path", "rules held", "cases whole", "flips", "calls", "tokens", "seconds"]
    words = mode == "words"
    if words:
        headers.append("prepared agree")
    rows = []
    for path, total in totals.items():
        row = [path, _held(total), f"{total['cases_whole']} of {total['cases']}", _flips(total)]
        row += [f"{total['calls']:,}", f"{total['tokens']:,}", f"{total['seconds']:,}"]
        if words:
            agreement = total.get("agreement")
            row.append(f"{agreement['agreed']}/{agreement['checked']}" if agreement else "-")
        rows.append(row)
    finished = report["cases"] - len(section["broken"])
    lines = [
        f"Quality, {MODE_TITLES[mode]}: model {report['model']}, {finished} of "
        f"{report['cases']} cases",
        _layout(headers, rows),
    ]
    if section["broken"]:
        lines.append(f"left out, a path broke on them: {', '.join(section['broken'])}")
    short = {k: n for k, n in section["short_of_k"].items() if n}
    for k, n in short.items():
        lines.append(f"best of {k}: {n} case(s) had fewer samples, and took all they had")
    return "\n".join(lines)


def render(report: Mapping[str, Any]) -> str:
    """Every mode's table, one after the other."""
    return "\n\n".join(mode_table(report, mode) for mode in report["modes"])


def _layout(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def write_json(report: Mapping[str, Any], path: Path) -> None:
    """The report as JSON, replaced whole (a reader never sees half of it)."""
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, path)
    except OSError as error:
        raise BadInput(f"--json: cannot write {path}: {error.strerror}") from None


def kept_records(path: Path, model: str) -> dict[str, dict[str, Any]]:
    """The records of an earlier report at `path` (`--resume`), by fingerprint: none when there
    is no file yet; BadInput when it is not a report, or one of another model."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        records = data["records"]
        measured = data["model"]
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise BadInput(
            f"{path} is not a report of `aeon eval --json` ({error}): give another file"
        ) from None
    if measured != model:
        raise BadInput(
            f"{path} holds a report for model {measured!r}, not {model!r}: give another file"
        )
    return {r["fingerprint"]: r for r in records if isinstance(r, dict) and "fingerprint" in r}


def can_plot() -> bool:
    """Whether the picture can be drawn here (matplotlib, from the `bench` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def frontier(report: Mapping[str, Any], mode: str) -> list[tuple[str, int, int]]:
    """The picture's points in `mode`: (path, tokens, rules held) for every path."""
    totals = report["modes"][mode]["totals"]
    return [(path, t["tokens"], t["rules_held"]) for path, t in totals.items()]


def plot(report: Mapping[str, Any], path: Path) -> None:
    """Rules held against tokens, one panel a mode: plain and best of k as a line (the
    frontier sampling gives), each Aeon path as a point beside it."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    modes = list(report["modes"])
    figure, axes = pyplot.subplots(1, len(modes), figsize=(6 * len(modes), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        points = frontier(report, mode)
        sampled = [(x, y) for name, x, y in points if not name.startswith("aeon")]
        if sampled:
            xs, ys = zip(*sampled, strict=True)
            ax.plot(xs, ys, marker="o", color="tab:blue", label="plain, best of k")
        for name, x, y in points:
            if name.startswith("aeon"):
                ax.scatter([x], [y], marker="*", s=160, color="tab:red", zorder=3)
                ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 4))
            else:
                ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8)
        rules = report["modes"][mode]["totals"]["plain"]["rules"]
        ax.set_title(f"{MODE_TITLES[mode]} ({rules} rules)", fontsize=10)
        if all(x > 0 for _, x, _ in points):
            ax.set_xscale("log")
        ax.set_xlabel("tokens (prompt + completion)")
        ax.set_ylabel("rules held")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    figure.suptitle(f"Quality against tokens, model {report['model']}, {report['cases']} cases")
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=100)
    except OSError as error:
        raise BadInput(f"--plot: cannot write {path}: {error.strerror}") from None
    finally:
        pyplot.close(figure)
