"""How the consumer's loops wait: out a Redis outage, and for their next look while stopping.

Reading (bus.consumer), locking (bus.locking) and claiming (bus.recovery) each wait out the
same outages the same way, so each outage is logged once, not once per try or per loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

log = logging.getLogger("aeon.bus")

#: How often a loop held back by refused writes (or an LLM server away) looks again.
WRITES_POLL_S = 0.5


class Backoff:
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


async def sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less if `stopping` is set meanwhile: a stopping worker does not
    wait out a poll interval before it drains."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
