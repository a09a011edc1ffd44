"""Every Redis key Aeon uses, in one place, namespaced by the configured prefix.

Keys that a single command or script must touch together share a hash tag (`{...}`), so the
same code runs on Redis Cluster: the answers stream and the per-run answer keys live in one slot.
Nothing else needs two keys at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: The logical name of the answers stream: the one stream gateways read, not phases.
ANSWERS = "answers"


class LockState(StrEnum):
    """What a consumer finds when it locks an event (bus.consumer).

    DONE is also the value an event's lock keeps once the event is handled: the dedupe mark.
    """

    MINE = "mine"
    DONE = "done"
    BUSY = "busy"


@dataclass(frozen=True)
class Keys:
    prefix: str

    def stream(self, name: str) -> str:
        if name == ANSWERS:
            return f"{self.prefix}:{{{ANSWERS}}}"
        return f"{self.prefix}:{name}"

    def group(self, phase: str) -> str:
        return f"phase-{phase}"

    def answer(self, correlation_id: str) -> str:
        return f"{self.prefix}:{{{ANSWERS}}}:{correlation_id}"

    def lock(self, group: str, event_id: str) -> str:
        """Who handles the event now (a consumer name), or DONE once it is handled."""
        return f"{self.prefix}:lock:{group}:{event_id}"

    def memo(self, key: str) -> str:
        return f"{self.prefix}:memo:{key}"

    @property
    def write_probe(self) -> str:
        """A key written, and expired at once, to learn whether Redis takes writes again."""
        return f"{self.prefix}:write-probe"

    @property
    def dead_letter(self) -> str:
        return self.stream("dead-letter")
