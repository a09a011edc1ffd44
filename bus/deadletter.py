"""Dead letters: events the pipeline gave up on, kept whole with the reason and delivery count.

An entry on the dead-letter stream is flat fields (readable with `redis-cli XRANGE`): where it
came from, why it died, how many times it was delivered (`attempts`), and the original
type/cid/body, so an operator can inspect it and `aeon dlq replay` can put it back as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aeonloop.bus.codec import FASTSTREAM_FIELD, Fields, correlation_id_of
from aeonloop.telemetry.tracing import TRACE_FIELDS

#: The trace context fields of a flat entry, as bytes keys.
TRACE_KEYS = tuple(name.encode() for name in TRACE_FIELDS)


@dataclass
class DeadLetter:
    stream: str
    group: str
    entry_id: str
    fields: Fields
    reason: str
    #: Deliveries of the entry that started its handler (AEON_MAX_DELIVERIES bounds them; see
    #: bus.retry). Each delivery tries the handler up to AEON_HANDLER_ATTEMPTS times, which a
    #: reason such as "handler failed 3 times" counts: so `aeon dlq list` calls this
    #: `deliveries`. Stored as the field `attempts`, the name it has always had on the stream.
    attempts: int
    #: The decoded event when the entry decoded; None for entries that are not events at all.
    event: Any | None = None

    @property
    def correlation_id(self) -> str:
        return getattr(self.event, "correlation_id", None) or correlation_id_of(self.fields)

    def to_fields(self) -> dict[str, str | bytes]:
        return {
            # The trace it belongs to, so a replay continues it (a flat entry's fields).
            **{key.decode(): self.fields[key] for key in TRACE_KEYS if key in self.fields},
            "source_stream": self.stream,
            "group": self.group,
            "entry_id": self.entry_id,
            "reason": self.reason,
            "attempts": str(self.attempts),
            "failed_at": datetime.now(UTC).isoformat(),
            "type": self.fields.get(b"type", b""),
            "cid": self.fields.get(b"cid", b""),
            "body": self.fields.get(b"body", b""),
            # What replay clears the dedupe mark of (a FastStream entry's body is inside it).
            "event_id": getattr(self.event, "event_id", ""),
            # A FastStream entry is kept whole, so replay puts back what its app published.
            **(
                {"__data__": self.fields[FASTSTREAM_FIELD]}
                if FASTSTREAM_FIELD in self.fields
                else {}
            ),
        }


def original_fields(record: Fields) -> dict[bytes, bytes]:
    """The entry as it was before it died: what `replay` puts back on its stream."""
    names = (*TRACE_KEYS, b"type", b"cid", b"body", FASTSTREAM_FIELD)
    return {name: record[name] for name in names if record.get(name)}
