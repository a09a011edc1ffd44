"""Streams keep only what someone may still read: trimmed by what every group acknowledged.

XADD's `MAXLEN ~ AEON_STREAM_MAXLEN` alone kept 100,000 entries a stream, 11.6 KiB a run of
the phase streams and 7.9 KiB of the answers stream in a soak, long after every run they
carried had been answered. An entry is still needed:

- by its group until acked: it is pending (a redelivery reads it again) or not yet delivered;
- by gateways following progress and answers with plain XREAD (gateway.client), for a moment.

So every `AEON_TRIM_INTERVAL_S` each consumer trims its own stream, in every shard, to the
oldest entry that one of the stream's groups still needs (`acked_floor`: the oldest pending
entry of each group, or the first not yet delivered), never closer to now than
`AEON_STREAM_KEEP_S`; and the worker trims the answers stream (no group reads it) to
`AEON_STREAM_KEEP_S`. A gateway that falls further behind finds the answer in the answer store
(it looks there every few seconds anyway) and misses only progress lines. The HTTP API reads a
run in flight back from the entry of its newest event (gateway.http.run_feed), so the default
keeps entries as long as the default request timeout (300 s): a run that keeps to it can be
read while it runs. A deployment with longer timeouts raises it to match. A stream none of
whose groups exists yet (no worker of its phase has started) is not trimmed: its entries wait
for their first reader. Trimming is `XTRIM MINID ~`: whole nodes only, which is cheap; what is
left is at most a node per stream.

Why it is safe without a lock: a group's pending entries and last-delivered id are read before
trimming; an entry delivered later has a newer id than that last-delivered id, and only
pending entries can be claimed, so nothing below the floor can become needed again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis.exceptions import ResponseError

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.redis_errors import no_such_key

log = logging.getLogger("aeon.bus")


def _id(value: bytes | str) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _text(entry_id: tuple[int, int]) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


async def acked_floor(redis: RedisClient, stream: str) -> tuple[int, int] | None:
    """The oldest entry of `stream` some group still needs (pending, or not yet delivered);
    None when the stream or its groups do not exist, so nothing may be trimmed."""
    try:
        groups = await redis.xinfo_groups(stream)
    except ResponseError as error:
        if no_such_key(error):
            return None
        raise
    if not groups:
        return None
    floor: tuple[int, int] | None = None
    for group in groups:
        last = _id(group["last-delivered-id"])
        needed = (last[0], last[1] + 1)  # the first entry not yet delivered
        if group["pending"]:
            summary = await redis.xpending(stream, group["name"])
            if summary["min"] is not None:
                needed = min(needed, _id(summary["min"]))
        floor = needed if floor is None else min(floor, needed)
    return floor


async def trim(
    redis: RedisClient, stream: str, keep_ms: int, now_ms: int, grouped: bool = True
) -> int:
    """Trim `stream` to entries a group still needs (`grouped`) and those newer than `keep_ms`
    before `now_ms` (Redis's clock); returns the entries removed."""
    recent = (max(0, now_ms - keep_ms), 0)
    if grouped:
        floor = await acked_floor(redis, stream)
        if floor is None:
            return 0
        recent = min(recent, floor)
    return int(await redis.xtrim(stream, minid=_text(recent), approximate=True))


async def trim_all(
    redis: RedisClient,
    grouped: Sequence[str],
    ungrouped: Sequence[str],
    keep_ms: int,
    ahead_ms: int = 0,
) -> int:
    """One trim of every stream: `grouped` by what their groups acknowledged and by age,
    `ungrouped` (read only with plain XREAD) by age alone; `ahead_ms` trims as it will be
    that long from now (the benchmark's view of later). Returns the entries removed."""
    seconds, micros = await redis.time()
    now_ms = seconds * 1000 + micros // 1000 + ahead_ms
    removed = 0
    for stream in grouped:
        removed += await trim(redis, stream, keep_ms, now_ms)
    for stream in ungrouped:
        removed += await trim(redis, stream, keep_ms, now_ms, grouped=False)
    return removed
