"""`python -m bench`: run the benchmarks, print the table, write the JSON report.

    python -m bench [--quick | --smoke] [--redis-url URL] [--out PATH] [--only SECTIONS]
    python -m bench --only quality --llm-url URL --model NAME [--quality-cases N]
        [--quality-modes checks,words] [--quality-effort low,medium,high] [--quality-k N]
        [--quality-results PATH] [--quality-plot PATH]

Without --redis-url (or AEON_BENCH_REDIS_URL) it starts a throwaway redis-server of its own,
so a fresh checkout needs nothing but `pip install -e .`; the cluster section always starts a
throwaway Redis Cluster of its own, as it needs one. Exit status: 0 when every target
measured was met, 1 when one was missed, 2 when the benchmark itself failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aeonloop.bus.connection import connect
from aeonloop.bus.settings import BusSettings, redact
from aeonloop.gateway.cli.quality import choices_option
from aeonloop.gateway.quality.cases import MODES
from aeonloop.gateway.quality.paths import EFFORTS
from aeonloop.servers.embedded import RedisServer
from bench import eventloop
from bench.cluster import run_cluster
from bench.concurrency import run_concurrency
from bench.context import BenchContext
from bench.costs import run_costs
from bench.events import run_events
from bench.memory import run_memory
from bench.overhead import run_overhead
from bench.profiles import FULL, QUICK, SMOKE, Profile
from bench.quality import run_quality
from bench.report import render, write_json
from bench.retention import run_retention
from bench.scaleout import run_scaleout
from bench.sse import run_sse
from bench.targets import judge
from bench.telemetry import run_telemetry
from bench.tools import run_tools

SECTIONS = {
    "overhead": run_overhead,
    "concurrency": run_concurrency,
    "scaleout": run_scaleout,
    "memory": run_memory,
    "cluster": run_cluster,
    "telemetry": run_telemetry,
    "sse": run_sse,
    "events": run_events,
    "retention": run_retention,
    "costs": run_costs,
    "tools": run_tools,
    "quality": run_quality,
}
#: Sections run unless --only names them: they need what the others do not (an LLM server).
ON_REQUEST = ("quality",)
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "latest.json"
_SECRET_HINTS = ("URL", "KEY", "PASSWORD", "TOKEN", "SECRET")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if "quality" in args.only and not (args.llm_url and args.model):
        print("bench: the quality section needs --llm-url and --model", file=sys.stderr)
        return 2
    profile = SMOKE if args.smoke else QUICK if args.quick else FULL
    log_dir = Path(tempfile.mkdtemp(prefix="aeon-bench-"))
    try:
        with _redis(args.redis_url) as (url, pid, source):
            report = eventloop.run(_run(url, pid, source, profile, args, log_dir))
    except Exception as error:
        print(f"bench: failed: {type(error).__name__}: {error}", file=sys.stderr)
        print(f"bench: process logs kept in {log_dir}", file=sys.stderr)
        return 2
    shutil.rmtree(log_dir, ignore_errors=True)
    write_json(report, args.out)
    print(render(report))
    print(f"\nJSON report: {args.out}")
    missed = [row for row in report["targets"] if row["met"] is False]
    return 1 if missed else 0


async def _run(
    url: str,
    pid: int | None,
    source: str,
    profile: Profile,
    args: argparse.Namespace,
    log_dir: Path,
) -> dict[str, Any]:
    started = time.perf_counter()
    only: list[str] = args.only
    redis = await connect(BusSettings(redis_url=url))
    try:
        info = await redis.info("server")
        ctx = BenchContext(
            url,
            pid,
            profile,
            log_dir,
            redis,
            llm_url=args.llm_url,
            model=args.model,
            quality_cases=args.quality_cases,
            quality_modes=args.quality_modes,
            quality_effort=args.quality_effort,
            quality_k=args.quality_k,
            quality_results=args.quality_results,
            quality_plot=args.quality_plot,
        )
        report: dict[str, Any] = {}
        for name in only:
            section_started = time.perf_counter()
            _say(f"{name}: running ({profile.name})")
            report[name] = await SECTIONS[name](ctx)
            _say(f"{name}: done in {time.perf_counter() - section_started:.1f} s")
    finally:
        await redis.aclose()
    report["meta"] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - started, 1),
        # Whether the sections run are the bench's own (all but those run on request, which
        # take an LLM server's time), so the time is the bench's.
        "whole": set(only) == {name for name in SECTIONS if name not in ON_REQUEST},
        "budget_minutes": profile.minutes,
        "profile": profile.name,
        "command": " ".join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]]),
        "sections": only,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "event_loop": eventloop.loop_name(),
        "redis": {"source": source, "url": redact(url), "version": info.get("redis_version")},
        "inherited_env": _inherited_env(),
    }
    report["targets"] = judge(report)
    return report


@contextlib.contextmanager
def _redis(url: str | None) -> Iterator[tuple[str, int | None, str]]:
    """The given server (URL, no pid), or a throwaway one of our own (its CPU is reported)."""
    if url:
        yield url, None, "url"
        return
    with RedisServer() as server:
        yield server.url, server.pid, "embedded"


def _inherited_env() -> dict[str, str]:
    """AEON_* settings the workers inherit (so a tuning run says what it tuned); no secrets."""
    return {
        name: "***" if any(hint in name for hint in _SECRET_HINTS) else value
        for name, value in sorted(os.environ.items())
        if name.startswith("AEON_")
    }


def _say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


def _sections(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"choose from {', '.join(SECTIONS)} (comma-separated); got {text!r}"
        )
    return [name for name in SECTIONS if name in names]


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark Aeon's bus and pipeline against plain redis-py (issue 5).",
        epilog="Exit status: 0 every target met, 1 a target missed, 2 the benchmark failed.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller loads, same sections")
    size.add_argument(
        "--smoke", action="store_true", help="tiny loads for the test suite (figures meaningless)"
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("AEON_BENCH_REDIS_URL") or None,
        help="use this Redis (default: $AEON_BENCH_REDIS_URL, else a throwaway server)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"JSON report ({DEFAULT_OUT})"
    )
    parser.add_argument(
        "--only",
        type=_sections,
        default=[name for name in SECTIONS if name not in ON_REQUEST],
        help=f"sections to run, comma-separated ({','.join(SECTIONS)}; "
        f"{', '.join(ON_REQUEST)} only when named)",
    )
    parser.add_argument("--llm-url", help="quality: the OpenAI-compatible server's base URL")
    parser.add_argument("--model", help="quality: the model to ask")
    parser.add_argument(
        "--quality-cases",
        type=int,
        default=None,
        metavar="N",
        help="quality: run the first N cases only (default: all)",
    )
    parser.add_argument(
        "--quality-modes",
        type=choices_option(MODES),
        default=list(MODES),
        metavar="MODES",
        help=f"quality: how the rules reach Aeon ({','.join(MODES)}; default: both)",
    )
    parser.add_argument(
        "--quality-effort",
        type=choices_option(EFFORTS),
        default=None,
        metavar="EFFORTS",
        help="quality: run Aeon at each of these efforts (default: its default effort)",
    )
    parser.add_argument(
        "--quality-k",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="quality: plain samples a case for best of k (default: matched to Aeon's spend, "
        "at most 8)",
    )
    parser.add_argument(
        "--quality-results",
        type=Path,
        default=None,
        metavar="PATH",
        help="quality: the report as JSON, written after every case",
    )
    parser.add_argument(
        "--quality-plot",
        type=Path,
        default=None,
        metavar="PATH",
        help="quality: draw rules held against tokens as a PNG (the bench extra)",
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
