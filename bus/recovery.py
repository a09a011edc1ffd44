"""Recovery and heartbeat: what a dead consumer left is claimed, what a live one holds is kept.

Both rest on a pending entry's idle time (docs/delivery.md, "Recovery" and "Keeping what is in
flight"):

- the heartbeat resets it for every entry this consumer has in flight (XCLAIM JUSTID with
  min-idle 0, which is not a delivery) and extends the locks in hand (bus.locking), every
  `min(lease, claim idle) / 3`: a slow LLM call, or a commit waiting for Redis to take writes
  again, is never mistaken for a dead worker;
- so an entry idle longer than AEON_CLAIM_IDLE_MS has had no heartbeat for that long: its
  consumer is dead or stuck, and recovery claims it (XPENDING, then XCLAIM), remembering whom
  from, so that locking takes its lock over at once. Entries trimmed from the stream while
  pending are acked away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from aeonloop.bus.entry import Entry, Ref
from aeonloop.bus.groups import Group
from aeonloop.bus.locking import Locks
from aeonloop.bus.redis_errors import TRANSIENT, said
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.waiting import WRITES_POLL_S, Backoff, sleep_unless
from aeonloop.telemetry.metrics import PhaseMetrics

log = logging.getLogger("aeon.bus")

#: The consumer's entries in flight (read or claimed, not yet done), by ref.
InFlight = Mapping[Ref, asyncio.Task[None]]


class Recovery:
    """Claims entries idle past AEON_CLAIM_IDLE_MS in anyone's pending list, into free slots."""

    def __init__(
        self,
        group: Group,
        settings: BusSettings,
        in_flight: InFlight,
        start: Callable[[list[Entry]], None],
        held_back: Callable[[], bool],
        stopping: asyncio.Event,
        phase_metrics: PhaseMetrics | None,
    ) -> None:
        self._group = group
        self._settings = settings
        self._in_flight = in_flight
        #: Hands claimed entries to the consumer, as it does the entries it reads.
        self._start = start
        #: Whether new work must wait (Redis refuses writes, or an LLM server is away): a
        #: claimed entry could only wait in flight.
        self._held_back = held_back
        self._stopping = stopping
        self._metrics = phase_metrics

    async def claim_forever(self) -> None:
        """Claim idle entries every AEON_CLAIM_INTERVAL_S (at once again after a claim that
        found some) until the worker stops; never let claiming stop for good."""
        backoff = Backoff()
        while not self._stopping.is_set():
            if self._held_back():
                await sleep_unless(self._stopping, WRITES_POLL_S)
                continue
            try:
                claimed = await self.claim_once()
            except TRANSIENT as error:
                await backoff.wait(f"{self._group.name}: claiming failed", error)
                continue
            except Exception as error:  # never let claiming stop for good (NOGROUP: see reading)
                log.warning("%s: claiming failed: %s", self._group.name, said(error))
                await sleep_unless(self._stopping, 1.0)
                continue
            backoff.reset()
            if not claimed:
                await sleep_unless(self._stopping, self._settings.claim_interval_s)

    async def claim_once(self) -> int:
        """Claim entries idle past `claim_idle_ms` in every shard; returns how many were
        taken over."""
        claimed = 0
        for shard in range(len(self._group.stream_keys)):
            claimed += await self._claim_shard(shard)
        return claimed

    async def _claim_shard(self, shard: int) -> int:
        # Counted over every shard: whose entries a dead consumer left does not matter.
        free = self._settings.concurrency - len(self._in_flight)
        if free <= 0 or self._stopping.is_set():
            return 0
        group = self._group
        stream_key = group.stream_keys[shard]
        pending = await group.redis.xpending_range(
            stream_key,
            group.name,
            min="-",
            max="+",
            count=min(free, self._settings.max_records),
            idle=self._settings.claim_idle_ms,
        )
        seen = {
            p["message_id"]: p for p in pending if (shard, p["message_id"]) not in self._in_flight
        }
        if not seen:
            return 0
        entries = await group.redis.xclaim(
            stream_key, group.name, group.consumer, self._settings.claim_idle_ms, list(seen)
        )
        present = [(entry_id, fields) for entry_id, fields in entries if fields]
        await self._ack_vanished(stream_key, set(seen) - {entry_id for entry_id, _ in present})
        self._start(
            [
                Entry(shard, i, f, seen[i]["consumer"], seen[i]["times_delivered"] + 1)
                for i, f in present
            ]
        )
        if present:
            log.info("%s: claimed %d idle entries", group.name, len(present))
            if self._metrics is not None:
                self._metrics.claimed.inc(len(present))
        return len(present)

    async def _ack_vanished(self, stream_key: str, entry_ids: set[bytes]) -> None:
        """Entries trimmed from the stream while pending can never be handled: drop them.

        XCLAIM also skips entries another consumer claimed (or heartbeated) since XPENDING, so
        an entry counts as vanished only if it is really gone from the stream.
        """
        if not entry_ids:
            return
        ids = list(entry_ids)
        pipe = self._group.redis.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(stream_key, entry_id, entry_id)
        found = await pipe.execute()
        gone = [entry_id for entry_id, entries in zip(ids, found, strict=True) if not entries]
        if gone:
            await self._group.redis.xack(stream_key, self._group.name, *gone)


class Heartbeat:
    """Keeps what this consumer is working on: reclaims its entries, extends its locks."""

    def __init__(
        self,
        group: Group,
        settings: BusSettings,
        in_flight: InFlight,
        locks: Locks,
        stopping: asyncio.Event,
    ) -> None:
        self._group = group
        self._settings = settings
        self._in_flight = in_flight
        self._locks = locks
        self._stopping = stopping

    async def beat_forever(self) -> None:
        """Beat while anything is in flight, until the worker stops and its entries are done
        (a draining worker's entries must not be claimed from under it)."""
        settings = self._settings
        interval = min(settings.lock_lease_ms, settings.claim_idle_ms) / 3000
        while not self._stopping.is_set() or self._in_flight:
            await asyncio.sleep(interval)
            if not self._in_flight:
                continue
            try:
                await self.beat_once()
            except Exception as error:  # a heartbeat that stopped would let others take over
                log.warning("%s: heartbeat failed: %s", self._group.name, said(error))

    async def beat_once(self) -> None:
        """Every entry in flight stays this consumer's, locked or still waiting for its lock.

        XCLAIM and PEXPIRE are allowed while Redis refuses writes, so waiting work is kept.
        """
        group = self._group
        pipe = group.redis.pipeline(transaction=False)
        by_shard: dict[int, list[bytes]] = {}
        for shard, entry_id in list(self._in_flight):
            by_shard.setdefault(shard, []).append(entry_id)
        for shard, entry_ids in by_shard.items():
            pipe.xclaim(
                group.stream_keys[shard], group.name, group.consumer, 0, entry_ids, justid=True
            )
        self._locks.extend(pipe)
        await pipe.execute()
