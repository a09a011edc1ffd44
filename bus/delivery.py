"""What the bus tells a handler about the delivery of the event it hands it.

A route's handler is called as `handle(event, delivery)`, and its `give_up` as
`give_up(dead, delivery)` (bus.route.Route): what the bus knows of the delivery is an
argument, not something a handler would have to know to look for elsewhere. It is two things:

- `redelivered`: the event may have been handled before (an entry claimed from a consumer that
  went silent, or the handler's retry in this process). Only then can a memo hold replies to
  its LLM calls; a first delivery asks for none, which saves a round trip per call.
- `records`: the run records the route names for the event (`Route.records`), read in the round
  trip that locked it (docs/delivery.md, "Handling one entry"), by (correlation id, name). A
  hop that needs its run's history so costs no round trip more than one that does not.
- `tries`: which try of the event this is, counted over its deliveries (one for each earlier
  delivery, cut short, plus this delivery's tries); given up on, the tries made in all. A
  handler whose tries are seen outside (a webhook's) can say how many it took.

The phases' wiring turns it into the handler's dependencies (phases.deps.PhaseDeps.delivered),
so handlers stay `(event, deps) -> list[Event]` and never see the bus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: No records read with the lock.
NOTHING_READ: Mapping[tuple[str, str], bytes] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery of an event to its handler, as the consumer saw it."""

    #: The event may have been handled before: a claimed entry, or a retry.
    redelivered: bool = False
    #: The run records read with the event's lock, by (correlation id, name).
    records: Mapping[tuple[str, str], bytes] = field(default_factory=lambda: NOTHING_READ)
    #: The event's try this is, over its deliveries (given up on: the tries made).
    tries: int = 1
