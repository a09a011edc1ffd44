"""A run as a reader finds it: its head, its answer, its records, its text; cancel and approve.

The gateway (the client, the HTTP API's run feed, `aeon status`, the CLI) reads runs through
`RunStore` alone, and never names a run's key: what a run is in Redis is this package's.

A run's state is found with one read, not a scan: the script that adds each of its progress
events (bus.commit; runs.approvals for an approval's PlanReady) also sets the run's head, the
record HEAD_RECORD (`<type> <stream> <entry id>`) in the run's records hash, which lives under
the run's hash tag like its answer. So `get` is one pipelined round trip (the head, the
webhook's outcome and the answer: one slot, one node on a cluster), and the event the head
names one XRANGE of that entry. The client adds a run's request with the same step
(`submission`), so a run has a head from the moment it is submitted (but one published
another way, as by a FastStream app, until its first hop is committed: a reader then knows it
by what it saw itself, gateway.http.run_feed).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aeonloop.bus.codec import Routable, entry_rank
from aeonloop.bus.compact import unpack
from aeonloop.bus.connection import RedisClient, is_cluster
from aeonloop.bus.keys import (
    HEAD_RECORD,
    LISTING_RECORD,
    WEBHOOK_RECORD,
    Keys,
    head_of,
    shard_tag,
)
from aeonloop.bus.settings import BusSettings
from aeonloop.runs import answer_text, approvals
from aeonloop.runs.answer_text import TextEntry, TextPoller, TextWatch
from aeonloop.runs.approvals import Entry
from aeonloop.runs.cancels import CancelOutcome, request_cancel
from aeonloop.runs.records import RedisRunRecords

#: Entries read per XRANGE when the run's streams are scanned.
SCAN_PAGE = 250
#: SCAN of the answer store (`count_answers`): keys asked for per call, and calls per node at
#: most.
ANSWER_SCAN_COUNT = 1_000
ANSWER_SCAN_CALLS = 100


#: Add a run's request (XADD KEYS[1]) and make it the run's head (KEYS[2], the run's records:
#: field ARGV[2], `ARGV[3] <entry id>`, kept ARGV[4] s) unless the run has one: a request sent
#: again after a failover must not move back a head its first hop has moved on. ARGV[1] is the
#: stream's maxlen, the rest the entry's fields. Returns the entry id.
_SUBMIT = """
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 8))
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3] .. ' ' .. id) == 1 then
  redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  local ms = tonumber(string.match(id, '^(%d+)'))
  redis.call('ZADD', KEYS[3], ms, ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (ms - 2 * ARGV[4] * 1000))
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -tonumber(ARGV[1]) - 1)
  redis.call('EXPIRE', KEYS[3], ARGV[4])
end
return id
"""


@dataclass(frozen=True, slots=True)
class RunHead:
    """Where a run's newest progress event is: its type, its stream (logical name) and its
    entry id, as the commit wrote them (bus.keys.head_of)."""

    kind: str
    stream: str
    entry_id: str

    @classmethod
    def parse(cls, value: bytes | None) -> RunHead | None:
        """The head `value` holds; None for none, or one this version cannot read."""
        parts = value.decode().split(" ") if value else []
        return cls(*parts) if len(parts) == 3 else None


@dataclass(frozen=True, slots=True)
class Listed:
    """A run as a run list has it: its listing (as the client filed it), its answer, and
    its head (where its newest progress event is)."""

    correlation_id: str
    listing: bytes
    answer: bytes | None
    head: RunHead | None = None


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A run as one read finds it."""

    #: Where its newest progress event is; None before its first hop is committed.
    head: RunHead | None
    #: Its stored answer (a FinalAnswerReady's JSON), once answered.
    answer: bytes | None
    #: Its webhook's outcome as the run keeps it (a WebhookSettled's JSON), once settled.
    webhook: bytes | None


class RunStore:
    """Every run's keys, for a reader: `get`, `watch`, `cancel`, `approve`, and the reads
    those build on."""

    def __init__(self, redis: RedisClient, keys: Keys, settings: BusSettings) -> None:
        self._redis = redis
        self._keys = keys
        self._settings = settings
        #: A run's records (runs.records), read by name.
        self.records = RedisRunRecords(redis, keys)
        self._text: TextPoller | None = None

    # -- reading ------------------------------------------------------------------------------

    async def get(self, correlation_id: str) -> RunSnapshot:
        """The run's head, answer and webhook outcome, in one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hmget(self._keys.run_records(correlation_id), [HEAD_RECORD, WEBHOOK_RECORD])
        pipe.get(self._keys.answer(correlation_id))
        (head, webhook), answer = await pipe.execute()
        return RunSnapshot(
            RunHead.parse(None if head is None else unpack(head)),
            None if answer is None else unpack(answer),
            None if webhook is None else unpack(webhook),
        )

    async def answer(self, correlation_id: str) -> bytes | None:
        """The run's stored answer (a FinalAnswerReady's JSON); None until it is answered, and
        once it expired (AEON_ANSWER_TTL_S)."""
        body = await self._redis.get(self._keys.answer(correlation_id))
        return None if body is None else unpack(body)

    async def at_head(self, correlation_id: str, head: RunHead) -> Entry | None:
        """The entry the run's head names; None once trimmed."""
        key = self._keys.stream_of(head.stream, correlation_id)
        return await self.entry(key, head.entry_id)

    async def entry(self, key: str, entry_id: str) -> Entry | None:
        """The entry `entry_id` of the stream `key` (one a reader of the streams saw); None
        once trimmed."""
        found = await self._redis.xrange(key, entry_id, entry_id, count=1)
        return found[0] if found else None

    async def entries_at(
        self, correlation_id: str, streams: Sequence[str], entry_id: str
    ) -> list[Entry]:
        """The entry `entry_id` in each of the run's shard's streams `streams` (an id a reader
        gives: whose it is), read together."""
        keys = [self._keys.stream_of(name, correlation_id) for name in streams]
        replies = await asyncio.gather(
            *(self._redis.xrange(key, entry_id, entry_id, count=1) for key in keys)
        )
        return [entry for reply in replies for entry in reply]

    async def scan(
        self,
        correlation_id: str,
        streams: Sequence[str],
        since_ms: int,
        until: str,
        limit: int,
    ) -> list[Entry]:
        """The run's entries in its shard's streams `streams`, from `since_ms` on to entry
        `until`, at most `limit` entries read per stream: for a run without a head (its request
        not handled yet) whose place a reader gives."""
        start, wanted, found = f"{max(0, since_ms)}-0", correlation_id.encode(), []
        for name in streams:
            key = self._keys.stream_of(name, correlation_id)
            low, scanned = start, 0
            while scanned < limit:
                entries = await self._redis.xrange(key, low, until, count=SCAN_PAGE)
                found += [entry for entry in entries if entry[1].get(b"cid") == wanted]
                scanned += len(entries)
                if len(entries) < SCAN_PAGE:
                    break
                low = b"(" + entries[-1][0]
        return found

    async def mentioned(
        self, correlation_id: str, streams: Sequence[str], limit: int | None
    ) -> bool:
        """Whether an entry of the run's shard's streams `streams` is the run's (the newest
        `limit` of each; None: all of them)."""
        wanted = correlation_id.encode()
        for name in streams:
            key, high, scanned = self._keys.stream_of(name, correlation_id), "+", 0
            while limit is None or scanned < limit:
                entries = await self._redis.xrevrange(key, high, "-", count=SCAN_PAGE)
                if any(fields.get(b"cid") == wanted for _entry, fields in entries):
                    return True
                scanned += len(entries)
                if len(entries) < SCAN_PAGE:
                    break
                high = b"(" + entries[-1][0]
        return False

    async def newest(self, stream: str, limit: int) -> list[Entry]:
        """The newest `limit` entries of the stream `stream` over every shard, newest first."""
        keys = self._keys.streams(stream)
        replies = await asyncio.gather(*(self._redis.xrevrange(k, count=limit) for k in keys))
        entries = [entry for reply in replies for entry in reply]
        return sorted(entries, key=lambda entry: entry_rank(entry[0]), reverse=True)[:limit]

    async def listed(self, limit: int) -> list[Listed]:
        """The newest `limit` runs of the run lists over every shard, newest first, each with
        its listing and its answer (None when not answered): a run is listed as long as its
        answer is kept (AEON_ANSWER_KEEP_S), whatever the streams were trimmed to: its listing
        is in its records, which every commit of the run keeps as long as the answer it sets.
        (The submission drops a list's entries twice that old: the records are gone by then.)"""
        keys = self._keys
        lists = [keys.run_list(shard) for shard in range(keys.shards)]
        replies = await asyncio.gather(
            *(self._redis.zrevrange(key, 0, limit - 1, withscores=True) for key in lists)
        )
        newest = sorted((pair for reply in replies for pair in reply), key=lambda p: -p[1])
        cids = [member.decode() for member, _score in newest[:limit]]
        if not cids:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for cid in cids:
            pipe.hmget(keys.run_records(cid), [LISTING_RECORD, HEAD_RECORD])
            pipe.get(keys.answer(cid))
        found = await pipe.execute()
        return [
            Listed(
                cid,
                listing,
                None if answer is None else unpack(answer),
                RunHead.parse(None if head is None else unpack(head)),
            )
            for cid, (listing, head), answer in zip(cids, found[::2], found[1::2], strict=True)
            if listing  # its records expired: the run is past its keep
        ]

    async def marked(self, correlation_id: str) -> bool:
        """Whether anything of the run is kept beside its streams: a cancel mark or records."""
        keys = self._keys
        marks = (keys.cancel(correlation_id), keys.run_records(correlation_id))
        return bool(await self._redis.exists(*marks))

    async def cancel_requested(self, correlation_id: str) -> bool:
        """Whether the run was cancelled (its answer may still be on its way)."""
        return bool(await self._redis.exists(self._keys.cancel(correlation_id)))

    # -- the answer's text as it is written ---------------------------------------------------

    def watch(self, correlation_id: str) -> TextWatch:
        """Hold the run's answer text, read as it comes by one poller for every run watched
        (runs.answer_text.TextPoller); `release` it when done."""
        if self._text is None:
            self._text = TextPoller(self._redis, self._keys)
        return self._text.watch(correlation_id)

    def release(self, watch: TextWatch) -> None:
        if self._text is not None:
            self._text.release(watch)

    async def text(self, correlation_id: str, after: str = "0-0") -> list[TextEntry]:
        """The run's answer text entries after entry `after`, without waiting."""
        return await answer_text.read(self._redis, self._keys, correlation_id, after)

    async def has_text(self, correlation_id: str) -> bool:
        return bool(await self._redis.exists(self._keys.answer_text(correlation_id)))

    async def aclose(self) -> None:
        if self._text is not None:
            await self._text.aclose()

    # -- control ------------------------------------------------------------------------------

    def submission(
        self,
        correlation_id: str,
        kind: str,
        stream: str,
        fields: dict[str, bytes],
        listing: bytes = b"",
    ) -> tuple[Any, ...]:
        """The command that adds run `correlation_id`'s request (`fields`, of type `kind`) to
        its shard's stream `stream` and makes it the run's head, in one step: a gateway that
        never saw the request finds the run by its head before its first hop is committed.
        The first time, it also files the run in its shard's run list with `listing` (what a
        list shows of it: `listed`), both kept as long as its answer. A command, not a call,
        so the client sends it as it sends a request (alone, or with the WAIT that follows it
        on the same connection)."""
        keys = self._keys
        key = keys.stream_of(stream, correlation_id)
        records = keys.run_records(correlation_id)
        run_list = keys.run_list(keys.shard_of(correlation_id))
        settings = self._settings
        head = head_of(kind, stream)
        args = (settings.stream_maxlen, HEAD_RECORD, head, settings.answer_ttl_s)
        listed = (LISTING_RECORD, listing, correlation_id)
        flat = itertools.chain.from_iterable(fields.items())
        return ("EVAL", _SUBMIT, 3, key, records, run_list, *args, *listed, *flat)

    async def cancel(self, correlation_id: str) -> CancelOutcome:
        """Mark the run cancelled unless it is answered (runs.cancels)."""
        ttl_s = self._settings.answer_ttl_s
        return await request_cancel(self._redis, self._keys, correlation_id, ttl_s)

    async def paused(self, correlation_id: str) -> Entry | None:
        """The run's entry among the runs paused for their plan's approval, if it is paused."""
        return await approvals.find(self._redis, self._keys, correlation_id)

    async def approve(self, correlation_id: str, entry_id: bytes, then: Routable) -> bool:
        """Take the paused entry `entry_id` out and publish `then` in its place, the run's new
        head (runs.approvals.take); False when someone else took it first."""
        settings = self._settings
        return await approvals.take(
            self._redis,
            self._keys,
            self._keys.shard_of(correlation_id),
            entry_id,
            then,
            settings.stream_maxlen,
            settings.answer_ttl_s,
        )


async def count_answers(redis: RedisClient, keys: Keys) -> tuple[int, bool]:
    """Stored answers of every shard, and whether SCAN went through every key (on every master
    of a cluster) before ANSWER_SCAN_CALLS calls per node."""
    sample = "-"
    tag = "{" + shard_tag(keys.shard_of(sample), keys.shards) + "}"
    pattern = keys.answer(sample).removesuffix(sample).replace(tag, "{*}", 1) + "*"
    found: set[bytes] = set()
    exact = True
    nodes: list[Any] = redis.get_primaries() if is_cluster(redis) else [None]
    for node in nodes:
        target = {"target_nodes": node} if node is not None else {}
        cursor: Any = 0
        for _ in range(ANSWER_SCAN_CALLS):
            cursor, names = await redis.scan(
                cursor, match=pattern, count=ANSWER_SCAN_COUNT, **target
            )
            if isinstance(cursor, dict):  # the cluster client answers per node
                cursor = next(iter(cursor.values()), 0)
            found.update(names)
            if not cursor:
                break
        else:
            exact = False
    return len(found), exact
