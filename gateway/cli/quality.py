"""`aeon eval [CASES]`: the quality harness on the user's own cases (gateway/quality/).

Each case is asked of the model `aeon ask` uses (the AEON_LLM settings, the offline model
included): as one plain call, as best of k plain calls, and through Aeon on the pipeline `aeon
ask` uses (the embedded one, or the deployment at AEON_REDIS_URL). The table goes to stdout,
progress to stderr; `--json FILE` and `--plot FILE` keep the report and draw its frontier.

Exit status: 0 the table was printed; 2 bad input (no such file, no valid case, a bad option:
one line); 4 Redis; 6 the LLM server is not ready (as `aeon ask`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import BadInput
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.embedded import embedded_pipeline
from aeonloop.gateway.quality.cases import MODES, load_cases
from aeonloop.gateway.quality.paths import (
    EFFORTS,
    RUN_TIMEOUT_S,
    Plan,
    efforts_to_run,
    evaluate,
)
from aeonloop.gateway.quality.report import (
    PICTURE_EXTRA,
    ProgressBar,
    can_plot,
    kept_records,
    plot,
    render,
    write_json,
)
from aeonloop.gateway.validation import as_option, check_timeout
from aeonloop.llm.base import LLMAdapter
from aeonloop.llm.factory import ready_adapter


async def run_eval(args: argparse.Namespace) -> int:
    """Run every case on every path and print the tables."""
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path is not None and not path.parent.is_dir():
            raise BadInput(f"{option}: {path.parent} is not a directory; nothing was run")
    loaded = load_cases(Path(args.cases) if args.cases else None)
    for line in loaded.skipped:
        _status(line)
    cases = loaded.checked()[: args.limit]
    efforts = efforts_to_run(args.effort or [])
    picture = args.plot
    if picture and not can_plot():
        _status(f"--plot: the picture needs matplotlib: {PICTURE_EXTRA}; the table is printed")
        picture = None
    plan = Plan(tuple(args.modes), efforts, args.k, args.timeout, args.loop)
    model = args.llm.model or args.llm.kind
    bar = ProgressBar(sys.stderr, len(cases))
    keep: Callable[[dict[str, Any]], None] = (
        (lambda report: write_json(report, args.json)) if args.json else (lambda report: None)
    )
    if args.resume and not args.json:
        raise BadInput("--resume needs --json FILE: the report whose cases it keeps")
    kept = kept_records(args.json, model) if args.resume else {}
    llm = await ready_adapter(args.llm)
    try:
        async with (
            _pipeline(args.settings, llm, args) as settings,
            AeonClient(settings=settings, loop=args.loop) as client,
        ):
            report = await evaluate(cases, llm, client, plan, model, bar, keep, kept)
    finally:
        await llm.aclose()
    print(render(report))
    if args.json:
        _status(f"report written to {args.json}")
    if picture:
        plot(report, picture)
        _status(f"frontier drawn in {picture}")
    return 0


@contextlib.asynccontextmanager
async def _pipeline(
    settings: BusSettings, llm: LLMAdapter, args: argparse.Namespace
) -> AsyncIterator[BusSettings]:
    """Where the runs go, as for `aeon ask`: the deployment at AEON_REDIS_URL, or a private
    embedded pipeline on `llm`."""
    if settings.redis_url:
        yield settings
        return
    async with embedded_pipeline(settings, llm, args.loop) as embedded:
        yield embedded


def _status(line: str) -> None:
    print(f"aeon: {line}", file=sys.stderr, flush=True)


def choices_option(names: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of `names`, in the order given, each once
    (`aeon eval --modes`, and `python -m bench --quality-modes`)."""

    def parse(text: str) -> list[str]:
        given = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in given if name not in names]
        if unknown or not given:
            raise argparse.ArgumentTypeError(
                f"choose from {','.join(names)} (comma-separated); got {text!r}"
            )
        return list(dict.fromkeys(given))

    return parse


def _at_least_one(value: int) -> int:
    if value < 1:
        raise BadInput(f"{value} must be at least 1")
    return value


def add_commands(commands: argparse._SubParsersAction, command: Callable[..., Any]) -> None:
    p = command(
        commands,
        "eval",
        run_eval,
        "measure Aeon against one plain call and best of k on a JSONL file of cases",
        "WARNING",
    )
    p.add_argument(
        "cases",
        nargs="?",
        metavar="CASES",
        help="a JSONL file, one case a line: {request, rules?, expect?} (default: the 40 "
        "shipped cases)",
    )
    p.add_argument(
        "--modes",
        type=choices_option(MODES),
        default=list(MODES),
        help="how the rules reach Aeon: as checks, in words, or both (default checks,words)",
    )
    p.add_argument(
        "--effort",
        type=choices_option(EFFORTS),
        metavar="EFFORTS",
        help="run Aeon at each of these efforts, comma-separated (low,medium,high; default: "
        "its default effort)",
    )
    p.add_argument(
        "--k",
        type=as_option(_at_least_one, int, "a whole number"),
        metavar="N",
        help="plain samples a case, for best of k (default: as many as spend what Aeon spent, "
        "at most 8)",
    )
    p.add_argument(
        "--limit",
        type=as_option(_at_least_one, int, "a whole number"),
        metavar="N",
        help="run the first N cases only",
    )
    p.add_argument(
        "--timeout",
        type=as_option(check_timeout, float, "a number of seconds"),
        default=RUN_TIMEOUT_S,
        metavar="S",
        help=f"seconds each Aeon run may take ({RUN_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="write the report as JSON (after every case, so a run cut short keeps its table)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the cases the --json FILE already holds (same case, same options, same "
        "model) and run only the rest",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help=f"draw rules held against tokens as a PNG (needs {PICTURE_EXTRA})",
    )
