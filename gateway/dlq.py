"""`aeon dlq list` and `aeon dlq replay ID`: what operators do with dead letters.

Dead letters are named as everything else names them: the group as its phase (`phase-a`), and
each by its dead-letter id, the id worker logs print when they dead-letter an event and the one
`replay` takes. The entry id the event had on its own stream is shown too, as `from`.

Replay puts the original entry back on its stream and clears its dedupe mark, so the phase
handles it again. A run already answered (degraded) when its event died keeps that answer: a
request never gets two FinalAnswers, so the replayed run's new answer is not published.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from bus.connection import connect
from bus.deadletter import original_fields
from bus.keys import Keys
from bus.settings import BusSettings
from gateway.validation import BadInput, as_option, check_stream_id


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


MAX_LIST = 10_000


def _limit(value: int) -> int:
    if not 1 <= value <= MAX_LIST:
        raise BadInput(f"--limit {value} is not from 1 to {MAX_LIST:,}")
    return value


async def list_dead(args: argparse.Namespace) -> int:
    keys, redis = _open(args.settings)
    try:
        entries = await redis.xrevrange(keys.dead_letter, count=args.limit)
    finally:
        await redis.aclose()
    rows = [_row(entry_id, fields) for entry_id, fields in entries]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no dead letters")
    for row in rows if not args.json else ():
        print(
            f"{row['id']}  {row['group']}  {row['type']}  cid={row['cid']}  "
            f"attempts={row['attempts']}  from {row['source_stream']} {row['entry_id']}\n"
            f"    {row['reason']}"
        )
    return 0


async def replay(args: argparse.Namespace) -> int:
    keys, redis = _open(args.settings)
    try:
        found = await redis.xrange(keys.dead_letter, args.entry_id, args.entry_id)
        if not found:
            raise BadInput(f"no dead letter {args.entry_id}")
        record = found[0][1]
        source = record[b"source_stream"].decode()
        group = record[b"group"].decode()
        event_id = _event_id(record.get(b"body", b""))
        pipe = redis.pipeline(transaction=False)
        if event_id:
            pipe.delete(keys.lock(group, event_id))
        pipe.xadd(keys.stream(source), original_fields(record))
        pipe.xdel(keys.dead_letter, args.entry_id)
        new_id = (await pipe.execute())[-2]
    finally:
        await redis.aclose()
    print(f"replayed {args.entry_id} onto {keys.stream(source)} as {new_id.decode()}")
    return 0


def _open(settings: BusSettings) -> tuple[Keys, Redis]:
    if not settings.redis_url:
        raise BadInput("`aeon dlq` needs AEON_REDIS_URL")
    return Keys(settings.prefix), connect(settings)


def _row(entry_id: bytes, fields: dict[bytes, bytes]) -> dict[str, str]:
    row = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items() if k != b"body"}
    row["id"] = entry_id.decode()
    return {key: row.get(key, "") for key in _COLUMNS}


_COLUMNS = (
    "id",
    "group",
    "source_stream",
    "entry_id",
    "type",
    "cid",
    "attempts",
    "failed_at",
    "reason",
)


def _event_id(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data.get("event_id") if isinstance(data, dict) else None
