"""Section 9, retention: the Redis memory an answered run still holds 10 minutes later.

Runs `retention_runs` requests (the main-job request, the offline model, the default timeout,
so the memo's lifetime is what a default deployment gets) through one `aeon worker` with
default settings, at most `_IN_FLIGHT` at once. Once all are answered, the streams are trimmed
as they will be 10 minutes on (bus.retention: what every group acknowledged, and older than
AEON_STREAM_KEEP_S), and every key under the run's prefix is weighed with MEMORY USAGE. A key
counts as still held when it has no TTL, or one that outlives 10 minutes after the first
answer (conservative: later runs' keys are counted by the same cut). The bytes are reported
per run, by kind of key, both at the end (what the keys hold then, streams already trimmed)
and 10 minutes on, beside what the same kinds held before this section existed (a
12-minute soak of 81,314 runs: 31.5 KiB a run held past 10 minutes, 38 KiB in all).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

from aeonloop.bus.keys import ANSWER_TEXT, ANSWERS, Keys
from aeonloop.bus.retention import trim_all
from aeonloop.gateway.client import DEFAULT_TIMEOUT_S
from bench.context import BenchContext
from bench.pipeline import PHASE_STREAMS, running_pipeline

#: How long after its answer a run's keys are weighed.
AFTER_S = 600
#: Runs in flight at once.
_IN_FLIGHT = 50
#: KiB a run held past 10 minutes before (issue 27's soak), for the report's "before" column.
BEFORE_KIB = 31.5
#: Each kind of key, by what its name holds after the prefix, in the order reported.
_KINDS = (
    ("memo", ":memo:"),
    ("answer keys", ":answer:"),
    ("answer text streams", f":{ANSWER_TEXT}:"),
    ("run history", ":run:"),
    ("locks / done marks", ":lock:"),
    ("answers stream", f":{ANSWERS}"),
    ("dead letters", ":dead-letter"),
)


def _kind(key: str) -> str:
    for name, part in _KINDS:
        if part in key:
            return name
    if any(f":{stream}" in key for stream in PHASE_STREAMS.values()):
        return "phase streams"
    return "other"


async def run_retention(ctx: BenchContext) -> dict[str, Any]:
    prefix = ctx.new_prefix("retention")
    runs = ctx.profile.retention_runs
    async with running_pipeline(ctx, prefix) as (_, gateway):
        limit = asyncio.Semaphore(_IN_FLIGHT)

        async def one() -> None:
            async with limit:
                await gateway.one_run(timeout=DEFAULT_TIMEOUT_S)

        await asyncio.gather(*(one() for _ in range(runs)))
        answered_at = time.monotonic()
    keys = Keys(prefix)
    grouped = [keys.stream(stream, 0) for stream in set(PHASE_STREAMS.values())]
    await trim_all(ctx.redis, grouped, [keys.stream(ANSWERS, 0)], 0, ahead_ms=AFTER_S * 1000)
    since_ms = int((time.monotonic() - answered_at) * 1000)
    held: dict[str, int] = defaultdict(int)
    every: dict[str, int] = defaultdict(int)
    async for key in ctx.redis.scan_iter(match=f"{prefix}:*", count=1000):
        name = key.decode()
        size = await ctx.redis.memory_usage(key, samples=0) or 0
        ttl_ms = await ctx.redis.pttl(key)
        every[_kind(name)] += size
        if ttl_ms == -1 or ttl_ms > AFTER_S * 1000 - since_ms:
            held[_kind(name)] += size
    await ctx.clean(prefix)
    return {
        "runs": runs,
        "kib_per_run_held_after_10_min": round(sum(held.values()) / 1024 / runs, 2),
        "kib_per_run_at_the_end": round(sum(every.values()) / 1024 / runs, 2),
        "held_by_kind_kib_per_run": {k: round(v / 1024 / runs, 2) for k, v in held.items()},
        "at_the_end_by_kind_kib_per_run": {k: round(v / 1024 / runs, 2) for k, v in every.items()},
        "before_kib_per_run_held_after_10_min": BEFORE_KIB,
    }
