"""Retry and dead-lettering: a locked event handled, retried, committed or given up on.

Once an entry's event is locked for this consumer (bus.locking), this part sees it through
(docs/delivery.md, "Attempts and dead letters"):

- an entry about to start attempt AEON_MAX_DELIVERIES + 1 is given up on unhandled: every
  earlier attempt was cut short, so the event itself is likely what kills workers;
- a handler that raises is retried in-process with backoff, each time on a fresh decode of the
  entry (a handler may have changed the event it was given); after the route's attempts
  (AEON_HANDLER_ATTEMPTS unless the route sets its own) the event is given up on;
- an output that cannot be encoded gives the event up too;
- giving up writes a dead letter, and what the route's `give_up` makes to carry the run on, in
  the same commit that acks the entry (bus.commit), so a request is answered even when its
  events die.

Each handling is one hop (telemetry.hop), which records where its time went and why it failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aeonloop.bus.codec import decode, trace_context
from aeonloop.bus.commit import Commit, Committer
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.entry import Entry
from aeonloop.bus.groups import Group
from aeonloop.bus.route import Output, Route
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import DecodeError
from aeonloop.telemetry import tracing
from aeonloop.telemetry.hop import Hop
from aeonloop.telemetry.metrics import PhaseMetrics

log = logging.getLogger("aeon.bus")


class Handling:
    """Hands a route's locked events to its handler, and commits what comes of each."""

    def __init__(
        self,
        group: Group,
        route: Route,
        settings: BusSettings,
        committer: Committer,
        phase_metrics: PhaseMetrics | None,
    ) -> None:
        self._group = group
        self._route = route
        self._settings = settings
        self._committer = committer
        #: This phase's Prometheus series; None when metrics are off (telemetry.metrics).
        self._metrics = phase_metrics
        #: Events handled and committed (not given up on), for the worker's summary.
        self.handled = 0

    def decode(self, delivery: Entry) -> Any:
        """The entry's event, as one of the route's types; DecodeError if it is none."""
        return decode(delivery.fields, self._route.types, self._settings.max_event_bytes)

    async def handle(self, delivery: Entry, event: Any, lock_key: str) -> None:
        """Handle a locked event and commit what it gives, or give up on it; the hop records
        where the time went (telemetry.hop)."""
        hop = Hop.start(
            self._metrics,
            stream_key=self._group.stream_keys[delivery.shard],
            group=self._group.name,
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
        """`handle`'s work; returns why the event was given up on ("" when it was not)."""
        if delivery.deliveries > self._settings.max_deliveries:
            reason = (
                f"{delivery.deliveries - 1} attempts were cut short (their worker died or was "
                "stopped mid-way); the event may be what kills them"
            )
            delivery.deliveries -= 1  # this one is not an attempt: the dead letter counts those
            event = await self._reload(delivery) or event
            # Each earlier delivery made a try: `told(1)` counts them all (deliveries - 1 + 1).
            return await self.give_up(delivery, event, reason, lock_key, hop, attempts=1)
        with hop.handling():
            outputs, error = await self._handle_with_retries(delivery, event)
        if error:
            attempts = self._attempts
            reason = f"handler failed {attempts} times: {error}"
            event = await self._reload(delivery) or event
            return await self.give_up(delivery, event, reason, lock_key, hop, attempts)
        try:
            with hop.committing() as trace:
                await self.commit(delivery, outputs, lock_key, trace=trace)
        except ValueError as error:  # an output that cannot be encoded
            reason = f"an output of the handler cannot be stored: {error}"
            event = await self._reload(delivery) or event
            return await self.give_up(delivery, event, reason, lock_key, hop)
        self.handled += 1
        if self._metrics is not None:
            self._metrics.handled.inc()
        return ""

    async def _handle_with_retries(
        self, delivery: Entry, event: Any
    ) -> tuple[Sequence[Output], str]:
        """The handler's outputs, or the last error after the route's attempts."""
        attempts = self._attempts
        backoff_s = self._route.backoff_s
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
                return await self._route.handle(event, delivery.told(attempt)), ""
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a handler bug or an outage; retried, then dead-lettered
                error_text = f"{type(error).__name__}: {error}"
                if self._metrics is not None:
                    self._metrics.failed.inc()
                log.warning(
                    "%s: handling %s failed (attempt %d/%d): %s",
                    self._group.name,
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
        return self._route.attempts or self._settings.handler_attempts

    async def _reload(self, delivery: Entry) -> Any | None:
        """A fresh decode of the entry, re-read from the stream (None if it is gone).

        Handlers own the event they are given and may change it, so a retry, or the dead
        letter after the last one, must not see what a failed attempt left behind.
        """
        stream_key = self._group.stream_keys[delivery.shard]
        found = await self._group.redis.xrange(stream_key, delivery.entry_id, delivery.entry_id)
        if not found:
            return None
        delivery.fields = found[0][1]
        try:
            return self.decode(delivery)
        except DecodeError:
            return None

    async def give_up(
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
            stream=self._route.stream,
            group=self._group.name,
            entry_id=delivery.entry_id.decode(),
            fields=delivery.fields,
            reason=reason,
            attempts=delivery.deliveries,
            event=event,
        )
        try:  # give_up may use the run's records read with the lock
            outputs = list(self._route.give_up(dead, delivery.told(attempts)))
        except Exception as error:  # give_up must never keep an entry from leaving
            log.error("%s: give_up failed for %s: %s", self._group.name, dead.entry_id, error)
            outputs = []
        if hop is None:  # never decoded: what carries its run on continues the entry's trace
            trace = tracing.relayed(trace_context(delivery.fields)) if tracing.on() else {}
            dead_id = await self.commit(delivery, outputs, lock_key, dead, trace)
        else:
            with hop.committing() as trace:
                dead_id = await self.commit(delivery, outputs, lock_key, dead, trace)
        if self._metrics is not None:
            self._metrics.dead.inc()
        log.error(
            "%s: dead-lettered %s entry %s as %s (`aeon dlq replay %s` puts it back): %s",
            self._group.name,
            self._route.stream,
            dead.entry_id,
            dead_id,
            dead_id,
            reason,
        )
        return reason

    async def commit(
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
                stream_key=self._group.stream_keys[delivery.shard],
                group=self._group.name,
                entry_id=delivery.entry_id,
                outputs=list(outputs),
                lock_key=lock_key,
                dead=dead,
                trace=trace or {},
            )
        )
