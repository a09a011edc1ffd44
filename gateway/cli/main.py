"""The `aeon` command: ask, answer, fork, worker, serve, mcp, dlq, status, usage, asyncapi.

Exit codes: EXIT_CODES below, which `aeon --help` lists; docs/cli.md ("Exit codes") says
when each is used, and tests/test_readme.py keeps the two alike.

Every failure is one line on stderr naming what is wrong and what to do; never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NoReturn

from aeonloop import __version__
from aeonloop.bus import redis_errors
from aeonloop.bus.connection import RedisClient, connect
from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings, redact
from aeonloop.bus.worker import tune_gc
from aeonloop.contracts import AttachedFile
from aeonloop.exceptions import (
    AnswerTimeout,
    BadInput,
    LLMNotReady,
    LocalRedisError,
    SettingsError,
    UsageError,
)
from aeonloop.gateway.cli import dlq, fork, quality, status, usage
from aeonloop.gateway.cli.display import render_human, render_json, webhook_line
from aeonloop.gateway.client import ANSWER_GRACE_S, DEFAULT_TIMEOUT_S, AeonClient, Progress
from aeonloop.gateway.embedded import embedded_pipeline
from aeonloop.gateway.http import serve
from aeonloop.gateway.http.run_feed import RunFeed
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.progress import SET_ASIDE_WORDS, Silence, progress_of
from aeonloop.gateway.validation import (
    FileSettings,
    RequestLimits,
    TurnSettings,
    as_option,
    check_timeout,
    check_token_budget,
    check_tools,
    checked_request,
    load_rules,
    port_option,
    read_files,
    read_json_file,
    unknown_tools,
)
from aeonloop.limits import EFFORTS, MAX_REQUEST_CHARS, LoopSettings
from aeonloop.llm.base import LLMAdapter
from aeonloop.llm.factory import LLMSettings, ready_adapter
from aeonloop.phases import approvals, render
from aeonloop.phases.events import ExecutionResult, WebhookSettled
from aeonloop.phases.worker import PHASES, make_worker
from aeonloop.runs.answer_text import DELTA, RESET, TextEntry
from aeonloop.runs.cancels import CancelOutcome
from aeonloop.settings import AeonSettings, LogSettings, TenantSettings, core_lines, notices
from aeonloop.telemetry import metrics, tracing
from aeonloop.telemetry.metrics import MetricsSettings
from aeonloop.telemetry.tracing import TracingSettings
from aeonloop.tools.base import Toolbox
from aeonloop.tools.config import ToolSettings
from aeonloop.tools.toolbox import open_toolbox
from aeonloop.webhooks.delivery import worker_routes
from aeonloop.webhooks.policy import WebhookSettings

EXIT_ANSWERED = 0
EXIT_DEGRADED = 1
EXIT_BAD_INPUT = 2
EXIT_TIMEOUT = 3
EXIT_UNAVAILABLE = 4
EXIT_ATTENTION = status.EXIT_ATTENTION  # 5
EXIT_LLM_UNAVAILABLE = 6
#: Stopped by signal N exits with 128 + N, as shells report it.
EXIT_SIGNAL_BASE = 128
#: Every exit code with its meaning, for `aeon --help` (docs/cli.md, "Exit codes", says the same
#: at length; tests/test_readme.py keeps the two alike).
EXIT_CODES = (
    (str(EXIT_ANSWERED), "answered"),
    (str(EXIT_DEGRADED), "answered, degraded (the loop did not converge, or something failed)"),
    (str(EXIT_BAD_INPUT), "bad input, option or setting: nothing was published"),
    (str(EXIT_TIMEOUT), "no answer within the timeout (`aeon answer ID` fetches it later)"),
    (str(EXIT_UNAVAILABLE), "Redis unreachable or refusing writes"),
    (str(EXIT_ATTENTION), "`aeon status`: the deployment needs attention"),
    (str(EXIT_LLM_UNAVAILABLE), "the LLM server does not answer, or does not serve the model"),
    (f"{EXIT_SIGNAL_BASE}+N", "stopped by signal N (130 for Ctrl-C, 143 for SIGTERM)"),
)
#: Every settings group a command reads: the core of them is `aeon --help`'s, and an AEON_*
#: variable none of them reads is taken for a typo (settings.notices).
SETTINGS: tuple[type[AeonSettings], ...] = (
    BusSettings,
    LLMSettings,
    LoopSettings,
    LogSettings,
    HttpSettings,
    TenantSettings,
    WebhookSettings,
    FileSettings,
    TurnSettings,
    ToolSettings,
    MetricsSettings,
    TracingSettings,
)

log = logging.getLogger("aeon")
#: How often `aeon ask --approve-plan` looks whether its run has paused for approval.
_PAUSE_POLL_S = 0.2
#: How long its question waits, once the run has paused, for the run's earlier progress lines.
_LINES_WAIT_S = 5.0
#: How long `aeon ask` waits, once the answer is in, to read the end of its text as written
#: (settled before the answer was published: one poll away).
_TEXT_SETTLED_S = 2.0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # a bad option: one line and exit 2 (see _Parser)
    try:  # every variable is read now, so a mistake is reported whatever the command
        asked_level = LogSettings.from_env().log_level
        level = asked_level or args.default_log_level
        args.settings = BusSettings.from_env()
        args.llm = LLMSettings.from_env()
        args.loop = LoopSettings.from_env()
        args.metrics = MetricsSettings.from_env()
        args.http = HttpSettings.from_env()
        args.tracing = TracingSettings.from_env()
        args.file_limits = FileSettings.from_env()
        args.tools = ToolSettings.from_env()
        tracing.setup(args.tracing, f"aeon-{args.command_name}")
    except SettingsError as error:
        return _fail(str(error), EXIT_BAD_INPUT)
    logging.basicConfig(level=level, format=_log_format(args, asked_level), stream=sys.stderr)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # The openai client's HTTP library logs every request at INFO: a line per LLM call.
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).setLevel(logging.WARNING)
    for line in notices(os.environ, SETTINGS):  # a typo, a former name: said, then run
        log.warning(line)
    try:
        return _run(args.command(args))
    except UsageError as error:  # a setting, an option or the input
        return _fail(str(error), EXIT_BAD_INPUT)
    except LLMNotReady as error:
        return _fail(str(error), EXIT_LLM_UNAVAILABLE)
    except LocalRedisError as error:  # the embedded Redis
        first = str(error).splitlines()[0]
        return _fail(f"cannot start the embedded Redis: {first}", EXIT_UNAVAILABLE)
    except redis_errors.FAILURES as error:
        if redis_errors.not_redis(error):  # a wrong setting, not an outage
            return _fail(_not_redis(args.settings, error), EXIT_BAD_INPUT)
        return _fail(_redis_trouble(args.settings, error), EXIT_UNAVAILABLE)
    except KeyboardInterrupt:
        return EXIT_SIGNAL_BASE + signal.SIGINT
    finally:
        tracing.flush_at_exit()


def _fail(message: str, code: int) -> int:
    print(f"aeon: {message}", file=sys.stderr)
    return code


def _not_redis(settings: BusSettings, error: BaseException) -> str:
    """One line for a URL whose server does not speak Redis's protocol (an HTTP server, say)."""
    url = redact(settings.redis_url or "")
    return (
        f"AEON_REDIS_URL={url!r} did not answer as a Redis server "
        f"({redis_errors.said(error)}): it points at another kind of server; set it to your "
        "Redis server's URL, e.g. redis://localhost:6379/0"
    )


def _redis_trouble(settings: BusSettings, error: BaseException) -> str:
    """One line saying what Redis did and what to do about it."""
    url = settings.redis_url
    where = f"Redis at {redact(url)}" if url else "the embedded Redis"
    said = redis_errors.said(error)
    if redis_errors.refuses_writes(error):
        return (
            f"{where} refuses writes ({said}): free memory or raise its maxmemory, then try "
            "again; nothing of this command was stored"
        )
    if redis_errors.cluster_unusable(error):
        single = redis_errors.cluster_not_enabled(error)
        hint = "; it is a single server: set AEON_REDIS_CLUSTER=auto" if single else ""
        return f"the Redis Cluster at {redact(url or '')} is not usable: {said}{hint}"
    if not redis_errors.unreachable(error):
        return f"{where} answered with an error: {said}"
    hint = "is it running, and is AEON_REDIS_URL right?"
    if url and url.startswith("rediss://") and redis_errors.timed_out(error):
        hint = "rediss:// needs a server that speaks TLS; use redis:// for one that does not"
    return f"cannot reach {where}: {said}; {hint}"


def _run(work: Awaitable[int]) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not built for Windows)
        return asyncio.run(work)
    return uvloop.run(work)


# -- ask / answer ---------------------------------------------------------------------------


async def ask(args: argparse.Namespace) -> int:
    """Publish one request and wait for its answer; with no AEON_REDIS_URL, on a private stack."""
    # Checked as submit checks it, but before anything starts (the embedded stack, the model).
    limits = RequestLimits(args.loop.max_passes, WebhookSettings.from_env(), args.file_limits)
    request = checked_request(
        limits,
        _request_text(args.request),
        max_ttl=args.max_ttl,
        timeout=args.timeout,
        token_budget=args.token_budget,
        webhook_url=args.webhook_url,
        tools=args.tool_names,
        names={"webhook_url": "--webhook-url"},
    )["request"]
    rules = load_rules(args.rules) if args.rules else []
    files = read_files(args.file, args.file_limits)
    settings: BusSettings = args.settings
    if args.follow_up is not None:
        _request_server(args, "ask --continue")  # the embedded stack keeps no run to follow
    # Cancelling tears down everything the command started, the embedded Redis included.
    task = asyncio.current_task()
    signals = _on_signals(task.cancel if task else lambda: None)
    try:
        if settings.redis_url:
            return await _ask_on(settings, request, rules, files, args)
        llm = await ready_adapter(args.llm)
        try:
            async with (
                open_toolbox(args.tools) as tools,
                embedded_pipeline(settings, llm, args.loop, tools) as embedded,
            ):
                unknown_tools(args.tool_names, [spec.name for spec in tools.specs()])
                return await _ask_on(embedded, request, rules, files, args, embedded=True)
        finally:
            await llm.aclose()
    except asyncio.CancelledError:
        if not signals:
            raise
        return EXIT_SIGNAL_BASE + signals[0]


def _request_text(given: str | None) -> str:
    """The request as given, or read from stdin for `-` and when none is given and stdin is not
    a terminal: a request longer than an argument may be, or piped from another command."""
    if given is not None and given != "-":
        return given
    if given is None and sys.stdin.isatty():
        raise BadInput('no request: give it, e.g. aeon ask "Explain tides", or pipe it in')
    # Bytes as UTF-8, binary kept as surrogates for check_request to refuse; a bound on what is
    # read, so a stream of any length is refused as long without being held whole.
    limit = 4 * MAX_REQUEST_CHARS + 1
    data = sys.stdin.buffer.read(limit)
    if len(data) >= limit:
        raise BadInput(f"the request on stdin is over the {MAX_REQUEST_CHARS:,}-character limit")
    return data.decode("utf-8", errors="surrogateescape")


async def _ask_on(
    settings: BusSettings,
    request: str,
    rules: list,
    files: list[AttachedFile],
    args: argparse.Namespace,
    embedded: bool = False,
) -> int:
    limits = args.file_limits
    # On a terminal the answer is printed as it is written; piped, whole at the end, as before.
    written = _Written() if sys.stdout.isatty() and not args.json else None
    shown = _Shown(written)
    async with AeonClient(settings=settings, loop=args.loop, file_limits=limits) as client:
        turns = await client.follow_up(args.follow_up) if args.follow_up is not None else []
        correlation_id = await client.submit(
            request,
            rules=rules,
            max_ttl=args.max_ttl,
            effort=args.effort,
            timeout=args.timeout,
            on_progress=shown,
            token_budget=args.token_budget,
            approve_plan=args.approve_plan,
            files=files,
            tools=args.tool_names,
            webhook_url=args.webhook_url,
            messages=turns,
        )
        _status(f"request {correlation_id} submitted")
        following = (
            asyncio.create_task(client.follow_text(correlation_id, written)) if written else None
        )
        # Not while a person reviews the plan: the question waits on them, not on the model.
        waiting = asyncio.create_task(shown.waiting() if not args.approve_plan else _never())
        try:
            if args.approve_plan:
                await _review_plan(client, correlation_id, args.timeout, shown)
            try:
                result = await client.wait(correlation_id, args.timeout + ANSWER_GRACE_S)
            except AnswerTimeout as error:
                lost = " (the embedded Redis goes away with this process)" if embedded else ""
                if written is not None:
                    written.end()
                _status(f"{error}{lost}")
                return EXIT_TIMEOUT
            if following:  # settled just before the answer was published: read in a moment
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(following, _TEXT_SETTLED_S)
        finally:
            waiting.cancel()
            if following:
                following.cancel()
    answered = written is not None and written.finish(result.final_answer.answer_text)
    return _print_result(result, correlation_id, args.json, written=answered)


class _Written:
    """`aeon ask`'s answer on a terminal, printed as it is written (runs.answer_text): each
    piece as it comes, after `Answer: `; when the text so far is set aside, a line saying so,
    and the next text starts over.

    Progress lines (stderr) and the answer (stdout) share the terminal, and come from two
    readers that do not wait for each other: a line printed while the answer's is open landed
    inside it (`...work.aeon: A  profiled...`, issue 41). So a progress line that comes while
    the answer is being written is held (`status`), and printed once its line ends."""

    def __init__(self) -> None:
        #: The text printed since the last line saying it was set aside.
        self.text = ""
        self._open = False
        self._held: list[str] = []

    def __call__(self, entry: TextEntry) -> None:
        if entry.kind == DELTA:
            if not self._open:
                print("Answer: ", end="")
                self._open = True
            print(entry.text, end="", flush=True)
            self.text += entry.text
        elif entry.kind == RESET and self._open:
            self.end(SET_ASIDE_WORDS)
            self.text = ""

    def status(self, line: str) -> None:
        """Print a progress line now, or once the answer's line ends if it is open."""
        if self._open:
            self._held.append(line)
        else:
            _status(line)

    def finish(self, published: str) -> bool:
        """End the answer's line; whether what was printed is the published answer (it is,
        once the run's text is settled), so the rest of the result follows without it."""
        if not self._open:
            self._release()
            return False
        same = self.text == published
        self.end(None if same else SET_ASIDE_WORDS)
        return same

    def end(self, then: str | None = None) -> None:
        """End the answer's line if it is open (with the line `then` after it), and print the
        progress lines held meanwhile."""
        if self._open:
            print(flush=True)
            if then is not None:
                print(then, flush=True)
            self._open = False
        self._release()

    def _release(self) -> None:
        held, self._held = self._held, []
        for line in held:
            _status(line)


async def _never() -> None:
    await asyncio.Event().wait()


class _Shown:
    """`aeon ask`'s progress callback: prints each line (through `written`, the answer being
    written on the terminal, when there is one), and notes which phases it has shown; between
    them, while nothing comes, what the run waits for (`waiting`)."""

    def __init__(self, written: _Written | None = None) -> None:
        self.phases: set[str] = set()
        self._written = written
        self.silence = Silence()

    def __call__(self, progress: Progress) -> None:
        self.phases.add(progress.phase)
        self.silence.heard(progress.phase)
        self._say(progress.line)

    async def waiting(self) -> None:
        """Say what the run waits for every WAITING_EVERY_S nothing comes; cancel it to stop."""
        while True:
            await asyncio.sleep(self.silence.next_in())
            line = self.silence.due()
            if line is not None:
                self._say(line)

    def _say(self, line: str) -> None:
        if self._written is not None:
            self._written.status(line)
        else:
            _status(line)


async def _review_plan(
    client: AeonClient, correlation_id: str, timeout: float, shown: _Shown
) -> None:
    """`aeon ask --approve-plan`: once the run pauses, show its plan and ask on the terminal;
    yes approves it, anything else cancels the run. With no answer to read (stdin closed), the
    run waits for `aeon approve` from elsewhere.

    The pause is found by polling, which may beat the reader of the progress streams to A's
    line: the question waits for that line (_LINES_WAIT_S at most: it must not hang on a line
    that was lost), and prints B's itself (the paused plan is on no stream this client reads),
    so the lines come in the run's order."""
    deadline = time.monotonic() + timeout
    while (paused := await client.awaiting(correlation_id)) is None:
        if time.monotonic() > deadline or await client.fetch(correlation_id) is not None:
            return
        await asyncio.sleep(_PAUSE_POLL_S)
    waited = time.monotonic() + _LINES_WAIT_S
    while "A" not in shown.phases and time.monotonic() < waited:
        await asyncio.sleep(_PAUSE_POLL_S / 4)
    assert paused.run.plan is not None  # Phase B pauses a run only with its plan
    for progress in progress_of(paused):
        shown(progress)
    _status(f"the plan, awaiting your approval:\n{render.plan_text(paused.run.plan)}")
    print("aeon: approve this plan? [y/N] ", end="", file=sys.stderr, flush=True)
    reply = await asyncio.to_thread(sys.stdin.readline)
    if not reply:
        _status(f"no answer read; approve it with `aeon approve {correlation_id}`")
    elif reply.strip().lower() in ("y", "yes"):
        approved = await client.approve(correlation_id)
        _status("plan approved" if approved else "the run no longer awaits approval")
    else:
        await client.cancel(correlation_id)
        _status("plan rejected: the run is cancelled")


async def approve(args: argparse.Namespace) -> int:
    """Approve a paused run's plan (or put the plan in FILE in its place): 0 approved, 1 when
    the run is not awaiting approval."""
    settings = _request_server(args, "approve")
    plan = approvals.edited_plan(read_json_file(args.plan, "--plan")) if args.plan else None
    async with AeonClient(settings=settings) as client:
        approved = await client.approve(args.correlation_id, plan)
    if not approved:
        _status(
            f"{args.correlation_id} is not awaiting approval (not yet, or no longer: approved, "
            "cancelled, or past its deadline)"
        )
        return EXIT_DEGRADED
    _status(f"plan of {args.correlation_id} approved{' as edited' if plan else ''}: it runs on")
    return EXIT_ANSWERED


def _request_server(args: argparse.Namespace, command: str) -> BusSettings:
    """The bus settings of a command about a request already sent, which needs its Redis."""
    settings: BusSettings = args.settings
    if not settings.redis_url:
        raise BadInput(f"`aeon {command}` needs AEON_REDIS_URL: the server the request went to")
    return settings


async def answer(args: argparse.Namespace) -> int:
    """Print a stored answer, and what became of the run's webhook once that is known."""
    settings = _request_server(args, "answer")
    async with AeonClient(settings=settings) as client:
        result = await client.fetch(args.correlation_id)
        webhook = await client.webhook(args.correlation_id) if result else None
        forked = await client.lineage(args.correlation_id) if result else None
    if result is None:
        _status(f"no answer stored for {args.correlation_id} (not finished, expired or unknown)")
    if forked is not None:
        _status(fork.lineage_line(forked))
    if webhook is not None and not args.json:
        _status(webhook_line(webhook))
    return _print_result(result, args.correlation_id, args.json, webhook)


async def cancel(args: argparse.Namespace) -> int:
    """Cancel a run: 0 when the cancel is recorded, 1 when the run already has its answer, 2
    (nothing written) when Aeon knows no such run (the HTTP API's 404: RunFeed.known)."""
    settings = _request_server(args, "cancel")
    async with AeonClient(settings=settings) as client:
        feed = RunFeed(client.runs)
        if not await feed.known(args.correlation_id, scan_limit=None):
            raise BadInput(
                f"no run {args.correlation_id}: unknown here, or its answer expired (answers "
                "are kept AEON_ANSWER_TTL_S) and its events are gone; nothing was cancelled"
            )
        outcome = await client.cancel(args.correlation_id)
    if outcome is CancelOutcome.ANSWERED:
        _status(f"{args.correlation_id} already has its answer; nothing to cancel")
        return EXIT_DEGRADED
    _status(
        f"cancel of {args.correlation_id} recorded: it stops at its next step and is answered "
        "`cancelled` (aeon answer shows it)"
    )
    return EXIT_ANSWERED


def _print_result(
    result: ExecutionResult | None,
    correlation_id: str,
    as_json: bool,
    webhook: WebhookSettled | None = None,
    written: bool = False,
) -> int:
    """Print the result (`written`: its answer's text is printed already, as it was written)."""
    data = result.model_dump(mode="json") if result else None
    told = webhook.model_dump(mode="json") if webhook else None
    human = render_human(data, written=written)
    print(render_json(data, correlation_id, told) if as_json else human)
    if result is None:
        return EXIT_TIMEOUT
    return EXIT_DEGRADED if result.degraded else EXIT_ANSWERED


def _status(line: str) -> None:
    print(f"aeon: {line}", file=sys.stderr, flush=True)


async def mcp(args: argparse.Namespace) -> int:
    """`aeon mcp`: Aeon as an MCP server over stdio (gateway.mcp_server); the SDK is loaded
    only for this command."""
    from aeonloop.gateway.mcp_server import serve_stdio

    return await serve_stdio(args)


# -- worker ---------------------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> int:
    settings: BusSettings = args.settings
    if args.concurrency:
        settings = settings.with_(concurrency=args.concurrency)
    if not settings.redis_url:
        raise BadInput("`aeon worker` needs AEON_REDIS_URL (the Redis the gateways publish to)")
    observing = args.metrics
    if args.metrics_port:
        observing = observing.with_(metrics_port=args.metrics_port)
    llm = await ready_adapter(args.llm)
    try:
        async with open_toolbox(args.tools) as tools:
            return await _work(args, settings, observing, llm, tools)
    finally:
        await llm.aclose()


async def _work(
    args: argparse.Namespace,
    settings: BusSettings,
    observing: MetricsSettings,
    llm: LLMAdapter,
    tools: Toolbox,
) -> int:
    """The worker's run, once its LLM and tools are ready: until a signal stops it."""
    phases = args.phase or PHASES
    redis = await connect(settings, consumers=len(phases) * settings.shards)
    sampling: list[asyncio.Task[None]] = []
    try:
        await redis.ping()
        metrics.serve(observing)  # before the consumers exist: they bind their series
        running = make_worker(
            redis, settings, llm, phases, args.loop, tools=tools, routes=worker_routes
        )
        if metrics.enabled():
            sampling = _sample_metrics(redis, settings, observing)
        tune_gc()
        _on_signals(running.stop)  # first: drain and exit
        try:
            await running.run()
        except asyncio.CancelledError:
            log.warning("stopped by a second signal; unfinished events stay pending")
            return 1
        log.info("worker stopped cleanly")
        return 0
    finally:
        for task in sampling:
            task.cancel()
        await asyncio.gather(*sampling, return_exceptions=True)
        await redis.aclose()


def _sample_metrics(
    redis: RedisClient, settings: BusSettings, observing: MetricsSettings
) -> list[asyncio.Task[None]]:
    """The worker's background readings for /metrics: the event loop's lag, and what
    `aeon status` reads from Redis (lag, pending, dead letters) every AEON_METRICS_SAMPLE_S."""
    keys = Keys(settings.prefix, settings.shards)

    def read() -> Awaitable[dict]:
        return status.read_status(redis, keys, settings.claim_idle_ms)

    tasks = [asyncio.create_task(metrics.watch_loop_lag(), name="loop-lag")]
    if observing.metrics_sample_s:  # 0: another worker samples the deployment
        sampler = metrics.sample_status(read, observing.metrics_sample_s)
        tasks.append(asyncio.create_task(sampler, name="metrics-sample"))
    return tasks


async def asyncapi(args: argparse.Namespace) -> int:
    """Generated by FastStream from the declarations FastStream apps use (imported here only:
    no other command needs FastStream)."""
    from aeonloop.gateway.faststream_interop import asyncapi_json

    document = asyncapi_json(args.settings)
    if args.out:
        try:
            Path(args.out).write_text(document + "\n", encoding="utf-8")
        except OSError as error:
            raise BadInput(f"cannot write {args.out}: {error.strerror}") from None
    else:
        print(document)
    return 0


def _on_signals(first: Callable[[], None]) -> list[int]:
    """SIGTERM/SIGINT: the first calls `first`, a later one cancels the command now (Redis
    may be down). Returns the signals received, in order."""
    main = asyncio.current_task()
    received: list[int] = []

    def on_signal(number: int) -> None:
        received.append(number)
        if len(received) == 1:
            first()
        elif main is not None:
            main.cancel()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    return received


# -- parser ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line naming the command, exit 2 (not usage + message)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _names(text: str) -> list[str]:
    """`--tools a,b`: the names, without blanks ("" names none)."""
    return [name for name in (part.strip() for part in text.split(",")) if name]


def _epilog() -> str:
    """The core settings and the exit codes, each with its line, from where they are defined."""

    def table(title: str, rows: Sequence[tuple[str, str]]) -> list[str]:
        width = max(len(name) for name, _ in rows) + 2
        indent = " " * (width + 2)
        return [title] + [
            textwrap.fill(
                line,
                79,
                initial_indent=f"  {name:<{width}}",
                subsequent_indent=indent,
                break_on_hyphens=False,
            )
            for name, line in rows
        ]

    return "\n".join(
        [
            *table(
                "core settings (environment variables; all of them: docs/configuration.md):",
                core_lines(SETTINGS),
            ),
            "",
            *table("exit codes (docs/cli.md#exit-codes):", EXIT_CODES),
        ]
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="aeon",
        description="Multi-pass LLM reasoning over Redis Streams.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aeon {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    p = _command(commands, "ask", ask, "ask a question and wait for the final answer", "WARNING")
    p.add_argument(
        "request",
        nargs="?",
        help="the request, in natural language; - (or none, with stdin not a terminal) reads "
        "it from stdin",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--rules", metavar="FILE", help="JSON file of rules the answer must meet")
    p.add_argument(
        "--file",
        metavar="PATH",
        action="append",
        default=[],
        help="a text file the plan, steps and answer are given as context (repeat for more; "
        "AEON_MAX_FILES, AEON_MAX_FILE_BYTES and AEON_MAX_FILES_BYTES limit them)",
    )
    p.add_argument(
        "--continue",
        metavar="ID",
        dest="follow_up",
        help="ask a follow-up to the stored run ID: its request and answer (and the turns it "
        "followed) become the earlier turns of this one (needs AEON_REDIS_URL; "
        "AEON_MAX_TURNS and AEON_MAX_TURNS_CHARS limit them)",
    )
    p.add_argument(
        "--tools",
        metavar="NAMES",
        dest="tool_names",
        type=as_option(check_tools, _names, "a comma-separated list of tool names"),
        help="the tools the run's steps may call, comma-separated (default: every tool of "
        "AEON_MCP_CONFIG's servers; an empty list: none)",
    )
    p.add_argument(
        "--max-ttl",
        metavar="N",
        type=as_option(_at_least_one, int, "a whole number of passes"),
        help="cap on passes, 1 to AEON_MAX_PASSES (default: AEON_MAX_PASSES, itself 8 by default)",
    )
    p.add_argument(
        "--effort",
        choices=EFFORTS,
        help="how hard the run works: low (one call's answer, repaired, rewritten once), medium "
        "(the loop where it adds something) or high (the loop always) (default: AEON_EFFORT, "
        "itself medium by default)",
    )
    p.add_argument(
        "--timeout",
        type=as_option(check_timeout, float, "a number of seconds"),
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds, at most a week ({DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--token-budget",
        metavar="N",
        type=as_option(check_token_budget, int, "a whole number of tokens"),
        help="the most tokens the run's LLM calls may spend (default: AEON_RUN_TOKEN_BUDGET, "
        "unset: no cap)",
    )
    p.add_argument(
        "--approve-plan",
        action="store_true",
        help="show the plan once it is made and ask on the terminal before it runs",
    )
    p.add_argument(
        "--webhook-url",
        metavar="URL",
        help="POST the answer here when the run ends, signed (needs AEON_WEBHOOK_SECRET and "
        "AEON_WEBHOOK_ALLOWED_HOSTS allowing it)",
    )

    p = _command(commands, "answer", answer, "fetch the stored answer of a request", "WARNING")
    p.add_argument("correlation_id")
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = _command(commands, "cancel", cancel, "cancel a run; it is answered `cancelled`", "WARNING")
    p.add_argument("correlation_id")

    p = _command(commands, "approve", approve, "approve a paused run's plan", "WARNING")
    p.add_argument("correlation_id")
    p.add_argument("--plan", metavar="FILE", help='run this plan instead: {"goal", "steps"}')

    p = _command(commands, "worker", worker, "run phase consumers until SIGTERM", "INFO")
    p.add_argument(
        "--phase", action="append", choices=PHASES, help="a phase to run (repeat; default all)"
    )
    p.add_argument(
        "--concurrency",
        type=as_option(_at_least_one, int, "a whole number"),
        help="events in flight per phase",
    )
    p.add_argument(
        "--metrics-port",
        type=port_option(),
        help="serve Prometheus metrics on this port (AEON_METRICS_PORT)",
    )

    p = _command(
        commands,
        "mcp",
        mcp,
        "serve MCP over stdio: one tool, `ask` (for Claude Desktop, VS Code, ...)",
        "WARNING",
    )
    p.add_argument(
        "--timeout",
        type=as_option(check_timeout, float, "a number of seconds"),
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds each run the tool asks for may take, at most a week ({DEFAULT_TIMEOUT_S:g})",
    )

    serve.add_commands(commands, _command)
    dlq.add_commands(commands, _command)
    status.add_commands(commands, _command)
    quality.add_commands(commands, _command)
    usage.add_commands(commands, _command)
    fork.add_commands(commands, _command, _print_result)

    p = _command(
        commands,
        "asyncapi",
        asyncapi,
        "write the AsyncAPI 3.0 document of Aeon's streams",
        "WARNING",
    )
    p.add_argument("--out", metavar="FILE", help="write it to FILE (default: standard output)")
    return parser


Command = Callable[[argparse.Namespace], Awaitable[int]]

#: A service's log (worker, serve): when, how bad, and from where, for a log reader.
SERVICE_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: A command a person runs and reads (`aeon ask`, `aeon fork`, ...) says a warning as it says
#: its progress, `aeon: ...`: timestamped log lines mixed into `aeon ask`'s progress read as
#: noise from elsewhere (issue 41, finding 8).
PERSON_LOG_FORMAT = "aeon: %(levelname)s: %(message)s"


def _log_format(args: argparse.Namespace, asked_level: str | None) -> str:
    """The person's format for a command whose log is quiet by default (WARNING), unless
    AEON_LOG_LEVEL asks for a log: then the service's, which says when and from where."""
    person = args.default_log_level == "WARNING" and asked_level is None
    return PERSON_LOG_FORMAT if person else SERVICE_LOG_FORMAT


def _command(
    commands: argparse._SubParsersAction,
    name: str,
    run: Command,
    help_text: str,
    log_level: str,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(command=run, command_name=name, default_log_level=log_level)
    return parser


def _at_least_one(value: int) -> int:
    if value < 1:
        raise BadInput(f"{value} must be at least 1")
    return value
