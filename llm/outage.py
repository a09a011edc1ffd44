"""An LLM server that cannot be reached makes work wait instead of spending runs.

A run whose calls fail because the server is down (connection refused, a name that does not
resolve, 5xx from every attempt) would otherwise be answered degraded, or fail, although the
same calls would succeed a minute later. Like Redis refusing writes (bus.writes), the outage
closes a gate, one per adapter, so one per model per process:

- the call that found the server gone says so once, naming the URL (credentials redacted), and
  waits; so does every other call of this adapter, without sending anything;
- the worker reads no new work while any gate is closed (bus.consumer takes the gates), and
  what is in flight keeps its entries and locks, as the heartbeat keeps them;
- one probe at a time asks the server (its model list) until it answers; then the gate opens,
  that is said once, and the waiting calls are sent;
- a call whose request's deadline passes while it waits raises `LLMUnreachable`: its run ends
  as `deadline_exceeded` (phases.worker), not as a failed call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from aeonloop.exceptions import LLMUnreachable

log = logging.getLogger("aeon.llm")

#: Seconds between probes: the first soon, then backing off to the longest.
PROBE_FIRST_S, PROBE_MAX_S = 0.5, 5.0


class Outage:
    """The gate of one LLM endpoint: open while it answers, closed while it cannot be reached."""

    def __init__(self, probe: Callable[[], Awaitable[None]], where: str) -> None:
        self._probe = probe
        self.where = where
        self._open = asyncio.Event()
        self._open.set()
        self._prober: asyncio.Task[None] | None = None

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def close(self, cause: str) -> None:
        """The server could not be reached: say so once and probe until it can."""
        if not self.is_open:
            return
        self._open.clear()
        log.warning(
            "LLM server %s cannot be reached (%s); work waits, and no run is answered for it, "
            "until it answers again",
            self.where,
            cause,
        )
        self._prober = asyncio.create_task(self._probe_until_open(), name="llm-probe")

    async def wait(self, deadline: datetime | None) -> None:
        """Return once the server answers again; raise LLMUnreachable if `deadline` comes first."""
        if self.is_open:
            return
        left = None if deadline is None else (deadline - datetime.now(UTC)).total_seconds()
        try:
            async with asyncio.timeout(left):
                await self._open.wait()
        except TimeoutError:
            raise LLMUnreachable(
                f"the request's deadline passed while the LLM server {self.where} could not "
                "be reached"
            ) from None

    async def _probe_until_open(self) -> None:
        delay = PROBE_FIRST_S
        while True:
            await asyncio.sleep(delay)
            try:
                await self._probe()
            except Exception:  # still away: any failure of the probe means "not yet"
                delay = min(PROBE_MAX_S, delay * 2)
                continue
            self._open.set()
            log.warning("LLM server %s answers again; work goes on", self.where)
            return

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            await asyncio.gather(self._prober, return_exceptions=True)
