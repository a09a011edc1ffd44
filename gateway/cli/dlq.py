"""`aeon dlq list` and `aeon dlq replay ID`: what operators do with dead letters.

Dead letters are named as everything else names them: the group as its phase (`phase-a`), and
each by its dead-letter id, the id worker logs print when they dead-letter an event and the one
`replay` takes. The entry id the event had on its own stream is shown too, as `from`.

Each shard has its own dead-letter stream (bus.keys): `list` shows them all, newest first, and
`replay` finds the id in whichever shard holds it (`--shard` settles the rare id two shards
share). Replay puts the original entry back on its stream in the same shard and clears its
dedupe mark, so the phase handles it again. A run already answered (degraded) when its event
died keeps that answer: a request never gets two FinalAnswers, so the replayed run's new answer
is not published.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from typing import Any

from aeonloop.bus.connection import RedisClient, connect
from aeonloop.bus.deadletter import original_fields
from aeonloop.bus.keys import WEBHOOK_TRIES_RECORD, Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import BadInput
from aeonloop.gateway.validation import as_option, check_stream_id
from aeonloop.runs import records


def add_commands(commands: argparse._SubParsersAction, command: Callable[..., Any]) -> None:
    dlq = commands.add_parser("dlq", help="inspect and replay dead letters")
    actions = dlq.add_subparsers(required=True, metavar="ACTION")
    p = command(actions, "list", list_dead, "list dead letters, newest first", "WARNING")
    p.add_argument(
        "--limit",
        type=as_option(_limit, int, "a whole number"),
        default=20,
        help=f"how many to show, 1 to {MAX_LIST:,} (20)",
    )
    p.add_argument("--json", action="store_true")
    p = command(actions, "replay", replay, "put a dead letter back on its stream", "WARNING")
    p.add_argument(
        "entry_id",
        type=as_option(check_stream_id, str, "an entry id"),
        help="the dead letter's id, as `aeon dlq list` and the worker log show it",
    )
    p.add_argument(
        "--shard",
        type=as_option(_shard, int, "a whole number"),
        help="the shard holding it, when more than one holds that id (`aeon dlq list` shows it)",
    )


MAX_LIST = 10_000


def _limit(value: int) -> int:
    if not 1 <= value <= MAX_LIST:
        raise BadInput(f"--limit {value} is not from 1 to {MAX_LIST:,}")
    return value


def _shard(value: int) -> int:
    if value < 0:
        raise BadInput(f"--shard {value} is not a shard number (0 or more)")
    return value


async def list_dead(args: argparse.Namespace) -> int:
    keys, redis = await _open(args.settings)
    try:
        rows = []
        for shard in range(keys.shards):
            entries = await redis.xrevrange(keys.dead_letter(shard), count=args.limit)
            rows += [_row(shard, entry_id, fields) for entry_id, fields in entries]
    finally:
        await redis.aclose()
    rows = sorted(rows, key=newest_first)[: args.limit]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no dead letters")
    for row in rows if not args.json else ():
        where = f"  shard {row['shard']}" if keys.shards > 1 else ""
        print(
            f"{row['id']}{where}  {row['group']}  {row['type']}  cid={row['cid']}  "
            f"deliveries={row['deliveries']}  from {row['source_stream']} {row['entry_id']}\n"
            f"    {row['reason']}"
        )
    return 0


async def replay(args: argparse.Namespace) -> int:
    keys, redis = await _open(args.settings)
    try:
        shard, record = await _find(redis, keys, args.entry_id, args.shard)
        source = keys.stream(record[b"source_stream"].decode(), shard)
        group = record[b"group"].decode()
        event_id = record.get(b"event_id", b"").decode() or _event_id(record.get(b"body", b""))
        pipe = redis.pipeline(transaction=False)  # one shard: one slot, written in this order
        if event_id:
            pipe.delete(keys.lock(shard, group, event_id))
        cid = record.get(b"cid", b"").decode()
        if cid:  # a replayed webhook gets AEON_WEBHOOK_ATTEMPTS tries again
            records.forget(pipe, keys, cid, shard, WEBHOOK_TRIES_RECORD)
        pipe.xadd(source, original_fields(record))
        pipe.xdel(keys.dead_letter(shard), args.entry_id)
        new_id = (await pipe.execute())[-2]
    finally:
        await redis.aclose()
    print(f"replayed {args.entry_id} onto {source} as {new_id.decode()}")
    return 0


async def _find(
    redis: RedisClient, keys: Keys, entry_id: str, shard: int | None
) -> tuple[int, dict[bytes, bytes]]:
    """The shard holding dead letter `entry_id`, and its record; BadInput if none or two do."""
    if shard is not None and shard >= keys.shards:
        raise BadInput(f"--shard {shard} is not a shard: AEON_SHARDS is {keys.shards}")
    found = {}
    for number in [shard] if shard is not None else range(keys.shards):
        entries = await redis.xrange(keys.dead_letter(number), entry_id, entry_id)
        if entries:
            found[number] = entries[0][1]
    if not found:
        raise BadInput(f"no dead letter {entry_id}")
    if len(found) > 1:
        shards = " and ".join(map(str, found))
        raise BadInput(f"dead letter {entry_id} is in shards {shards}: add --shard N")
    return next(iter(found.items()))


async def _open(settings: BusSettings) -> tuple[Keys, RedisClient]:
    if not settings.redis_url:
        raise BadInput("`aeon dlq` needs AEON_REDIS_URL")
    return Keys(settings.prefix, settings.shards), await connect(settings)


def _row(shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> dict[str, str]:
    """A dead letter as listed. Its `attempts` field counts deliveries (bus.deadletter), and is
    listed as `deliveries`: a reason such as "handler failed 3 times" counts the handler's tries
    within one delivery, and `attempts=1` beside it read as a contradiction."""
    row = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items() if k != b"body"}
    row["id"] = entry_id.decode()
    row["shard"] = str(shard)
    row["deliveries"] = row.pop("attempts", "")
    return {key: row.get(key, "") for key in _COLUMNS}


def newest_first(row: Mapping[str, Any]) -> tuple[int, int]:
    """Sort key of rows with an entry `id`, newest first (also across shards' streams)."""
    millis, _, sequence = row["id"].partition("-")
    return (-int(millis), -int(sequence or 0))


_COLUMNS = (
    "id",
    "shard",
    "group",
    "source_stream",
    "entry_id",
    "type",
    "cid",
    "deliveries",
    "failed_at",
    "reason",
)


def _event_id(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data.get("event_id") if isinstance(data, dict) else None
