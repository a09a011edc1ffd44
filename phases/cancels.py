"""Whether a run was cancelled, asked where the phases can stop it.

A cancel is a mark a gateway leaves for the run (bus.cancels keeps it in Redis); the phases
never wait for it to be delivered. They look for it in three places, so a run stops at its next
hop and never pays for a call after it:

- before a hop runs its handler (phases.worker), and before Phase E synthesises;
- before every LLM call (llm.session: `LLMSession.check_cancelled`);
- while a call is in flight (`until_cancelled`): the hop's work is abandoned as soon as the mark
  is seen, and the hop ends the run from what it was given.

The mark stays until the run's answer expires, so a worker that dies mid-hop leaves the run to
one that finds the mark when it claims the event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol, TypeVar

from aeonloop.exceptions import RunCancelled

T = TypeVar("T")


class Cancels(Protocol):
    """Where cancels are looked up."""

    async def cancelled(self, correlation_id: str) -> bool:
        """Whether run `correlation_id` was cancelled."""
        ...

    def watch(self, correlation_id: str) -> contextlib.AbstractAsyncContextManager[asyncio.Event]:
        """An event set once run `correlation_id` is seen cancelled, while the context lasts."""
        ...


class DictCancels:
    """Cancels kept in this process: for tests and one-shot runs."""

    def __init__(self) -> None:
        self.runs: set[str] = set()
        self._watched: dict[str, asyncio.Event] = {}

    def cancel(self, correlation_id: str) -> None:
        self.runs.add(correlation_id)
        if correlation_id in self._watched:
            self._watched[correlation_id].set()

    async def cancelled(self, correlation_id: str) -> bool:
        return correlation_id in self.runs

    @contextlib.asynccontextmanager
    async def watch(self, correlation_id: str) -> AsyncIterator[asyncio.Event]:
        seen = self._watched.setdefault(correlation_id, asyncio.Event())
        if correlation_id in self.runs:
            seen.set()
        try:
            yield seen
        finally:
            self._watched.pop(correlation_id, None)


async def check(cancels: Cancels, correlation_id: str) -> None:
    """RunCancelled if the run was cancelled."""
    if await cancels.cancelled(correlation_id):
        raise RunCancelled(correlation_id)


async def until_cancelled(cancels: Cancels, correlation_id: str, work: Awaitable[T]) -> T:
    """What `work` gives, unless the run is seen cancelled first: then `work` is cancelled (an
    LLM call in it is abandoned, its reply never read) and RunCancelled is raised."""
    task = asyncio.ensure_future(work)
    async with cancels.watch(correlation_id) as seen:
        waiter = asyncio.ensure_future(seen.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the worker is stopping: the work stops with it
            task.cancel()
            raise
        finally:
            waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise RunCancelled(correlation_id)
