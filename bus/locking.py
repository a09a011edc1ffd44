"""Locking and takeover: which consumer handles an event, so each is handled once in effect.

Before its handler runs, each event is locked for this consumer, for a whole batch in one
round trip (docs/delivery.md, "Handling one entry", step 3). What the consumer finds is a
LockState (bus.keys):

- a first delivery takes the lock only if it is free (`SET NX PX lease`); a lock found held
  costs a second round trip, to read its holder: `done` (handled before: ack and skip), this
  consumer (a locking round trip that failed half-way and is retried), or another (`busy`);
- a claimed entry takes the lock over at once (`_TAKE_OVER`, one Lua script, so no third
  consumer slips in between the read and the write) when the consumer it was claimed from, or
  this one, holds it: that holder stopped answering, and waiting for its lease would only
  spend deliveries;
- an entry of an event this consumer has in hand from another entry is `busy` without asking
  Redis; it waits for that handling (bus.consumer) and is then locked again;
- a delivery that does not become an attempt (`busy`, or the worker stopped while Redis
  refused the lock) gives its delivery count back (XCLAIM RETRYCOUNT), so busy claims and
  deliveries while Redis refuses writes spend nothing towards AEON_MAX_DELIVERIES.

The lock is then held until the commit script sets it to `done` (bus.commit); the heartbeat
(bus.recovery) extends it meanwhile with `_EXTEND`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline
from redis.exceptions import ResponseError

from aeonloop.bus.compact import unpack
from aeonloop.bus.entry import Entry, Ref
from aeonloop.bus.groups import Group
from aeonloop.bus.keys import Keys, LockState
from aeonloop.bus.redis_errors import TRANSIENT, refuses_writes
from aeonloop.bus.waiting import Backoff
from aeonloop.bus.writes import WriteGate

log = logging.getLogger("aeon.bus")

#: An entry with its decoded event, and with what locking it found.
Decoded = tuple[Entry, Any]
Locked = tuple[Entry, Any, LockState]

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


class Locks:
    """The locks of one consumer's events, and which events it has in hand."""

    def __init__(
        self,
        group: Group,
        keys: Keys,
        lease_ms: int,
        gate: WriteGate,
        records: Callable[[Any], Sequence[str]] | None,
        stopping: asyncio.Event,
    ) -> None:
        self._group = group
        self._keys = keys
        self._lease_ms = lease_ms
        self._gate = gate
        #: The route's run records to read with a lock (Route.records).
        self._records = records
        #: Set when the worker stops: locking then gives up waiting for Redis.
        self._stopping = stopping
        #: The lock key of every event this consumer is handling: the entry handling it, and
        #: an asyncio.Event set once that ends (committed, or given up on). Another entry of
        #: the same event waits for it. Registered when the lock is found MINE, in the same
        #: step, so two entries of one event are never both MINE here.
        self._handling: dict[str, tuple[Ref, asyncio.Event]] = {}

    def key(self, delivery: Entry, event: Any) -> str:
        """The lock key of the entry's event: per group and event id, in the entry's shard."""
        return self._keys.lock(delivery.shard, self._group.name, event.event_id)

    async def acquire_patiently(self, events: list[Decoded]) -> list[Locked]:
        """Lock the events, waiting out a Redis that is away or refuses writes; [] if the
        worker stops first (the entries stay pending for whoever claims them)."""
        backoff = Backoff()
        while True:
            try:
                owned = await self._acquire(events)
            except TRANSIENT as error:
                await backoff.wait(f"{self._group.name}: locking failed", error)
            except ResponseError as error:
                if not refuses_writes(error):
                    raise
                self._gate.refused(error)
                await backoff.wait(f"{self._group.name}: locking refused", error, quiet=True)
            else:
                backoff.reset()
                if _wrote(owned):
                    self._gate.accepted()
                return owned
            if self._stopping.is_set():
                await self._not_attempts([delivery for delivery, _ in events])
                return []

    async def _acquire(self, events: list[Decoded]) -> list[Locked]:
        """Lock each event for this consumer: MINE, DONE (handled before) or BUSY; in the same
        round trip, read the run records its handler will read (Route.records)."""
        if not events:
            return []
        pipe = self._group.redis.pipeline(transaction=False)
        me = self._group.consumer.encode()
        keys = [self.key(delivery, event) for delivery, event in events]
        # Another entry of an event in hand here, or earlier in this batch: BUSY, no question
        # to ask (it waits for that one in bus.consumer).
        in_hand = set(self._handling)
        asked, wanted = [], []
        for (delivery, event), key in zip(events, keys, strict=True):
            asked.append(key not in in_hand)
            in_hand.add(key)
            wanted.append(self._records_wanted(event) if asked[-1] else [])
            if not asked[-1]:
                continue
            if delivery.claimed_from is None:
                pipe.set(key, me, nx=True, px=self._lease_ms)
            else:
                pipe.eval(_TAKE_OVER, 1, key, me, delivery.claimed_from, self._lease_ms)
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
                        self.release(key, delivery.ref)
                raise
            for i, state in zip(held, holders, strict=True):
                states[i] = state
            self._take_in_hand(
                [events[i] for i in held], [keys[i] for i in held], [states[i] for i in held]
            )
        owned = [(d, e, cast(LockState, st)) for (d, e), st in zip(events, states, strict=True)]
        await self._not_attempts([d for d, _, state in owned if state is LockState.BUSY])
        return owned

    def _records_wanted(self, event: Any) -> Sequence[str]:
        """The run records to read with the event's lock; none if the route names none (or
        naming them fails: the handler then reads them itself)."""
        if self._records is None:
            return []
        try:
            return self._records(event)
        except Exception as error:
            log.warning("%s: run records to read not known: %s", self._group.name, error)
            return []

    def _take_in_hand(
        self, events: list[Decoded], keys: list[str], states: list[LockState | None]
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
        pipe = self._group.redis.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
        return [
            LockState.MINE if holder == me else _held(holder) for holder in await pipe.execute()
        ]

    async def _not_attempts(self, deliveries: list[Entry]) -> None:
        """Give back the delivery each of these counted: none started the handler.

        XCLAIM with RETRYCOUNT sets the count (allowed while Redis refuses writes); its
        min-idle of 0 keeps the entry this consumer's until it is claimed again as idle.
        """
        if not deliveries:
            return
        group = self._group
        pipe = group.redis.pipeline(transaction=False)
        for delivery in deliveries:
            pipe.xclaim(
                group.stream_keys[delivery.shard],
                group.name,
                group.consumer,
                0,
                [delivery.entry_id],
                retrycount=delivery.deliveries - 1,
                justid=True,
            )
        try:
            await pipe.execute()
        except (ResponseError, *TRANSIENT) as error:  # then the count stays one too high
            log.warning("%s: delivery counts not given back: %s", group.name, error)

    def release(self, lock_key: str, ref: Ref) -> None:
        """The entry `ref` no longer handles its event: wake the entries waiting for it."""
        held = self._handling.get(lock_key)
        if held is not None and held[0] == ref:
            del self._handling[lock_key]
            held[1].set()

    async def outwait_copy(self, lock_key: str, ref: Ref) -> bool:
        """Wait until the handling of the event by another entry in hand here ends; False at
        once when no other entry has it in hand (it is handled elsewhere, or by `ref`)."""
        held = self._handling.get(lock_key)
        if held is None or held[0] == ref:
            return False
        await held[1].wait()
        return True

    def extend(self, pipe: Pipeline | ClusterPipeline) -> None:
        """Queue, on the heartbeat's pipeline, a lease more for every lock in hand (`_EXTEND`:
        only while it is still this consumer's)."""
        me = self._group.consumer
        for lock_key in list(self._handling):
            pipe.eval(_EXTEND, 1, lock_key, me, self._lease_ms)


def _wrote(owned: list[Locked]) -> bool:
    """Whether locking these wrote anything (a first delivery's SET, or a takeover): only
    then does its success say that Redis takes writes again."""
    return any(d.claimed_from is None or state is LockState.MINE for d, _, state in owned)


def _raised(reply: Any) -> Any:
    """A pipeline's reply, or its error raised (refused writes, a wrong type: as a pipeline
    that raises on error would, after sending everything)."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def _held(holder: bytes | None) -> LockState:
    return LockState.DONE if holder == LockState.DONE.encode() else LockState.BUSY
