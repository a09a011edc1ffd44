"""One consumer group on one stream's shards: read in batches, dedupe, handle, commit, recover.

Why not FastStream's subscriber: it reads, decodes, logs and acks one message at a time, and
was measured at ~1,300 µs of CPU per hop against ~80 µs for batched redis-py (docs/architecture.md,
"Why Aeon has its own bus"); it also leaves a failed message pending forever. This loop keeps the
same Redis commands but does the per-message work once per batch, and owns the recovery rules
(docs/delivery.md states them and their invariants):

- Reads every shard of its stream (bus.keys), each with its own XREADGROUP of up to
  `max_records` entries, into the shard's own share of the slots (`concurrency` split evenly):
  no shard can starve another, as a shared pool let (readers that just released slots took
  them back before a waiting shard ran).
- Locks: before handling, each event is locked for this consumer (pipelined for the batch). A
  lock that says DONE means the event was handled before: ack and skip. A first delivery takes
  the lock only if it is free (`SET NX PX lease`); a lock held by another live consumer (a
  duplicate entry of the same event) leaves the entry pending until that consumer is done.
  A duplicate of an event this consumer is handling waits in flight for it, then locks again.
- Takeover: an entry claimed from a consumer that went silent takes the lock over at once when
  that consumer (or this one) still holds it: its holder is the consumer that stopped
  answering, and waiting for its lease would only spend deliveries.
- Attempts: an entry's delivery count (XPENDING) counts its attempts, towards `max_deliveries`.
  A delivery that does not become an attempt (the lock was busy, or Redis refused the lock and
  the worker stopped waiting) gives its count back (XCLAIM RETRYCOUNT), so busy claims and
  deliveries while Redis refused writes spend nothing.
- A handler that raises is retried in-process with backoff; after `handler_attempts` the event
  goes to dead letters and the route's `give_up` decides what carries the run on.
- Heartbeat: every entry in flight is re-claimed by its owner (XCLAIM JUSTID, which does not
  count as a delivery) and its lock extended, so a slow LLM call, or a commit waiting for Redis
  to take writes again, is never mistaken for a dead worker.
- Recovery: entries idle longer than `claim_idle_ms` in anyone's pending list are claimed.
- Writes refused (bus.writes): nothing new is read or claimed; locks and commits wait.
- NOGROUP (Redis lost its data): the group is recreated and reading goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, cast

from pydantic import BaseModel
from redis.exceptions import ResponseError

from aeonloop.bus.codec import Fields, Routable, decode, trace_context
from aeonloop.bus.commit import Commit, Committer
from aeonloop.bus.compact import unpack
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import Keys, LockState
from aeonloop.bus.records import RunRecord
from aeonloop.bus.redis_errors import TRANSIENT, group_exists, group_missing, refuses_writes, said
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import DecodeError
from aeonloop.telemetry import metrics, tracing
from aeonloop.telemetry.hop import Hop

log = logging.getLogger("aeon.bus")

#: What a handler gives: its events, and the run records they refer to (bus.records).
Output = Routable | RunRecord
#: A handler is told what the bus knows of the delivery of its event (bus.delivery).
Handler = Callable[[Any, Delivery], Awaitable[Sequence[Output]]]
GiveUp = Callable[[DeadLetter, Delivery], Sequence[Output]]
#: How often a loop held back by refused writes looks again.
_WRITES_POLL_S = 0.5

#: Extend a lock only while it is this consumer's: never shorten a "done" mark to a lease.
#: PEXPIRE, unlike SET, is allowed while Redis refuses writes. KEYS: lock. ARGV: me, lease ms.
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

#: Lock a claimed entry's event, taking it over from the consumer it was claimed from (or
#: from this one). KEYS: the lock. ARGV: me, claimed-from, lease ms. Returns a LockState.
_TAKE_OVER = """
local holder = redis.call('GET', KEYS[1])
if holder == 'done' then return 'done' end
if holder and holder ~= ARGV[1] and holder ~= ARGV[2] then return 'busy' end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 'mine'
"""


@dataclass(frozen=True)
class Route:
    """What one phase consumes, how it handles it, and what carries a run on when it gives up."""

    stream: str
    group: str
    types: Mapping[str, type[BaseModel]]
    handle: Handler
    give_up: GiveUp
    #: The run records (bus.records) the handler will read for an event: read with its lock,
    #: in the same round trip, and handed to the handler in its `Delivery`.
    records: Callable[[Any], Sequence[str]] | None = None
    #: Tries of a failing handler within one delivery, and the first wait between two (it
    #: doubles): None takes AEON_HANDLER_ATTEMPTS and AEON_RETRY_BACKOFF_S. A route whose
    #: tries depend on something outside Aeon (a webhook's receiver) sets its own.
    attempts: int | None = None
    backoff_s: float | None = None


#: An entry in hand: its shard and its id (ids are unique only within one shard's stream).
Ref = tuple[int, bytes]


@dataclass(slots=True)
class Entry:
    """One delivery of a stream entry, while it is in this consumer's hands."""

    shard: int
    entry_id: bytes
    fields: Fields
    #: The consumer this entry was claimed from; None for a first delivery (XREADGROUP).
    claimed_from: bytes | None = None
    #: Times delivered, this one included: the attempt this is, if it takes the lock.
    deliveries: int = 1
    #: The trace context the entry carried, kept at decode when tracing is on.
    trace: dict[str, str] | None = None
    #: The run records read with the lock (Route.records), by (correlation id, name).
    records: dict[tuple[str, str], bytes] = field(default_factory=dict)

    @property
    def ref(self) -> Ref:
        return (self.shard, self.entry_id)

    def told(self, attempt: int = 1) -> Delivery:
        """What its handler (or its route's give_up) is told of this delivery: it may have been
        handled before when it was claimed from another consumer, or is a retry (`attempt`,
        within this delivery, past the first); it is the event's try number `tries`, counting
        one for each earlier delivery (each was cut short, or it would not be delivered again)."""
        return Delivery(
            self.claimed_from is not None or attempt > 1,
            MappingProxyType(self.records),
            tries=self.deliveries - 1 + attempt,
        )


class Pause(Protocol):
    """Something outside Redis that work needs, which can be away for a while (an LLM server:
    llm.outage). While it is not open, the consumer reads and claims nothing new; what is in
    flight waits for it inside its handler, keeping its entry and lock."""

    @property
    def is_open(self) -> bool: ...


class Consumer:
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
        self._redis = redis
        self._settings = settings
        self._committer = committer
        self._keys = keys
        self._stream_keys = keys.streams(route.stream)
        self._group = keys.group(route.group)
        self._gate = committer.gate
        self._pauses = tuple(pauses)
        self._in_flight: dict[Ref, asyncio.Task[None]] = {}
        #: The lock key of every event this consumer is handling: the entry handling it, and
        #: an asyncio.Event set once that ends (committed, or given up on). Another entry of
        #: the same event waits for it. Registered when the lock is found MINE, in the same
        #: step, so two entries of one event are never both MINE here.
        self._handling: dict[str, tuple[Ref, asyncio.Event]] = {}
        #: Each shard's own slots: its share of AEON_CONCURRENCY (at least one). A shard reads
        #: only into its share, so no shard can keep another from reading.
        self._shares = shares(settings.concurrency, len(self._stream_keys))
        #: Per shard: its entries in flight (read or claimed, not yet done).
        self._busy = [0] * len(self._stream_keys)
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self.handled = 0
        #: This phase's Prometheus series; None when metrics are off (telemetry.metrics).
        self._metrics = metrics.for_phase(route.group, lambda: len(self._in_flight))

    # -- lifecycle -------------------------------------------------------------------------

    async def ensure_group(self) -> None:
        """Create the group (and stream) of every shard if missing; start from the beginning
        so nothing published before the first worker started is skipped."""
        for stream_key in self._stream_keys:
            await self._ensure_group_of(stream_key)

    async def _ensure_group_of(self, stream_key: str) -> None:
        try:
            await self._redis.xgroup_create(stream_key, self._group, id="0", mkstream=True)
        except ResponseError as error:
            if group_exists(error):
                return
            if not (refuses_writes(error) and await self._group_exists(stream_key)):
                raise  # a worker starting while Redis refuses writes needs its group made

    async def _group_exists(self, stream_key: str) -> bool:
        try:
            groups = await self._redis.xinfo_groups(stream_key)
        except ResponseError:  # no such stream
            return False
        return any(g["name"] == self._group.encode() for g in groups)

    async def run(self) -> None:
        """Read, recover and heartbeat until `stop()`; then let in-flight events finish."""
        await self.ensure_group()
        background = [
            asyncio.create_task(self._recover_forever(), name=f"claim-{self.route.group}"),
            asyncio.create_task(self._heartbeat_forever(), name=f"heartbeat-{self.route.group}"),
        ]
        try:
            await asyncio.gather(*(self._read_forever(s) for s in range(len(self._stream_keys))))
            await self._drain()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    def stop(self) -> None:
        self._stopping.set()
        self._slot_freed.set()

    def _paused(self) -> bool:
        return not all(pause.is_open for pause in self._pauses)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

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
                self._group,
                left,
            )
        await asyncio.gather(*pending, return_exceptions=True)

    # -- reading ---------------------------------------------------------------------------

    async def _read_forever(self, shard: int) -> None:
        backoff = _Backoff()
        stream_key = self._stream_keys[shard]
        while not self._stopping.is_set():
            free = self._shares[shard] - self._busy[shard]
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            if not self._gate.is_open:  # entries read now could only wait in flight
                await self._sleep(_WRITES_POLL_S)
                with contextlib.suppress(ResponseError, *TRANSIENT):
                    await self._gate.probe(self._redis, self._keys.write_probe)
                continue
            if self._paused():  # likewise: they would wait for what is away
                await self._sleep(_WRITES_POLL_S)
                continue
            count = min(free, self._settings.max_records)
            try:
                reply = await self._redis.xreadgroup(
                    self._group,
                    self._settings.consumer_name,
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

    async def _on_read_error(self, error: Exception, stream_key: str, backoff: _Backoff) -> None:
        """Wait out an outage, or recreate a group Redis lost."""
        if isinstance(error, TRANSIENT):
            await backoff.wait(f"{self._group}: reading failed", error)
        elif group_missing(error):
            log.warning("%s: group or stream is gone (Redis lost data?); recreating", self._group)
            try:
                await self._ensure_group_of(stream_key)
            except (ResponseError, *TRANSIENT) as trouble:
                await backoff.wait(f"{self._group}: recreating the group failed", trouble)
        else:
            log.error("%s: %s", self._group, error)
            await asyncio.sleep(1.0)

    def _start(self, batch: list[Entry]) -> None:
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
        owned: list[tuple[Entry, Any, LockState]] = []
        try:
            events, rejects = [], []
            for delivery in batch:
                try:
                    event = self._decode(delivery)
                    if tracing.on():
                        delivery.trace = trace_context(delivery.fields)
                    events.append((delivery, event))
                    _forget_body(delivery)
                except DecodeError as error:
                    rejects.append((delivery, f"undecodable: {error}"))
                except Exception as error:  # a decoder bug must not hold the batch for good
                    rejects.append((delivery, f"undecodable ({type(error).__name__}): {error}"))
            owned = await self._acquire_patiently(events)
            work = (
                *(self._give_up(d, None, reason, None) for d, reason in rejects),
                *(self._process(d, e, st) for d, e, st in owned),
            )
            for outcome in await asyncio.gather(*work, return_exceptions=True):
                if isinstance(outcome, Exception):
                    log.warning("%s: left pending for a retry: %s", self._group, outcome)
        except Exception as error:  # a bug or an outage: the entries stay pending, not lost
            log.warning("%s: %d entries left pending: %s", self._group, len(batch), said(error))
        finally:
            for delivery, event, state in owned:  # a no-op for those `_process` released
                if state is LockState.MINE:
                    self._release(self._lock_key(delivery, event), delivery.ref)
            for delivery in batch:
                if self._in_flight.pop(delivery.ref, None) is not None:
                    self._busy[delivery.shard] -= 1
            self._slot_freed.set()

    def _decode(self, delivery: Entry) -> Any:
        return decode(delivery.fields, self.route.types, self._settings.max_event_bytes)

    async def _reload(self, delivery: Entry) -> Any | None:
        """A fresh decode of the entry, re-read from the stream (None if it is gone).

        Handlers own the event they are given and may change it, so a retry, or the dead
        letter after the last one, must not see what a failed attempt left behind.
        """
        stream_key = self._stream_keys[delivery.shard]
        found = await self._redis.xrange(stream_key, delivery.entry_id, delivery.entry_id)
        if not found:
            return None
        delivery.fields = found[0][1]
        try:
            return self._decode(delivery)
        except DecodeError:
            return None

    async def _acquire_patiently(
        self, events: list[tuple[Entry, Any]]
    ) -> list[tuple[Entry, Any, LockState]]:
        """Lock the events, waiting out a Redis that is away or refuses writes; [] if the
        worker stops first (the entries stay pending for whoever claims them)."""
        backoff = _Backoff()
        while True:
            try:
                owned = await self._acquire(events)
            except TRANSIENT as error:
                await backoff.wait(f"{self._group}: locking failed", error)
            except ResponseError as error:
                if not refuses_writes(error):
                    raise
                self._gate.refused(error)
                await backoff.wait(f"{self._group}: locking refused", error, quiet=True)
            else:
                backoff.reset()
                if _wrote(owned):
                    self._gate.accepted()
                return owned
            if self._stopping.is_set():
                await self._not_attempts([delivery for delivery, _ in events])
                return []

    async def _acquire(self, events: list[tuple[Entry, Any]]) -> list[tuple[Entry, Any, LockState]]:
        """Lock each event for this consumer: MINE, DONE (handled before) or BUSY; in the same
        round trip, read the run records its handler will read (Route.records)."""
        if not events:
            return []
        settings = self._settings
        pipe = self._redis.pipeline(transaction=False)
        me = settings.consumer_name.encode()
        keys = [self._lock_key(delivery, event) for delivery, event in events]
        # Another entry of an event in hand here, or earlier in this batch: BUSY, no question
        # to ask (it waits for that one in `_process`).
        in_hand = set(self._handling)
        asked, wanted = [], []
        for (delivery, event), key in zip(events, keys, strict=True):
            asked.append(key not in in_hand)
            in_hand.add(key)
            wanted.append(self._records_wanted(event) if asked[-1] else [])
            if not asked[-1]:
                continue
            if delivery.claimed_from is None:
                pipe.set(key, me, nx=True, px=settings.lock_lease_ms)
            else:
                pipe.eval(_TAKE_OVER, 1, key, me, delivery.claimed_from, settings.lock_lease_ms)
            if wanted[-1]:
                cid = event.correlation_id
                pipe.hmget(self._keys.run_records(cid, delivery.shard), wanted[-1])
        replies = iter(await pipe.execute(raise_on_error=False))
        states: list[LockState | None] = []  # None: a first delivery's lock was held
        for (delivery, event), ask, names in zip(events, asked, wanted, strict=True):
            if not ask:
                states.append(LockState.BUSY)
            elif delivery.claimed_from is None:
                states.append(LockState.MINE if _raised(next(replies)) else None)
            else:
                states.append(LockState(_raised(next(replies)).decode()))
            values = next(replies) if names else None
            if isinstance(values, list):  # a read that failed: the handler reads them itself
                cid = event.correlation_id
                found = zip(names, values, strict=True)
                delivery.records = {
                    (cid, n): unpack(value) for n, value in found if value is not None
                }
        # What is found MINE is in hand at once, before any other round trip, so another batch
        # reading a copy of the event meanwhile finds it BUSY here.
        self._take_in_hand(events, keys, states)
        held = [i for i, state in enumerate(states) if state is None]
        if held:
            try:
                holders = await self._holders([keys[i] for i in held], me)
            except BaseException:  # the retry locks again: nothing may stay in hand meanwhile
                for (delivery, _), key, state in zip(events, keys, states, strict=True):
                    if state is LockState.MINE:
                        self._release(key, delivery.ref)
                raise
            for i, state in zip(held, holders, strict=True):
                states[i] = state
            self._take_in_hand(
                [events[i] for i in held], [keys[i] for i in held], [states[i] for i in held]
            )
        owned = [(d, e, cast(LockState, st)) for (d, e), st in zip(events, states, strict=True)]
        await self._not_attempts([d for d, _, state in owned if state is LockState.BUSY])
        return owned

    def _take_in_hand(
        self, events: list[tuple[Entry, Any]], keys: list[str], states: list[LockState | None]
    ) -> None:
        """Register each event found MINE as in hand; one another entry of the event got to
        first is BUSY instead (states are updated in place)."""
        for i, ((delivery, _), key, state) in enumerate(zip(events, keys, states, strict=True)):
            if state is not LockState.MINE:
                continue
            if key in self._handling:
                states[i] = LockState.BUSY
            else:
                self._handling[key] = (delivery.ref, asyncio.Event())

    async def _holders(self, keys: list[str], me: bytes) -> list[LockState]:
        """The states of locks a first delivery found held, from their holders: a second
        round trip, taken only then (a duplicate entry, or a retried locking round trip), so
        a free lock costs one command.

        Held by this consumer yet not in hand: left by a locking round trip that failed half-way
        and is retried now, or taken by another entry of the event locked at the same time
        (which `_take_in_hand` tells apart by what is in hand).
        """
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
        return [
            LockState.MINE if holder == me else _held(holder) for holder in await pipe.execute()
        ]

    def _records_wanted(self, event: Any) -> Sequence[str]:
        """The run records to read with the event's lock; none if the route names none (or
        naming them fails: the handler then reads them itself)."""
        if self.route.records is None:
            return []
        try:
            return self.route.records(event)
        except Exception as error:
            log.warning("%s: run records to read not known: %s", self._group, error)
            return []

    async def _not_attempts(self, deliveries: list[Entry]) -> None:
        """Give back the delivery each of these counted: none started the handler.

        XCLAIM with RETRYCOUNT sets the count (allowed while Redis refuses writes); its
        min-idle of 0 keeps the entry this consumer's until it is claimed again as idle.
        """
        if not deliveries:
            return
        pipe = self._redis.pipeline(transaction=False)
        for delivery in deliveries:
            pipe.xclaim(
                self._stream_keys[delivery.shard],
                self._group,
                self._settings.consumer_name,
                0,
                [delivery.entry_id],
                retrycount=delivery.deliveries - 1,
                justid=True,
            )
        try:
            await pipe.execute()
        except (ResponseError, *TRANSIENT) as error:  # then the count stays one too high
            log.warning("%s: delivery counts not given back: %s", self._group, error)

    def _lock_key(self, delivery: Entry, event: Any) -> str:
        return self._keys.lock(delivery.shard, self._group, event.event_id)

    async def _process(self, delivery: Entry, event: Any, state: LockState) -> None:
        try:
            await self._process_locked(delivery, event, state)
        finally:
            delivery.records = {}  # the run's history read for it: not kept for the batch

    async def _process_locked(self, delivery: Entry, event: Any, state: LockState) -> None:
        lock_key = self._lock_key(delivery, event)
        if state is LockState.DONE:
            await self._commit(delivery, [], lock_key=None)
            if self._metrics is not None:
                self._metrics.duplicate.inc()
            return
        if state is LockState.BUSY:
            await self._after_the_copy_in_hand(delivery, event, lock_key)
            return
        try:  # the lock is held until committed, however long that takes (the heartbeat)
            await self._handle(delivery, event, lock_key)
        finally:
            self._release(lock_key, delivery.ref)

    def _release(self, lock_key: str, ref: Ref) -> None:
        """The entry `ref` no longer handles its event: wake the entries waiting for it."""
        held = self._handling.get(lock_key)
        if held is not None and held[0] == ref:
            del self._handling[lock_key]
            held[1].set()

    async def _after_the_copy_in_hand(self, delivery: Entry, event: Any, lock_key: str) -> None:
        """A busy entry of an event this consumer is handling from another entry stays in
        flight (so the heartbeat keeps it this consumer's, and nobody claims it and takes the
        lock over) until that handling ends; then it is locked again like any entry, and finds
        the event done, or takes it on if that handling failed. A busy entry of an event
        handled elsewhere is left pending, to be claimed again later."""
        held = self._handling.get(lock_key)
        if held is None or held[0] == delivery.ref:
            return
        await held[1].wait()
        for again in await self._acquire_patiently([(delivery, event)]):
            await self._process(*again)

    async def _handle(self, delivery: Entry, event: Any, lock_key: str) -> None:
        """Handle a locked event and commit what it gives, or give up on it; the hop records
        where the time went (telemetry.hop)."""
        hop = Hop.start(
            self._metrics,
            stream_key=self._stream_keys[delivery.shard],
            group=self._group,
            entry_id=delivery.entry_id,
            carrier=delivery.trace,
            event=event,
            deliveries=delivery.deliveries,
        )
        failure = "stopped before its commit was confirmed"  # unless _handle_in says otherwise
        try:
            failure = await self._handle_in(hop, delivery, event, lock_key)
        finally:
            hop.end(failure)

    async def _handle_in(self, hop: Hop, delivery: Entry, event: Any, lock_key: str) -> str:
        """`_handle`'s work; returns why the event was given up on ("" when it was not)."""
        if delivery.deliveries > self._settings.max_deliveries:
            reason = (
                f"{delivery.deliveries - 1} attempts were cut short (their worker died or was "
                "stopped mid-way); the event may be what kills them"
            )
            delivery.deliveries -= 1  # this one is not an attempt: the dead letter counts those
            event = await self._reload(delivery) or event
            # Each earlier delivery made a try: `told(1)` counts them all (deliveries - 1 + 1).
            return await self._give_up(delivery, event, reason, lock_key, hop, attempts=1)
        with hop.handling():
            outputs, error = await self._handle_with_retries(delivery, event)
        if error:
            attempts = self._attempts
            reason = f"handler failed {attempts} times: {error}"
            event = await self._reload(delivery) or event
            return await self._give_up(delivery, event, reason, lock_key, hop, attempts)
        try:
            with hop.committing() as trace:
                await self._commit(delivery, outputs, lock_key, trace=trace)
        except ValueError as error:  # an output that cannot be encoded
            reason = f"an output of the handler cannot be stored: {error}"
            event = await self._reload(delivery) or event
            return await self._give_up(delivery, event, reason, lock_key, hop)
        self.handled += 1
        if self._metrics is not None:
            self._metrics.handled.inc()
        return ""

    async def _handle_with_retries(
        self, delivery: Entry, event: Any
    ) -> tuple[Sequence[Output], str]:
        """The handler's outputs, or the last error after the route's attempts."""
        attempts = self._attempts
        backoff_s = self.route.backoff_s
        if backoff_s is None:
            backoff_s = self._settings.retry_backoff_s
        error_text = ""
        for attempt in range(1, attempts + 1):
            if attempt > 1 and self._metrics is not None:
                self._metrics.retried.inc()
            try:
                if attempt > 1:
                    event = await self._reload(delivery)
                    if event is None:
                        return (), "the entry left the stream before it could be retried"
                return await self.route.handle(event, delivery.told(attempt)), ""
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a handler bug or an outage; retried, then dead-lettered
                error_text = f"{type(error).__name__}: {error}"
                if self._metrics is not None:
                    self._metrics.failed.inc()
                log.warning(
                    "%s: handling %s failed (attempt %d/%d): %s",
                    self._group,
                    event.event_id,
                    attempt,
                    attempts,
                    error_text,
                )
                if attempt < attempts:
                    await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
        return (), error_text

    @property
    def _attempts(self) -> int:
        """Tries of a failing handler within one delivery: the route's, else the bus's."""
        return self.route.attempts or self._settings.handler_attempts

    async def _give_up(
        self,
        delivery: Entry,
        event: Any | None,
        reason: str,
        lock_key: str | None,
        hop: Hop | None = None,
        attempts: int = 0,
    ) -> str:
        """Dead-letter the entry and commit what carries its run on; returns `reason`.
        `attempts`: the handler's tries in this delivery (none when it was not called)."""
        dead = DeadLetter(
            stream=self.route.stream,
            group=self._group,
            entry_id=delivery.entry_id.decode(),
            fields=delivery.fields,
            reason=reason,
            attempts=delivery.deliveries,
            event=event,
        )
        try:  # give_up may use the run's records read with the lock
            outputs = list(self.route.give_up(dead, delivery.told(attempts)))
        except Exception as error:  # give_up must never keep an entry from leaving
            log.error("%s: give_up failed for %s: %s", self._group, dead.entry_id, error)
            outputs = []
        if hop is None:  # never decoded: what carries its run on continues the entry's trace
            trace = tracing.relayed(trace_context(delivery.fields)) if tracing.on() else {}
            dead_id = await self._commit(delivery, outputs, lock_key, dead, trace)
        else:
            with hop.committing() as trace:
                dead_id = await self._commit(delivery, outputs, lock_key, dead, trace)
        if self._metrics is not None:
            self._metrics.dead.inc()
        log.error(
            "%s: dead-lettered %s entry %s as %s (`aeon dlq replay %s` puts it back): %s",
            self._group,
            self.route.stream,
            dead.entry_id,
            dead_id,
            dead_id,
            reason,
        )
        return reason

    async def _commit(
        self,
        delivery: Entry,
        outputs: Sequence[Output],
        lock_key: str | None,
        dead: DeadLetter | None = None,
        trace: dict[str, bytes] | None = None,
    ) -> str | None:
        """Commit, and return the dead letter's id when `dead` is given; the outputs carry
        `trace`, the context of the hop that made them."""
        return await self._committer.commit(
            Commit(
                shard=delivery.shard,
                stream_key=self._stream_keys[delivery.shard],
                group=self._group,
                entry_id=delivery.entry_id,
                outputs=list(outputs),
                lock_key=lock_key,
                dead=dead,
                trace=trace or {},
            )
        )

    # -- recovery and heartbeat ------------------------------------------------------------

    async def _recover_forever(self) -> None:
        backoff = _Backoff()
        while not self._stopping.is_set():
            if not self._gate.is_open or self._paused():  # a claimed entry could only wait
                await self._sleep(_WRITES_POLL_S)
                continue
            try:
                claimed = await self.recover_once()
            except TRANSIENT as error:
                await backoff.wait(f"{self._group}: claiming failed", error)
                continue
            except Exception as error:  # never let claiming stop for good (NOGROUP: see reading)
                log.warning("%s: claiming failed: %s", self._group, said(error))
                await self._sleep(1.0)
                continue
            backoff.reset()
            if not claimed:
                await self._sleep(self._settings.claim_interval_s)

    async def recover_once(self) -> int:
        """Claim entries idle past `claim_idle_ms` in every shard; returns how many were
        taken over."""
        claimed = 0
        for shard in range(len(self._stream_keys)):
            claimed += await self._recover_shard(shard)
        return claimed

    async def _recover_shard(self, shard: int) -> int:
        # Counted over every shard: whose entries a dead consumer left does not matter.
        free = self._settings.concurrency - len(self._in_flight)
        if free <= 0 or self._stopping.is_set():
            return 0
        stream_key = self._stream_keys[shard]
        pending = await self._redis.xpending_range(
            stream_key,
            self._group,
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
        entries = await self._redis.xclaim(
            stream_key,
            self._group,
            self._settings.consumer_name,
            self._settings.claim_idle_ms,
            list(seen),
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
            log.info("%s: claimed %d idle entries", self._group, len(present))
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
        pipe = self._redis.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(stream_key, entry_id, entry_id)
        found = await pipe.execute()
        gone = [entry_id for entry_id, entries in zip(ids, found, strict=True) if not entries]
        if gone:
            await self._redis.xack(stream_key, self._group, *gone)

    async def _heartbeat_forever(self) -> None:
        """Keep what this consumer is working on: reclaim its entries, extend its locks."""
        settings = self._settings
        interval = min(settings.lock_lease_ms, settings.claim_idle_ms) / 3000
        while not self._stopping.is_set() or self._in_flight:
            await asyncio.sleep(interval)
            if not self._in_flight:
                continue
            try:
                await self.heartbeat_once()
            except Exception as error:  # a heartbeat that stopped would let others take over
                log.warning("%s: heartbeat failed: %s", self._group, said(error))

    async def heartbeat_once(self) -> None:
        """Every entry in flight stays this consumer's, locked or still waiting for its lock.

        XCLAIM and PEXPIRE are allowed while Redis refuses writes, so waiting work is kept.
        """
        pipe = self._redis.pipeline(transaction=False)
        by_shard: dict[int, list[bytes]] = {}
        for shard, entry_id in list(self._in_flight):
            by_shard.setdefault(shard, []).append(entry_id)
        for shard, entry_ids in by_shard.items():
            pipe.xclaim(
                self._stream_keys[shard],
                self._group,
                self._settings.consumer_name,
                0,
                entry_ids,
                justid=True,
            )
        me = self._settings.consumer_name
        for lock_key in list(self._handling):
            pipe.eval(_EXTEND, 1, lock_key, me, self._settings.lock_lease_ms)
        await pipe.execute()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)


def _wrote(owned: list[tuple[Entry, Any, LockState]]) -> bool:
    """Whether locking these wrote anything (a first delivery's SET, or a takeover): only
    then does its success say that Redis takes writes again."""
    return any(d.claimed_from is None or state is LockState.MINE for d, _, state in owned)


def shares(concurrency: int, shards: int) -> list[int]:
    """Each shard's slots: `concurrency` split as evenly as it goes, at least one each (with
    fewer slots than shards, the consumer holds one entry per shard at most)."""
    base, extra = divmod(concurrency, shards)
    return [max(1, base + (1 if shard < extra else 0)) for shard in range(shards)]


def _raised(reply: Any) -> Any:
    """A pipeline's reply, or its error raised (refused writes, a wrong type: as a pipeline
    that raises on error would, after sending everything)."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def _held(holder: bytes | None) -> LockState:
    return LockState.DONE if holder == LockState.DONE.encode() else LockState.BUSY


def _forget_body(delivery: Entry) -> None:
    """Keep only what a dead letter needs without a re-read; the body is the bulk of memory
    per in-flight event, and the decoded event already holds it."""
    delivery.fields = {
        name: delivery.fields[name] for name in (b"type", b"cid") if name in delivery.fields
    }


class _Backoff:
    """Exponential wait for Redis outages, logging once per outage rather than per attempt."""

    def __init__(self) -> None:
        self._delay = 0.0
        self._announced = False

    async def wait(self, what: str, error: BaseException, quiet: bool = False) -> None:
        """Sleep before the next try; `quiet` when the outage was announced elsewhere."""
        if self._delay == 0.0 and not quiet:
            log.warning("%s (%s); retrying until Redis answers", what, type(error).__name__)
            self._announced = True
        self._delay = min(max(self._delay * 2, 0.1), 5.0)
        await asyncio.sleep(self._delay)

    def reset(self) -> None:
        if self._announced:
            log.info("Redis answers again")
        self._delay, self._announced = 0.0, False
