"""`aeon fork ID [--from-pass K] [--rules FILE] [--plan FILE] [--json]`: start a fork of a run
(docs/forks.md) on the deployment's Redis, wait for its answer and print it as `aeon ask` does.

The fork takes the run's recorded replies before pass K (every pass without `--from-pass`) with
no LLM call, and goes on with the rules or the plan given. A run that cannot be forked (unknown,
expired, its replies gone past AEON_FORK_KEEP_S) is one line and exit 2, as any bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import AnswerTimeout, BadInput
from aeonloop.gateway.client import ANSWER_GRACE_S, DEFAULT_TIMEOUT_S, AeonClient
from aeonloop.gateway.progress import Progress
from aeonloop.gateway.validation import as_option, check_timeout, load_rules, read_json_file
from aeonloop.limits import MAX_TTL_CAP
from aeonloop.phases import approvals
from aeonloop.phases.events import ExecutionResult, Fork
from aeonloop.phases.models import Plan

#: How `aeon ask` prints a result and picks its exit code (main._print_result), handed over by
#: main, which imports this module (so this one may not import it back).
ShowResult = Callable[[ExecutionResult | None, str, bool], int]


def add_commands(
    commands: argparse._SubParsersAction, command: Callable[..., Any], show: ShowResult
) -> None:
    p = command(
        commands,
        "fork",
        fork,
        "fork a run: its recorded replies up to a pass, then other rules or another plan",
        "WARNING",
    )
    p.set_defaults(show_result=show)
    p.add_argument("correlation_id", metavar="ID", help="the run to fork")
    p.add_argument(
        "--from-pass",
        metavar="K",
        type=as_option(_a_pass, int, "a whole number of passes"),
        help="the first pass made anew: the replies before it are the run's (default: every "
        "pass is the run's; with no change at all, its answer too)",
    )
    p.add_argument("--rules", metavar="FILE", help="JSON file of rules in place of the run's")
    p.add_argument(
        "--plan",
        metavar="FILE",
        help='run this plan instead of writing one: {"goal", "steps"} (every pass anew)',
    )
    p.add_argument(
        "--timeout",
        type=as_option(check_timeout, float, "a number of seconds"),
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds, at most a week ({DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")


async def fork(args: argparse.Namespace) -> int:
    """Fork the run, say the fork's id, wait for its answer and print it (exit codes as
    `aeon ask`'s: 0 answered, 1 degraded, 3 no answer within the timeout)."""
    settings: BusSettings = args.settings
    if not settings.redis_url:
        raise BadInput("`aeon fork` needs AEON_REDIS_URL: the server the run went to")
    rules = load_rules(args.rules) if args.rules else None
    plan = _read_plan(args.plan) if args.plan else None
    async with AeonClient(settings=settings) as client:
        correlation_id = await client.fork(
            args.correlation_id,
            from_pass=args.from_pass,
            rules=rules,
            plan=plan,
            timeout=args.timeout,
            on_progress=_show_progress,
        )
        _status(f"fork {correlation_id} of {args.correlation_id} submitted")
        try:
            result = await client.wait(correlation_id, args.timeout + ANSWER_GRACE_S)
        except AnswerTimeout as error:
            _status(str(error))
            result = None
    return args.show_result(result, correlation_id, args.json)


def lineage_line(fork: Fork) -> str:
    """How `aeon answer` says a run is a fork: of which run, from where."""
    where = f" from pass {fork.from_pass}" if fork.from_pass is not None else ""
    return f"forked from {fork.parent}{where}"


def _read_plan(path: str) -> Plan:
    return approvals.edited_plan(read_json_file(path, "--plan"))


def _a_pass(value: int) -> int:
    if not 1 <= value <= MAX_TTL_CAP:
        raise BadInput(f"{value} is not a pass: 1 to {MAX_TTL_CAP}")
    return value


def _show_progress(progress: Progress) -> None:
    _status(progress.line)


def _status(line: str) -> None:
    print(f"aeon: {line}", file=sys.stderr, flush=True)
