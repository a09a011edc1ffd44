"""Whether a run was cancelled, asked where the phases can stop it.

A cancel is a mark a gateway leaves for the run (runs.cancels keeps it in Redis); the phases
never wait for it to be delivered. They look for it in three places, so a run stops at its next
hop and never pays for a call after it:

- before a hop runs its handler (phases.worker), and before Phase E synthesises;
- before every LLM call (llm.session: `LLMSession.check_cancelled`);
- while a call is in flight (`until_cancelled`): the hop's work is abandoned as soon as the mark
  is seen, and the hop ends the run from what it was given.

`unless_stopped` runs a hop's work so (the worker's hops, Phase E's synthesis), and hands back
what stopped it instead of its result; phases.exits says what each stop means for the run.

The mark stays until the run's answer expires, so a worker that dies mid-hop leaves the run to
one that finds the mark when it claims the event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aeonloop.exceptions import LLMUnreachable, RunCancelled, RunStopped

T = TypeVar("T")


class Cancels(Protocol):
    """Where cancels are looked up."""

    async def cancelled(self, correlation_id: str) -> bool:
        """Whether run `correlation_id` was cancelled."""
        ...

    def watch(
        self, correlation_id: str
    ) -> contextlib.AbstractAsyncContextManager[asyncio.Future[None]]:
        """A future done once run `correlation_id` is seen cancelled, while the context lasts.

        A future, not an asyncio.Event: `until_cancelled` waits on it beside the work as it
        is, where an event needs a task of its own (and holds a deque) for every hop and call
        in flight: about a kilobyte a run at 1,000 runs in flight."""
        ...


async def check(cancels: Cancels, correlation_id: str) -> None:
    """RunCancelled if the run was cancelled."""
    if await cancels.cancelled(correlation_id):
        raise RunCancelled(correlation_id)


async def until_cancelled(cancels: Cancels, correlation_id: str, work: Awaitable[T]) -> T:
    """What `work` gives, unless the run is seen cancelled first: then `work` is cancelled (an
    LLM call in it is abandoned, its reply never read) and RunCancelled is raised."""
    task = asyncio.ensure_future(work)
    async with cancels.watch(correlation_id) as seen:
        try:  # `seen` is shared by the run's watchers: waited on, never cancelled here
            await asyncio.wait({task, seen}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the worker is stopping: the work stops with it
            task.cancel()
            raise
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise RunCancelled(correlation_id)


@dataclass(frozen=True)
class Stopped:
    """A hop's work that did not run to its end, and why (`unless_stopped`)."""

    error: LLMUnreachable | RunStopped


async def unless_stopped(cancels: Cancels, correlation_id: str, work: Awaitable[T]) -> T | Stopped:
    """What `work` gives, or what stopped it: a cancel seen while it ran (`until_cancelled`),
    a run that may start no further LLM call (RunStopped: cancelled, or its budget spent), or
    the LLM server away until the deadline (LLMUnreachable)."""
    try:
        return await until_cancelled(cancels, correlation_id, work)
    except (LLMUnreachable, RunStopped) as error:
        return Stopped(error)
