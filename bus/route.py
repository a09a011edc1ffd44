"""What one phase consumes, how it handles it, and what carries a run on when it gives up.

A `Route` is all a phase gives the bus (bus.worker starts one consumer per route); the
consumer's parts read it: bus.locking the records to read with a lock, bus.retry the handler,
its tries and `give_up`. It is importable from bus.consumer too, where callers have always
found it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from aeonloop.bus.codec import Routable
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery


@dataclass(frozen=True, slots=True)
class RunRecord:
    """Field `name` of run `correlation_id`'s records, holding `value`: what a handler gives
    beside its events, written by the commit before them (bus.commit); the run store reads it
    back (runs.records)."""

    correlation_id: str
    name: str
    value: bytes


#: What a handler gives: its events, and the run records they refer to (runs.records).
Output = Routable | RunRecord
#: A handler is told what the bus knows of the delivery of its event (bus.delivery).
Handler = Callable[[Any, Delivery], Awaitable[Sequence[Output]]]
GiveUp = Callable[[DeadLetter, Delivery], Sequence[Output]]


@dataclass(frozen=True)
class Route:
    """What one phase consumes, how it handles it, and what carries a run on when it gives up."""

    stream: str
    group: str
    types: Mapping[str, type[BaseModel]]
    handle: Handler
    give_up: GiveUp
    #: The run records (runs.records) the handler will read for an event: read with its lock,
    #: in the same round trip, and handed to the handler in its `Delivery`.
    records: Callable[[Any], Sequence[str]] | None = None
    #: Tries of a failing handler within one delivery, and the first wait between two (it
    #: doubles): None takes AEON_HANDLER_ATTEMPTS and AEON_RETRY_BACKOFF_S. A route whose
    #: tries depend on something outside Aeon (a webhook's receiver) sets its own.
    attempts: int | None = None
    backoff_s: float | None = None
    #: The route's work needs what the worker's pauses name (the LLM server, llm.outage), so
    #: it reads nothing new while one is closed. False: it reads on, as the route that answers
    #: runs must, to publish at their deadline what they have while the server is away.
    paused: bool = True
