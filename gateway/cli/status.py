"""`aeon status [--json]`: what a running deployment is doing, for an operator; reads only.

Per phase group (`phase-a` … `phase-e`), summed over the shards and, when AEON_SHARDS > 1, per
shard: its stream's length, the group's lag (entries not yet delivered to it), the entries
pending (delivered, not acked), how long the oldest of them has been idle, how many are idle
longer than AEON_CLAIM_IDLE_MS, and its consumers with their pending entries and how long ago
Redis last saw them. Then the dead letters of every shard, the answers stream and the answer
store, and every stream's length.

Every command names one key, so on a Redis Cluster each goes to the master of that key's shard;
the answer store is counted by SCAN on every master (runs.store.count_answers), stopping after
about ANSWER_SCAN_CALLS × ANSWER_SCAN_COUNT keys per node (the count is then a lower bound, and
says so).

Lag: Redis 7 reports it (XINFO GROUPS `lag`); Redis 6.2 does not, nor does 7 when it cannot
tell, so it is counted from the entries after the group's last delivered id, up to LAG_LIMIT.

What needs attention, each one line starting "attention:", and exit EXIT_ATTENTION:
- a phase's stream or group missing (no worker of that phase ever started under this prefix);
- pending entries idle longer than AEON_CLAIM_IDLE_MS: live consumers keep theirs fresh and
  claim the others within that time, so nobody is claiming (workers down?);
- a phase with no consumer seen within AEON_CLAIM_IDLE_MS: no worker runs it;
- dead letters present;
- a shard count recorded under the prefix other than AEON_SHARDS (bus.layout);
- a Redis (each master of a cluster) whose memory would reach its `maxmemory` within
  RUN_OUT_WITHIN_S at the rate it grew over the sampling window (`--window`, 2 s), or that
  already uses FULL_SHARE of it. Redis with `noeviction` (what a broker needs) then refuses
  writes: the workers wait (docs/delivery.md) and no run is accepted. One window is a short
  look: a Redis whose keys expire as fast as they come stays level over a long one, so a line
  seen once is worth a look with a longer `--window`, not an alarm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from aeonloop.bus.connection import RedisClient, connect, is_cluster
from aeonloop.bus.keys import ANSWERS, Keys
from aeonloop.bus.redis_errors import no_such_key
from aeonloop.exceptions import BadInput
from aeonloop.gateway.cli.dlq import newest_first
from aeonloop.phases.events import EVENT_TYPES
from aeonloop.phases.worker import PHASE_INPUTS, PHASES
from aeonloop.runs.store import ANSWER_SCAN_CALLS, ANSWER_SCAN_COUNT, count_answers

#: Exit code when anything needs attention (docs/cli.md, "Exit codes").
EXIT_ATTENTION = 5
#: Most entries counted, per shard, for a lag Redis does not report.
LAG_LIMIT = 1_000
#: Most entries counted, per shard, among those pending longer than AEON_CLAIM_IDLE_MS.
IDLE_LIMIT = 1_000
#: Commands in flight at once.
_CONCURRENCY = 32
#: Memory that would run out within this long at the current rate needs attention.
RUN_OUT_WITHIN_S = 24 * 3600
#: Memory this full needs attention, whatever its rate.
FULL_SHARE = 0.9
#: A change of memory within this many bytes is no growth: client buffers move an idle Redis's
#: used memory by half a MiB from one second to the next (measured on Redis 7.0). So a
#: `--window` of 2 s sees growth from 512 KiB/s; a longer one sees slower growth.
NOISE_BYTES = 2**20
#: Seconds between the two readings of Redis's memory that give its rate (`--window`).
DEFAULT_WINDOW_S = 2.0

T = TypeVar("T")


def add_commands(commands: argparse._SubParsersAction, command: Callable[..., Any]) -> None:
    p = command(
        commands,
        "status",
        show_status,
        "show the phase groups, backlog, workers, dead letters and answers of a deployment",
        "WARNING",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--window",
        type=_window,
        default=DEFAULT_WINDOW_S,
        metavar="SECONDS",
        help=f"how long to watch Redis's memory grow (default {DEFAULT_WINDOW_S:g}; 0: not at all)",
    )


def _window(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds from 0 to 3600")
    return seconds


async def show_status(args: argparse.Namespace) -> int:
    settings = args.settings
    if not settings.redis_url:
        raise BadInput("`aeon status` needs AEON_REDIS_URL: the Redis of the deployment")
    keys = Keys(settings.prefix, settings.shards)
    redis = await connect(settings)
    try:
        report = await read_status(redis, keys, settings.claim_idle_ms, args.window)
    finally:
        await redis.aclose()
    print(json.dumps(report, indent=2) if args.json else render(report))
    return EXIT_ATTENTION if report["attention"] else 0


async def read_status(
    redis: RedisClient, keys: Keys, claim_idle_ms: int, window_s: float = 0.0
) -> dict[str, Any]:
    """Everything `aeon status` shows, as the JSON object `--json` prints; Redis's memory is
    read twice, `window_s` apart, for its rate (0: once, no rate)."""
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def limited(work: Callable[[], Awaitable[T]]) -> T:
        async with limit:
            return await work()

    shards = range(keys.shards)
    group_rows = await asyncio.gather(
        *(
            limited(lambda p=phase, s=shard: _group_shard(redis, keys, p, s, claim_idle_ms))
            for phase in PHASES
            for shard in shards
        )
    )
    dead = await asyncio.gather(
        *(limited(lambda s=s: _dead_letters(redis, keys, s)) for s in shards)
    )
    names = list(dict.fromkeys(event.STREAM for event in EVENT_TYPES.values()))
    lengths = await asyncio.gather(
        *(limited(lambda n=n, s=s: redis.xlen(keys.stream(n, s))) for n in names for s in shards)
    )
    stored, exact = await count_answers(redis, keys)
    recorded = await redis.get(keys.shard_count)
    version = await _redis_version(redis)
    # After the other reads: this command's own connections are open by then, and what their
    # buffers take is not counted as the deployment's growth.
    memory_before = await _memory(redis)
    if window_s:
        await asyncio.sleep(window_s)
    memory = _grown(memory_before, await _memory(redis) if window_s else None, window_s)

    groups = [
        _summed(keys, phase, group_rows[i * keys.shards : (i + 1) * keys.shards])
        for i, phase in enumerate(PHASES)
    ]
    streams = {
        name: sum(lengths[i * keys.shards : (i + 1) * keys.shards]) for i, name in enumerate(names)
    }
    report: dict[str, Any] = {
        "prefix": keys.prefix,
        "shards": keys.shards,
        "recorded_shards": int(recorded) if recorded is not None else None,
        "redis_version": version,
        "empty_reads_seen": _reads_are_seen(version),
        "claim_idle_ms": claim_idle_ms,
        "groups": groups,
        "dead_letters": {"count": sum(row["count"] for row in dead), "shards": dead},
        "answers": {
            "stream_length": streams[ANSWERS],
            "stored": stored,
            "stored_exact": exact,
        },
        "streams": streams,
        "memory": memory,
    }
    report["attention"] = _attention(report)
    return report


# -- reading ----------------------------------------------------------------------------------


def _stream_of(phase: str) -> str:
    return PHASE_INPUTS[phase][0].STREAM


async def _group_shard(
    redis: RedisClient, keys: Keys, phase: str, shard: int, claim_idle_ms: int
) -> dict[str, Any]:
    stream, group = keys.stream(_stream_of(phase), shard), keys.group(phase)
    row: dict[str, Any] = {
        "shard": shard,
        "stream_exists": False,
        "group_exists": False,
        "length": 0,
        "lag": None,
        "lag_exact": True,
        "pending": 0,
        "oldest_pending_idle_ms": None,
        "pending_over_claim_idle": 0,
        "pending_over_claim_idle_exact": True,
        "consumers": [],
    }
    try:
        infos = await redis.xinfo_groups(stream)
    except ResponseError as error:
        if not no_such_key(error):
            raise
        return row
    row["stream_exists"] = True
    row["length"] = await redis.xlen(stream)
    info = next((i for i in infos if _text(i["name"]) == group), None)
    if info is None:
        return row
    row["group_exists"] = True
    row["lag"], row["lag_exact"] = await _lag(redis, stream, info)
    row["pending"] = (await redis.xpending(stream, group))["pending"]
    if row["pending"]:
        oldest = await redis.xpending_range(stream, group, "-", "+", 1)
        if oldest:
            row["oldest_pending_idle_ms"] = oldest[0]["time_since_delivered"]
        idle = await redis.xpending_range(stream, group, "-", "+", IDLE_LIMIT, idle=claim_idle_ms)
        row["pending_over_claim_idle"] = len(idle)
        row["pending_over_claim_idle_exact"] = len(idle) < IDLE_LIMIT
    row["consumers"] = [
        {
            "name": _text(c["name"]),
            "pending": c["pending"],
            "idle_ms": c["idle"],
            "inactive_ms": c.get("inactive"),  # Redis 7.2: since its last successful read
        }
        for c in await redis.xinfo_consumers(stream, group)
    ]
    return row


async def _lag(redis: RedisClient, stream: str, info: dict[str, Any]) -> tuple[int, bool]:
    """Entries of `stream` not yet delivered to the group, and whether that is exact."""
    if info.get("lag") is not None:
        return int(info["lag"]), True
    after = b"(" + _bytes(info["last-delivered-id"])
    entries = await redis.xrange(stream, min=after, count=LAG_LIMIT)
    return len(entries), len(entries) < LAG_LIMIT


async def _dead_letters(redis: RedisClient, keys: Keys, shard: int) -> dict[str, Any]:
    key = keys.dead_letter(shard)
    count = await redis.xlen(key)
    newest = None
    for entry_id, fields in await redis.xrevrange(key, count=1) if count else ():
        field = {_text(k): _text(v) for k, v in fields.items() if k != b"body"}
        newest = {
            "id": _text(entry_id),
            "group": field.get("group", ""),
            "type": field.get("type", ""),
            "cid": field.get("cid", ""),
            "reason": field.get("reason", ""),
        }
    return {"shard": shard, "count": count, "newest": newest}


async def _redis_version(redis: RedisClient) -> str | None:
    """The oldest version among the masters, or None if this user may not run INFO."""
    try:
        if is_cluster(redis):
            answers = await redis.info("server", target_nodes=redis.get_primaries())
        else:
            answers = await redis.info("server")
    except ResponseError:  # NOPERM, or a proxy without INFO
        return None
    infos = [answers] if "redis_version" in answers else list(answers.values())
    versions = [str(info["redis_version"]) for info in infos if "redis_version" in info]
    return min(versions, key=_version_key, default=None)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def _reads_are_seen(version: str | None) -> bool:
    """Whether a consumer's `idle` counts reads that got nothing: from Redis 7.2 on. Before, it
    counts only reads and claims that got entries, so an idle worker's time grows like a dead
    one's (redis/redis#11099), and a worker that never got an entry has no consumer at all."""
    return version is not None and _version_key(version) >= (7, 2)


async def _memory(redis: RedisClient) -> dict[str, tuple[int, int]] | None:
    """Each master's used memory and `maxmemory` (0: none) in bytes, by node; None if this
    user may not run INFO."""
    try:
        if is_cluster(redis):
            answers = await redis.info("memory", target_nodes=redis.get_primaries())
        else:
            answers = {"redis": await redis.info("memory")}
    except ResponseError:  # NOPERM, or a proxy without INFO
        return None
    return {
        str(node): (int(info["used_memory"]), int(info.get("maxmemory", 0)))
        for node, info in answers.items()
        if "used_memory" in info
    }


def _grown(
    before: dict[str, tuple[int, int]] | None,
    after: dict[str, tuple[int, int]] | None,
    window_s: float,
) -> list[dict[str, Any]] | None:
    """Per master: its memory, its maxmemory, and how fast it grew (None: not measured; 0
    for a change within NOISE_BYTES)."""
    if before is None:
        return None
    nodes = []
    for node, (used, most) in (after or before).items():
        rate = None
        if after is not None and node in before and window_s:
            change = used - before[node][0]
            rate = change / window_s if abs(change) > NOISE_BYTES else 0.0
        nodes.append(
            {"node": node, "used_bytes": used, "maxmemory_bytes": most, "growth_bytes_per_s": rate}
        )
    return nodes


def memory_attention(node: dict[str, Any]) -> str | None:
    """The attention line for one master's memory, or None: it will not run out soon."""
    used, most, rate = node["used_bytes"], node["maxmemory_bytes"], node["growth_bytes_per_s"]
    if not most:
        return None
    where = "" if node["node"] == "redis" else f" on {node['node']}"
    full = f"Redis{where} uses {_size(used)} of its maxmemory {_size(most)}"
    hint = (
        "; it then refuses writes and no run is accepted: raise maxmemory, or lower "
        "AEON_ANSWER_TTL_S (docs/operating.md, What a run leaves in Redis)"
    )
    if used >= FULL_SHARE * most:
        return f"{full} ({used / most:.0%}){hint}"
    if rate and rate > 0 and (most - used) / rate < RUN_OUT_WITHIN_S:
        left_ms = int((most - used) / rate * 1000)
        return (
            f"{full}, growing {_size(int(rate))}/s: full in about {_duration(left_ms)} "
            f"at this rate{hint}"
        )
    return None


def _size(count: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(count) >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


# -- summing ----------------------------------------------------------------------------------


def _summed(keys: Keys, phase: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    present = [r for r in rows if r["group_exists"]]
    lags = [r for r in present if r["lag"] is not None]
    idles = [r["oldest_pending_idle_ms"] for r in rows if r["oldest_pending_idle_ms"] is not None]
    consumers: dict[str, dict[str, Any]] = {}
    for row in rows:
        for c in row["consumers"]:
            seen = consumers.setdefault(c["name"], {**c, "pending": 0})
            seen["pending"] += c["pending"]
            seen["idle_ms"] = min(seen["idle_ms"], c["idle_ms"])
            if c["inactive_ms"] is not None and c["inactive_ms"] >= 0:
                known = seen["inactive_ms"]
                fresher = known is None or known < 0 or c["inactive_ms"] < known
                seen["inactive_ms"] = c["inactive_ms"] if fresher else known
    group: dict[str, Any] = {
        "group": keys.group(phase),
        "phase": phase,
        "stream": _stream_of(phase),
        "missing_stream_shards": [r["shard"] for r in rows if not r["stream_exists"]],
        "missing_group_shards": [
            r["shard"] for r in rows if r["stream_exists"] and not r["group_exists"]
        ],
        "length": sum(r["length"] for r in rows),
        "lag": sum(r["lag"] for r in lags) if lags else None,
        "lag_exact": all(r["lag_exact"] for r in lags),
        "pending": sum(r["pending"] for r in rows),
        "oldest_pending_idle_ms": max(idles) if idles else None,
        "pending_over_claim_idle": sum(r["pending_over_claim_idle"] for r in rows),
        "pending_over_claim_idle_exact": all(r["pending_over_claim_idle_exact"] for r in rows),
        "consumers": sorted(consumers.values(), key=lambda c: (c["idle_ms"], c["name"])),
    }
    if keys.shards > 1:
        group["per_shard"] = rows
    return group


# -- attention --------------------------------------------------------------------------------


def _attention(report: dict[str, Any]) -> list[str]:
    """What needs an operator, one line each (without the "attention: " they are printed with)."""
    claim = report["claim_idle_ms"]
    prefix, shards, recorded = report["prefix"], report["shards"], report["recorded_shards"]
    lines = []
    if recorded is not None and recorded != shards:
        lines.append(
            f"the deployment under AEON_PREFIX={prefix} records {recorded} shards but AEON_SHARDS "
            f"is {shards}: set AEON_SHARDS={recorded} to look at it"
        )
    for g in report["groups"]:
        name, stream, phase = g["group"], g["stream"], g["phase"]
        if g["missing_stream_shards"]:
            lines.append(
                f"{name}: stream {stream} does not exist{_in(g['missing_stream_shards'], shards)}:"
                f" no worker of phase {phase} has started under AEON_PREFIX={prefix}"
            )
        if g["missing_group_shards"]:
            lines.append(
                f"{name}: the group does not exist on stream {stream}"
                f"{_in(g['missing_group_shards'], shards)}: no worker of phase {phase} has started"
            )
        if g["pending_over_claim_idle"]:
            count = g["pending_over_claim_idle"]
            many = _count(count, g["pending_over_claim_idle_exact"])
            lines.append(
                f"{name}: {many} pending {'entry' if count == 1 else 'entries'} idle longer than "
                f"AEON_CLAIM_IDLE_MS ({claim:,} ms): nobody is claiming "
                f"{'it' if count == 1 else 'them'} (workers down?)"
            )
        some_group = len(g["missing_stream_shards"]) + len(g["missing_group_shards"]) < shards
        consumers = g["consumers"]
        waiting = (g["lag"] or 0) + g["pending"]
        # Before Redis 7.2 an idle worker is not seen: only a phase with work waiting tells.
        if (
            some_group
            and (waiting or report["empty_reads_seen"])
            and not any(c["idle_ms"] < claim for c in consumers)
        ):
            seen = (
                f"the last one seen {_duration(consumers[0]['idle_ms'])} ago"
                if consumers
                else "it has never had one"
            )
            work = ""
            if waiting:
                work = f" while {waiting:,} {'entry waits' if waiting == 1 else 'entries wait'}"
            lines.append(
                f"{name}: no consumer seen within AEON_CLAIM_IDLE_MS ({claim:,} ms){work}, "
                f"{seen}: no worker is running phase {phase}"
            )
    dead = report["dead_letters"]
    if dead["count"]:
        holding = [row for row in dead["shards"] if row["count"]]
        newest = min((row["newest"] for row in holding if row["newest"]), key=newest_first)
        lines.append(
            f"{dead['count']:,} dead letter{'s' if dead['count'] > 1 else ''}"
            f"{_in([row['shard'] for row in holding], shards)}, the newest {newest['id']} "
            f"from {newest['group']}: {_one_line(newest['reason'])}; see `aeon dlq list`"
        )
    lines += filter(None, map(memory_attention, report["memory"] or ()))
    return lines


def _in(shards: list[int], of: int) -> str:
    if of == 1:
        return ""
    if len(shards) == of:
        return " in every shard"
    return f" in shard{'s' if len(shards) > 1 else ''} {', '.join(map(str, shards))}"


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- the table --------------------------------------------------------------------------------

_HEADER = (
    "GROUP",
    "STREAM",
    "LENGTH",
    "LAG",
    "PENDING",
    "OLDEST IDLE",
    "OVER CLAIM IDLE",
    "CONSUMERS",
    "LAST SEEN",
)


def render(report: dict[str, Any]) -> str:
    """The report as a person reads it: the groups' table, consumers, dead letters, answers,
    then one "attention:" line per thing that needs attention."""
    shards = report["shards"]
    out = [
        f"aeon status: prefix {report['prefix']}, {shards} shard{'s' if shards > 1 else ''}, "
        f"AEON_CLAIM_IDLE_MS {report['claim_idle_ms']:,} ms",
        "",
    ]
    rows = [_HEADER]
    for g in report["groups"]:
        if len(g["missing_stream_shards"]) == shards:
            missing = "missing"
        elif len(g["missing_stream_shards"]) + len(g["missing_group_shards"]) == shards:
            missing = "no group"
        else:
            missing = ""
        rows.append(_row(g["group"], g["stream"], g, missing))
        for shard in g.get("per_shard", ()):
            missing = "" if shard["group_exists"] else "no group"
            missing = missing if shard["stream_exists"] else "missing"
            rows.append(_row(f"  shard {shard['shard']}", "", shard, missing))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    for row in rows:
        cells = [
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())

    out += [
        "",
        "consumers:" if any(g["consumers"] for g in report["groups"]) else "consumers: none",
    ]
    for g in report["groups"]:
        for c in g["consumers"]:
            out.append(
                f"  {g['group']}  {c['name']}  pending {c['pending']:,}  "
                f"seen {_duration(c['idle_ms'])} ago"
                + (
                    f", last read {_duration(c['inactive_ms'])} ago"
                    if c["inactive_ms"] is not None and c["inactive_ms"] >= 0
                    else ""
                )
            )

    if not report["empty_reads_seen"]:
        out.append(
            f"  (Redis {report['redis_version'] or 'of unknown version'} sees a consumer only "
            "when it gets entries: an idle worker looks as old as a gone one; 7.2 sees every read)"
        )
    dead = report["dead_letters"]
    out.append(f"dead letters: {dead['count']:,}" if dead["count"] else "dead letters: none")
    for row in dead["shards"]:
        if row["count"]:
            newest = row["newest"] or {}
            where = f"shard {row['shard']}: {row['count']:,}, " if shards > 1 else ""
            out.append(
                f"  {where}newest {newest.get('id', '?')} from {newest.get('group', '?')}: "
                f"{_one_line(newest.get('reason', ''))}"
            )

    answers = report["answers"]
    stored = _count(answers["stored"], answers["stored_exact"])
    capped = (
        ""
        if answers["stored_exact"]
        else " (approximate: the scan stopped after about "
        f"{ANSWER_SCAN_CALLS * ANSWER_SCAN_COUNT:,} keys per node)"
    )
    out.append(
        f"answers: {answers['stream_length']:,} on the answers stream, {stored} stored{capped}"
    )
    out.append(
        "streams: " + ", ".join(f"{name} {length:,}" for name, length in report["streams"].items())
    )
    out += _memory_lines(report["memory"])
    out.append("")
    out += [f"attention: {line}" for line in report["attention"]] or ["nothing needs attention"]
    return "\n".join(out)


def _memory_lines(memory: list[dict[str, Any]] | None) -> list[str]:
    if memory is None:
        return ["redis memory: not readable (INFO is not allowed to this user)"]
    lines = []
    for node in memory:
        where = "" if node["node"] == "redis" else f" {node['node']}"
        most = node["maxmemory_bytes"]
        of = (
            f" of maxmemory {_size(most)} ({node['used_bytes'] / most:.0%})"
            if most
            else ", no maxmemory (it grows until the host runs out)"
        )
        rate = node["growth_bytes_per_s"]
        grew = "" if rate is None else f", {'+' if rate >= 0 else '-'}{_size(abs(int(rate)))}/s"
        lines.append(f"redis memory{where}: {_size(node['used_bytes'])}{of}{grew}")
    return lines


def _row(label: str, stream: str, g: dict[str, Any], missing: str) -> tuple[str, ...]:
    """A row of the table; `missing` says what is ("missing": the stream, "no group")."""
    if missing:
        length = "-" if missing == "missing" else f"{g['length']:,}"
        return (label, f"{stream} ({missing})".lstrip(), length, *("-",) * 6)
    consumers = g["consumers"]
    last_seen = min((c["idle_ms"] for c in consumers), default=None)
    return (
        label,
        stream,
        f"{g['length']:,}",
        "?" if g["lag"] is None else _count(g["lag"], g["lag_exact"]),
        f"{g['pending']:,}",
        "-" if g["oldest_pending_idle_ms"] is None else _duration(g["oldest_pending_idle_ms"]),
        _count(g["pending_over_claim_idle"], g["pending_over_claim_idle_exact"]),
        f"{len(consumers):,}",
        "-" if last_seen is None else f"{_duration(last_seen)} ago",
    )


def _count(number: int, exact: bool) -> str:
    """A number, with "+" when it is a lower bound (counting stopped at a limit)."""
    return f"{number:,}" if exact else f"{number:,}+"


def _duration(ms: int) -> str:
    if ms < 1_000:
        return f"{ms} ms"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if ms >= size:
            return f"{ms / size:.1f} {unit}"
    return f"{ms / 1_000:.1f} s"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
