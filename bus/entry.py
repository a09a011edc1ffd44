"""One stream entry while a consumer has it in hand, and what its handler is told of it.

Every part of the consumer (bus.consumer reads entries, bus.locking locks their events,
bus.retry handles and dead-letters them, bus.recovery claims and keeps them) passes the same
`Entry` along, so what one part learns of a delivery (whom it was claimed from, its count, the
records read with its lock) reaches the others without a second lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from aeonloop.bus.codec import Fields
from aeonloop.bus.delivery import Delivery

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


def forget_body(delivery: Entry) -> None:
    """Keep only what a dead letter needs without a re-read; the body is the bulk of memory
    per in-flight event, and the decoded event already holds it."""
    delivery.fields = {
        name: delivery.fields[name] for name in (b"type", b"cid") if name in delivery.fields
    }
