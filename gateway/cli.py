"""The `aeon` command: ask, answer, worker, dlq, bench.

Exit codes (README, CLI):
    0  answered            1  answered, degraded (the loop did not converge or something failed)
    2  bad input           3  no answer in time (the correlation id is printed to fetch it later)
    4  Redis unreachable
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence

from redis.exceptions import ConnectionError as RedisConnectionError

from bus.connection import connect
from bus.settings import BusSettings, redact
from bus.worker import tune_gc
from gateway import dlq
from gateway.client import ANSWER_GRACE_S, AeonClient, AnswerTimeout
from gateway.display import render_human, render_json
from gateway.embedded import embedded_pipeline
from gateway.progress import describe
from gateway.validation import BadInput, check_request, load_rules
from llm.factory import LLMSettings, build_adapter
from phases.events import Event, ExecutionResult
from phases.worker import PHASES, make_worker

EXIT_ANSWERED = 0
EXIT_DEGRADED = 1
EXIT_BAD_INPUT = 2
EXIT_TIMEOUT = 3
EXIT_UNAVAILABLE = 4

log = logging.getLogger("aeon")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("AEON_LOG_LEVEL", args.default_log_level).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return _run(args.command(args))
    except BadInput as error:
        print(f"aeon: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RedisConnectionError, OSError) as error:
        settings = BusSettings.from_env()
        where = redact(settings.redis_url or "the embedded Redis")
        print(f"aeon: cannot reach Redis at {where}: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        return 130


def _run(work: Awaitable[int]) -> int:
    try:
        import uvloop

        return uvloop.run(work)
    except ImportError:  # uvloop is optional (not built for Windows)
        return asyncio.run(work)


# -- ask / answer ---------------------------------------------------------------------------


async def ask(args: argparse.Namespace) -> int:
    request = check_request(args.request)
    rules = load_rules(args.rules) if args.rules else []
    settings = BusSettings.from_env()
    if settings.redis_url:
        return await _ask_on(settings, request, rules, args)
    llm = build_adapter(LLMSettings.from_env())
    try:
        async with embedded_pipeline(settings, llm) as embedded:
            return await _ask_on(embedded, request, rules, args, embedded=True)
    finally:
        await llm.aclose()


async def _ask_on(
    settings: BusSettings,
    request: str,
    rules: list,
    args: argparse.Namespace,
    embedded: bool = False,
) -> int:
    async with AeonClient(settings=settings) as client:
        correlation_id = await client.submit(
            request,
            rules=rules,
            max_ttl=args.max_ttl,
            timeout=args.timeout,
            on_progress=_print_progress,
        )
        _status(f"request {correlation_id} submitted")
        try:
            result = await client.wait(correlation_id, args.timeout + ANSWER_GRACE_S)
        except AnswerTimeout as error:
            lost = " (the embedded Redis goes away with this process)" if embedded else ""
            _status(f"{error}{lost}")
            return EXIT_TIMEOUT
    return _print_result(result, correlation_id, args.json)


async def answer(args: argparse.Namespace) -> int:
    settings = BusSettings.from_env()
    if not settings.redis_url:
        raise BadInput("`aeon answer` needs AEON_REDIS_URL: the server the request went to")
    async with AeonClient(settings=settings) as client:
        result = await client.fetch(args.correlation_id)
    if result is None:
        _status(f"no answer stored for {args.correlation_id} (not finished, expired or unknown)")
    return _print_result(result, args.correlation_id, args.json)


def _print_result(result: ExecutionResult | None, correlation_id: str, as_json: bool) -> int:
    data = result.model_dump(mode="json") if result else None
    print(render_json(data, correlation_id) if as_json else render_human(data))
    if result is None:
        return EXIT_TIMEOUT
    return EXIT_DEGRADED if result.degraded else EXIT_ANSWERED


def _print_progress(event: Event) -> None:
    line = describe(event)
    if line:
        _status(line)


def _status(line: str) -> None:
    print(f"aeon: {line}", file=sys.stderr, flush=True)


# -- worker ---------------------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> int:
    settings = BusSettings.from_env()
    if args.concurrency:
        settings = settings.with_(concurrency=args.concurrency)
    if not settings.redis_url:
        raise BadInput("`aeon worker` needs AEON_REDIS_URL (the Redis the gateways publish to)")
    llm = build_adapter(LLMSettings.from_env())
    phases = args.phase or PHASES
    redis = connect(settings, consumers=len(phases))
    try:
        await redis.ping()
        running = make_worker(redis, settings, llm, phases)
        tune_gc()
        _stop_on_signals(running.stop)
        try:
            await running.run()
        except asyncio.CancelledError:
            log.warning("stopped by a second signal; unfinished events stay pending")
            return 1
        log.info("worker stopped cleanly")
        return 0
    finally:
        await llm.aclose()
        await redis.aclose()


def _stop_on_signals(stop: Callable[[], None]) -> None:
    """First SIGTERM/SIGINT: drain and exit. A second one: exit now (Redis may be down)."""
    main = asyncio.current_task()
    signals: list[int] = []

    def on_signal(number: int) -> None:
        signals.append(number)
        if len(signals) == 1:
            stop()
        elif main is not None:
            main.cancel()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)


# -- parser ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aeon",
        description="Multi-pass LLM reasoning over Redis Streams.",
        epilog="Exit codes: 0 answered, 1 degraded answer, 2 bad input, 3 timed out, "
        "4 Redis unreachable. Configuration comes from AEON_* environment variables.",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    p = _command(commands, "ask", ask, "ask a question and wait for the final answer", "WARNING")
    p.add_argument("request", help="the request, in natural language")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--rules", metavar="FILE", help="JSON file of rules the answer must meet")
    p.add_argument("--max-ttl", type=_positive_int, default=10, help="cap on passes (10)")
    p.add_argument("--timeout", type=_positive_float, default=300.0, help="seconds (300)")

    p = _command(commands, "answer", answer, "fetch the stored answer of a request", "WARNING")
    p.add_argument("correlation_id")
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = _command(commands, "worker", worker, "run phase consumers until SIGTERM", "INFO")
    p.add_argument(
        "--phase", action="append", choices=PHASES, help="a phase to run (repeat; default all)"
    )
    p.add_argument("--concurrency", type=_positive_int, help="events in flight per phase")

    dlq.add_commands(commands, _command)
    return parser


Command = Callable[[argparse.Namespace], Awaitable[int]]


def _command(
    commands: argparse._SubParsersAction,
    name: str,
    run: Command,
    help_text: str,
    log_level: str,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(command=run, default_log_level=log_level)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value
