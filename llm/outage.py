"""An LLM server that cannot be reached makes work wait instead of spending runs, and is not
hammered while it is away.

A run whose calls fail because the server is down (connection refused, a name that does not
resolve, 5xx from every attempt) would otherwise be answered degraded, or fail, although the
same calls would succeed a minute later. Like Redis refusing writes (bus.writes), the outage
closes a gate, one per adapter, so one per model per process:

- the call that found the server gone closes the gate and waits; so does every other call of
  this adapter, without sending anything. The outage is said once, naming the URL (credentials
  redacted), then once a minute with a count while it lasts, and once when it ends;
- the worker reads no new work while any gate is closed (bus.consumer takes the gates), and
  what is in flight keeps its entries and locks, as the heartbeat keeps them;
- one probe at a time sends a real call, a one-token completion, at the backoff's pace; the
  backoff grows with the endpoint's failed calls in a row (each failed attempt and each failed
  probe), not with probes of something else that answers: a model list that answers while
  every chat call fails (issue 41, finding 1) is no sign the server is back. The gate opens
  only on a call that succeeds;
- while the gate has closed in the last minute, at most `calls_per_minute` calls (attempts and
  probes) are sent to the endpoint a minute, so a server that flaps is not sent a storm;
- a server that asks to wait (`Retry-After` on a 429 or 503) pauses every call of this process
  until then, said once, not each call for itself;
- a call whose request's deadline passes while it waits raises `LLMUnreachable`: its run ends
  as `deadline_exceeded` (phases.worker), not as a failed call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from aeonloop.exceptions import LLMError, LLMUnreachable

log = logging.getLogger("aeon.llm")


@dataclass(frozen=True)
class OutagePolicy:
    """How fast calls go to an endpoint that has been away (tests scale it down)."""

    #: Seconds to the first probe after the gate closes, doubled for each failed call since.
    first_s: float = 0.5
    #: The longest wait between probes.
    max_s: float = 30.0
    #: Calls (attempts and probes) a window sends while the gate has closed within it.
    calls_per_window: int = 20
    #: The window, and the period of the summary line while an outage lasts.
    window_s: float = 60.0
    #: Failed calls in a row that close the gate before the backoff starts growing.
    grace: int = 1

    def __post_init__(self) -> None:
        if self.first_s <= 0 or self.max_s < self.first_s:
            raise ValueError(f"need 0 < first_s <= max_s, got {self.first_s!r}, {self.max_s!r}")
        if self.calls_per_window < 1 or self.window_s <= 0:
            raise ValueError(
                f"calls_per_window must be 1 or more and window_s positive, got "
                f"{self.calls_per_window!r}, {self.window_s!r}"
            )

    def delay(self, failed_in_a_row: int) -> float:
        """Seconds to the next probe after `failed_in_a_row` failed calls of the endpoint."""
        doublings = max(0, failed_in_a_row - self.grace)
        return min(self.max_s, self.first_s * 2 ** min(doublings, 30))


class Outage:
    """The gate of one LLM endpoint: open while it answers, closed while it cannot be reached."""

    def __init__(
        self,
        probe: Callable[[], Awaitable[None]],
        where: str,
        policy: OutagePolicy | None = None,
    ) -> None:
        self._probe = probe
        self.where = where
        self.policy = policy or OutagePolicy()
        self._open = asyncio.Event()
        self._open.set()
        self._prober: asyncio.Task[None] | None = None
        #: Failed calls of the endpoint since its last answer: the backoff's exponent.
        self.failed_in_a_row = 0
        #: Answers the endpoint has given (calls and probes): a call that keeps failing while
        #: this grows is a failed call, not an outage (issue 41, finding 9).
        self.answers = 0
        #: When the gate last closed (monotonic), and the send times inside the window.
        self._closed_at: float | None = None
        self._sent: deque[float] = deque(maxlen=self.policy.calls_per_window)
        #: Until when (monotonic) the server asked every call to wait.
        self._paused_until = 0.0
        #: Failed calls and probes since the outage, or its last summary, was said.
        self._failed_since_said = 0
        self._probes_since_said = 0
        self._closed_since = self._said_at = 0.0
        #: The outage was said at WARNING: a gate that closes again within the window of its
        #: last closing is the same outage, said at INFO, so a flapping server is one line.
        self._announced = False

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def answered(self) -> None:
        """A call to the endpoint succeeded: the backoff starts over."""
        self.failed_in_a_row = 0
        self.answers += 1

    def failed(self) -> None:
        """A call to the endpoint found it away (no connection, or a 5xx)."""
        self.failed_in_a_row += 1
        self._failed_since_said += 1

    def close(self, cause: str) -> None:
        """The server could not be reached: say so once and probe until a call succeeds."""
        if not self.is_open:
            return
        self._open.clear()
        now = time.monotonic()
        again = self._closed_at is not None and now - self._closed_at < self.policy.window_s
        self._closed_at = self._closed_since = self._said_at = now
        self._announced = not again
        log.log(
            logging.INFO if again else logging.WARNING,
            "LLM server %s cannot be reached (%s); work waits, and no run is answered for it, "
            "until it answers again (a one-token call every %g to %g s)",
            self.where,
            cause,
            self.policy.first_s,
            self.policy.max_s,
        )
        self._failed_since_said = self._probes_since_said = 0
        self._prober = asyncio.create_task(self._probe_until_open(), name="llm-probe")

    def pause(self, seconds: float) -> None:
        """The server asked to wait `seconds` (Retry-After): every call of this process does,
        said once for the pause, not once per call."""
        until = time.monotonic() + seconds
        if until <= self._paused_until:
            return
        if self._paused_until <= time.monotonic():
            log.warning(
                "LLM server %s asked to wait %.1f s (Retry-After); every call waits",
                self.where,
                seconds,
            )
        self._paused_until = until

    async def wait(self, deadline: datetime | None) -> None:
        """Return when a call may be sent: the gate open, any pause the server asked for over,
        and the endpoint under its calls a minute while it has been away in the last minute.
        Raise LLMUnreachable when `deadline` comes first."""
        try:
            async with asyncio.timeout(_seconds_to(deadline)):
                while True:
                    await self._open.wait()
                    if (paused := self._paused_until - time.monotonic()) > 0:
                        await asyncio.sleep(paused)
                        continue
                    if (held := self._held_for()) > 0:
                        await asyncio.sleep(held)
                        continue
                    self._sent.append(time.monotonic())
                    return
        except TimeoutError:
            if time.monotonic() < self._paused_until:
                raise LLMError(
                    f"the request's deadline passed while the LLM server {self.where} asked "
                    "to wait (Retry-After)",
                    transient=True,
                ) from None
            raise LLMUnreachable(
                f"the request's deadline passed while the LLM server {self.where} could not "
                "be reached"
            ) from None

    def _held_for(self) -> float:
        """Seconds until the endpoint may be sent another call (0: now). Bounded only while
        the gate has closed within the window."""
        policy, now = self.policy, time.monotonic()
        if self._closed_at is None or now - self._closed_at >= policy.window_s:
            return 0.0
        if len(self._sent) < policy.calls_per_window:
            return 0.0
        return max(0.0, self._sent[0] + policy.window_s - now)

    async def _probe_until_open(self) -> None:
        while True:
            await asyncio.sleep(self.policy.delay(self.failed_in_a_row))
            while (held := max(self._held_for(), self._paused_until - time.monotonic())) > 0:
                await asyncio.sleep(held)
            self._sent.append(time.monotonic())
            self._probes_since_said += 1
            try:
                await self._probe()
            except Exception:  # still away: any failure of the probe means "not yet"
                self.failed()
                self._closed_at = time.monotonic()
                self._summarise()
                continue
            self.answered()
            self._open.set()
            log.log(
                logging.WARNING if self._announced else logging.INFO,
                "LLM server %s answers again after %.0f s; work goes on",
                self.where,
                time.monotonic() - self._closed_since,
            )
            return

    def _summarise(self) -> None:
        """Once a window while the outage lasts: how long, and what was tried in it."""
        now = time.monotonic()
        if now - self._said_at < self.policy.window_s:
            return
        self._said_at = now
        log.warning(
            "LLM server %s still cannot be reached after %.0f s: %d failed call(s), %d of them "
            "probes, since last said; the next probe in %.0f s",
            self.where,
            now - self._closed_since,
            self._failed_since_said,
            self._probes_since_said,
            self.policy.delay(self.failed_in_a_row),
        )
        self._failed_since_said = self._probes_since_said = 0

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            await asyncio.gather(self._prober, return_exceptions=True)


def _seconds_to(deadline: datetime | None) -> float | None:
    return None if deadline is None else (deadline - datetime.now(UTC)).total_seconds()
