"""One consumer group on one stream's shards: read in batches, dedupe, handle, commit, recover.

Why not FastStream's subscriber: it reads, decodes, logs and acks one message at a time, and
was measured at ~1,300 µs of CPU per hop against ~80 µs for batched redis-py (docs/bus.md,
"Why Aeon has its own bus"); it also leaves a failed message pending forever. This loop keeps the
same Redis commands but does the per-message work once per batch, and owns the recovery rules
(docs/delivery.md states them and their invariants). It is the read loop, and composes the
parts that hold those rules:

- Reads every shard of its stream (bus.keys), each with its own XREADGROUP of up to
  `max_records` entries, into the shard's own share of the slots (`concurrency` split evenly):
  no shard can starve another, as a shared pool let (readers that just released slots took
  them back before a waiting shard ran).
- Decodes each batch, then locks its events in one round trip (bus.locking: dedupe, takeover
  of a silent consumer's lock, delivery counts given back when no attempt was made). A lock
  that says DONE means the event was handled before: ack and skip. A duplicate of an event
  this consumer is handling waits in flight for it, then locks again.
- Handles each locked event concurrently (bus.retry: the handler retried in-process, then
  dead letters and the route's `give_up`), committing what it gives (bus.commit).
- Claims entries idle past `claim_idle_ms` in anyone's pending list, and keeps its own with a
  heartbeat (bus.recovery).
- Writes refused (bus.writes), or an LLM server away (`Pause`): nothing new is read or
  claimed; locks and commits wait.
- NOGROUP (Redis lost its data): the group is recreated and reading goes on (bus.groups).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from redis.exceptions import ResponseError

from aeonloop.bus.codec import trace_context
from aeonloop.bus.commit import Committer
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.entry import Entry, Ref, forget_body
from aeonloop.bus.groups import Group
from aeonloop.bus.keys import Keys, LockState
from aeonloop.bus.locking import Decoded, Locked, Locks
from aeonloop.bus.recovery import Heartbeat, Recovery
from aeonloop.bus.redis_errors import TRANSIENT, group_missing, said
from aeonloop.bus.retry import Handling
from aeonloop.bus.route import Route
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.waiting import WRITES_POLL_S, Backoff, sleep_unless
from aeonloop.exceptions import DecodeError
from aeonloop.telemetry import metrics, tracing

#: What callers import from here: the consumer, and what a phase gives it (bus.route).
__all__ = ["Consumer", "Pause", "Route", "shares"]

log = logging.getLogger("aeon.bus")


class Pause(Protocol):
    """Something outside Redis that work needs, which can be away for a while (an LLM server:
    llm.outage). While it is not open, the consumer reads and claims nothing new; what is in
    flight waits for it inside its handler, keeping its entry and lock."""

    @property
    def is_open(self) -> bool: ...


class Consumer:
    """One route's consumer: the read loop, and the parts it hands each entry to.

    The parts share this consumer's state by reference (its entries in flight, its stopping
    flag, the write gate), so each can be read on its own while they still act as one."""

    def __init__(
        self,
        redis: RedisClient,
        route: Route,
        settings: BusSettings,
        committer: Committer,
        keys: Keys,
        pauses: Sequence[Pause] = (),
    ) -> None:
        self.route = route
        self._settings = settings
        self._keys = keys
        group = Group(
            redis, keys.group(route.group), keys.streams(route.stream), settings.consumer_name
        )
        self._group = group
        self._gate = committer.gate
        self._pauses = tuple(pauses)
        self._in_flight: dict[Ref, asyncio.Task[None]] = {}
        #: Each shard's own slots: its share of AEON_CONCURRENCY (at least one). A shard reads
        #: only into its share, so no shard can keep another from reading.
        self._shares = shares(settings.concurrency, len(group.stream_keys))
        #: Per shard: its entries in flight (read or claimed, not yet done).
        self._busy = [0] * len(group.stream_keys)
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        #: This phase's Prometheus series; None when metrics are off (telemetry.metrics).
        self._metrics = metrics.for_phase(route.group, lambda: len(self._in_flight))
        self._locks = Locks(
            group, keys, settings.lock_lease_ms, self._gate, route.records, self._stopping
        )
        self._handling = Handling(group, route, settings, committer, self._metrics)
        self._recovery = Recovery(
            group,
            settings,
            self._in_flight,
            self._start,
            self._held_back,
            self._stopping,
            self._metrics,
        )
        self._heartbeat = Heartbeat(group, settings, self._in_flight, self._locks, self._stopping)

    # -- lifecycle -------------------------------------------------------------------------

    async def ensure_group(self) -> None:
        """Create the group (and stream) of every shard if missing (bus.groups)."""
        await self._group.ensure()

    async def run(self) -> None:
        """Read, recover and heartbeat until `stop()`; then let in-flight events finish."""
        await self.ensure_group()
        background = [
            asyncio.create_task(self._recovery.claim_forever(), name=f"claim-{self.route.group}"),
            asyncio.create_task(
                self._heartbeat.beat_forever(), name=f"heartbeat-{self.route.group}"
            ),
        ]
        try:
            shards = range(len(self._group.stream_keys))
            await asyncio.gather(*(self._read_forever(s) for s in shards))
            await self._drain()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    def stop(self) -> None:
        self._stopping.set()
        self._slot_freed.set()

    async def recover_once(self) -> int:
        """Claim entries idle past `claim_idle_ms` in every shard; returns how many were
        taken over (bus.recovery)."""
        return await self._recovery.claim_once()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def handled(self) -> int:
        """Events handled and committed so far (not given up on)."""
        return self._handling.handled

    def _paused(self) -> bool:
        return not all(pause.is_open for pause in self._pauses)

    def _held_back(self) -> bool:
        """Whether new work must wait: entries taken now could only wait in flight."""
        return not self._gate.is_open or self._paused()

    async def _drain(self) -> None:
        tasks = set(self._in_flight.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._settings.shutdown_grace_s)
        pending |= {t for t in self._in_flight.values() if not t.done()}
        left = sum(1 for task in self._in_flight.values() if task in pending)
        for task in pending:
            task.cancel()
        if left:
            log.warning(
                "%s: %d events unfinished at shutdown stay pending for others to claim",
                self._group.name,
                left,
            )
        await asyncio.gather(*pending, return_exceptions=True)

    # -- reading ---------------------------------------------------------------------------

    async def _read_forever(self, shard: int) -> None:
        backoff = Backoff()
        stream_key = self._group.stream_keys[shard]
        while not self._stopping.is_set():
            free = self._shares[shard] - self._busy[shard]
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            if not self._gate.is_open:  # entries read now could only wait in flight
                await sleep_unless(self._stopping, WRITES_POLL_S)
                with contextlib.suppress(ResponseError, *TRANSIENT):
                    await self._gate.probe(self._group.redis, self._keys.write_probe)
                continue
            if self._paused():  # likewise: they would wait for what is away
                await sleep_unless(self._stopping, WRITES_POLL_S)
                continue
            count = min(free, self._settings.max_records)
            try:
                reply = await self._group.redis.xreadgroup(
                    self._group.name,
                    self._group.consumer,
                    {stream_key: ">"},
                    count=count,
                    block=self._settings.block_ms,
                )
            except (ResponseError, *TRANSIENT) as error:
                reply, failed = None, error
            else:
                failed = None
            if failed is not None:
                await self._on_read_error(failed, stream_key, backoff)
                continue
            backoff.reset()
            for _stream, entries in reply or ():
                self._start([Entry(shard, entry_id, fields) for entry_id, fields in entries])

    async def _on_read_error(self, error: Exception, stream_key: str, backoff: Backoff) -> None:
        """Wait out an outage, or recreate a group Redis lost."""
        name = self._group.name
        if isinstance(error, TRANSIENT):
            await backoff.wait(f"{name}: reading failed", error)
        elif group_missing(error):
            log.warning("%s: group or stream is gone (Redis lost data?); recreating", name)
            try:
                await self._group.ensure_in(stream_key)
            except (ResponseError, *TRANSIENT) as trouble:
                await backoff.wait(f"{name}: recreating the group failed", trouble)
        else:
            log.error("%s: %s", name, error)
            await asyncio.sleep(1.0)

    def _start(self, batch: list[Entry]) -> None:
        """Take a batch read or claimed into its slots, and process it in a task of its own."""
        fresh = [d for d in batch if d.ref not in self._in_flight]
        if not fresh:
            return
        task = asyncio.create_task(self._process_batch(fresh))
        for delivery in fresh:
            self._in_flight[delivery.ref] = task
            self._busy[delivery.shard] += 1

    # -- processing ------------------------------------------------------------------------

    async def _process_batch(self, batch: list[Entry]) -> None:
        """Decode and lock the whole batch in one round trip, then handle each concurrently.

        Nothing escapes this task: what fails is logged and its entries stay pending, for this
        consumer's or another's recovery.
        """
        owned: list[Locked] = []
        try:
            events: list[Decoded] = []
            rejects: list[tuple[Entry, str]] = []
            for delivery in batch:
                try:
                    event = self._handling.decode(delivery)
                    if tracing.on():
                        delivery.trace = trace_context(delivery.fields)
                    events.append((delivery, event))
                    forget_body(delivery)
                except DecodeError as error:
                    rejects.append((delivery, f"undecodable: {error}"))
                except Exception as error:  # a decoder bug must not hold the batch for good
                    rejects.append((delivery, f"undecodable ({type(error).__name__}): {error}"))
            owned = await self._locks.acquire_patiently(events)
            work = (
                *(self._handling.give_up(d, None, reason, None) for d, reason in rejects),
                *(self._process(d, e, st) for d, e, st in owned),
            )
            for outcome in await asyncio.gather(*work, return_exceptions=True):
                if isinstance(outcome, Exception):
                    log.warning("%s: left pending for a retry: %s", self._group.name, outcome)
        except Exception as error:  # a bug or an outage: the entries stay pending, not lost
            log.warning(
                "%s: %d entries left pending: %s", self._group.name, len(batch), said(error)
            )
        finally:
            for delivery, event, state in owned:  # a no-op for those `_process` released
                if state is LockState.MINE:
                    self._locks.release(self._locks.key(delivery, event), delivery.ref)
            for delivery in batch:
                if self._in_flight.pop(delivery.ref, None) is not None:
                    self._busy[delivery.shard] -= 1
            self._slot_freed.set()

    async def _process(self, delivery: Entry, event: Any, state: LockState) -> None:
        try:
            await self._process_locked(delivery, event, state)
        finally:
            delivery.records = {}  # the run's history read for it: not kept for the batch

    async def _process_locked(self, delivery: Entry, event: Any, state: LockState) -> None:
        lock_key = self._locks.key(delivery, event)
        if state is LockState.DONE:
            await self._handling.commit(delivery, [], lock_key=None)
            if self._metrics is not None:
                self._metrics.duplicate.inc()
            return
        if state is LockState.BUSY:
            await self._after_the_copy_in_hand(delivery, event, lock_key)
            return
        try:  # the lock is held until committed, however long that takes (the heartbeat)
            await self._handling.handle(delivery, event, lock_key)
        finally:
            self._locks.release(lock_key, delivery.ref)

    async def _after_the_copy_in_hand(self, delivery: Entry, event: Any, lock_key: str) -> None:
        """A busy entry of an event this consumer is handling from another entry stays in
        flight (so the heartbeat keeps it this consumer's, and nobody claims it and takes the
        lock over) until that handling ends; then it is locked again like any entry, and finds
        the event done, or takes it on if that handling failed. A busy entry of an event
        handled elsewhere is left pending, to be claimed again later."""
        if not await self._locks.outwait_copy(lock_key, delivery.ref):
            return
        for again in await self._locks.acquire_patiently([(delivery, event)]):
            await self._process(*again)


def shares(concurrency: int, shards: int) -> list[int]:
    """Each shard's slots: `concurrency` split as evenly as it goes, at least one each (with
    fewer slots than shards, the consumer holds one entry per shard at most)."""
    base, extra = divmod(concurrency, shards)
    return [max(1, base + (1 if shard < extra else 0)) for shard in range(shards)]
