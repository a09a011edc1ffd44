"""When the OpenAI adapter sends a failed call again: transient failures (connection errors,
429, 5xx, an empty reply, a stall) with exponential backoff and full jitter, or after the
`Retry-After` / `retry-after-ms` the server asked for, and never past the call's deadline.

The policy is Aeon's, not the client's (which runs with `max_retries=0`): the client's own
retries know neither the request's deadline nor which failures are the model's fault. An
unreachable server is said once, by the outage gate its last retry closes (llm.outage), so its
retries log at DEBUG.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from aeonloop.exceptions import LLMError, LLMUnreachable
from aeonloop.llm import observed
from aeonloop.llm.base import LLMCall
from aeonloop.llm.openai_errors import RetryLater, log


@dataclass(frozen=True)
class Retries:
    """How often, and how long apart, one model's calls are sent again."""

    model: str
    #: The server as an error names it (redacted).
    where: str
    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {self.max_retries!r}")

    async def wait(self, call: LLMCall, error: LLMError, failures: int) -> None:
        """Sleep before the next attempt, or raise when retries or the deadline are used up."""
        if failures > self.max_retries:
            raise LLMError(f"{error} (gave up after {failures} attempt(s))", transient=True)
        asked = error.retry_after if isinstance(error, RetryLater) else None
        delay = self.backoff(failures - 1) if asked is None else _jitter(asked)
        left = seconds_left(call)
        if left is not None and delay >= left:
            if error.unreachable:
                raise LLMUnreachable(
                    f"the request's deadline passed while the LLM server {self.where} could not "
                    f"be reached ({error})"
                )
            raise LLMError(
                f"{error} (no retry: the request's deadline is {max(left, 0):.1f}s away)",
                transient=True,
            )
        log.log(
            logging.DEBUG if error.unreachable else logging.WARNING,
            "LLM call %s failed (attempt %d of %d), retrying in %.2fs: %s",
            call.prompt_id.value,
            failures,
            self.max_retries + 1,
            delay,
            error,
        )
        observed.retry(self.model, failures, error)
        await asyncio.sleep(delay)

    def backoff(self, attempt: int) -> float:
        """Full jitter: spreads the retries of many workers hit by the same outage."""
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))


def seconds_left(call: LLMCall) -> float | None:
    """Seconds to the call's deadline (None: it has none)."""
    if call.deadline is None:
        return None
    return (call.deadline - datetime.now(UTC)).total_seconds()


def _jitter(seconds: float) -> float:
    """At least what the server asked for, plus up to 10% so many workers do not return at once."""
    return seconds * (1 + random.uniform(0, 0.1))
