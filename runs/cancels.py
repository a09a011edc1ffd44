"""Cancel marks in Redis: set by gateways, found by workers (phases.cancels says where).

A cancel is a key beside the run's answer (`Keys.cancel`), set by one script only while the
run has no answer: a cancel after the answer changes nothing and is told so, and a cancel that
races the answer's commit is a no-op (the answer key is `SET NX`, bus.commit: whichever comes
first wins, and the run has one answer either way). The mark is kept as long as an answer is
(AEON_ANSWER_TTL_S), so it outlives every worker that could still hold the run.

A worker looks a run's mark up before each hop and each LLM call (those asked at the same
moment go in one EXISTS, which counts the marks of them all), and watches the marks of the
runs it has in flight with one such EXISTS every `POLL_S`, however many they are, so a call
in flight is abandoned within that time of the cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from enum import StrEnum

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys
from aeonloop.bus.redis_errors import TRANSIENT

log = logging.getLogger("aeon.bus")

#: How often a worker reads the marks of the runs it has in flight.
POLL_S = 0.25

#: Set the mark unless the run has its answer: 1 set (or already set), 0 answered.
_CANCEL = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[2], '1', 'EX', ARGV[1])
return 1
"""


class CancelOutcome(StrEnum):
    """What a request to cancel a run did."""

    REQUESTED = "requested"  # the mark is set: the run stops at its next hop
    ANSWERED = "answered"  # the run has its answer: nothing to cancel


async def request_cancel(
    redis: RedisClient, keys: Keys, correlation_id: str, ttl_s: int
) -> CancelOutcome:
    """Mark run `correlation_id` cancelled unless it is answered; a second cancel is the same."""
    done = await redis.eval(
        _CANCEL, 2, keys.answer(correlation_id), keys.cancel(correlation_id), ttl_s
    )
    return CancelOutcome.REQUESTED if done else CancelOutcome.ANSWERED


class RedisCancels:
    """The marks as a worker sees them (phases.cancels.Cancels)."""

    def __init__(self, redis: RedisClient, keys: Keys, poll_s: float = POLL_S) -> None:
        self._redis = redis
        self._keys = keys
        self._poll_s = poll_s
        #: Runs in flight: the future each watcher waits on, with how many watch it.
        self._watched: dict[str, tuple[asyncio.Future[None], int]] = {}
        self._poller: asyncio.Task[None] | None = None
        #: Lookups asked for and not yet sent: each run's mark, and who waits for it.
        self._asked: list[tuple[str, asyncio.Future[bool]]] = []
        self._reader: asyncio.Task[None] | None = None

    async def cancelled(self, correlation_id: str) -> bool:
        """Whether the run is marked, read from Redis after it was asked. A Redis that does not
        answer says no: the run goes on, and the next look (the next call, the next hop, the
        watcher) asks again.

        The lookups asked for at one moment (a worker with many runs in flight asks before
        each of their hops and LLM calls) are read together (`_marks`): one round trip for all
        of them instead of one each, which cost a fifth of a loaded worker's CPU (measured
        with py-spy at 1,000 runs in flight). Each is still read after it was asked."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._asked.append((correlation_id, answer))
        if self._reader is None:
            self._reader = asyncio.create_task(self._read_asked())
        return await answer

    async def _read_asked(self) -> None:
        """Read every mark asked for until now at once, and answer each asker."""
        await asyncio.sleep(0)  # the lookups asked at this moment join this read
        asked, self._asked, self._reader = self._asked, [], None
        try:
            marks = await self._marks([correlation_id for correlation_id, _ in asked])
        except TRANSIENT as error:
            log.info("cancels of %d run(s) not read (%s)", len(asked), type(error).__name__)
            marks = [0] * len(asked)
        except asyncio.CancelledError:  # the worker is stopping: so are its askers
            for _, answer in asked:
                answer.cancel()
            raise
        except Exception as error:  # every asker is answered, whatever happened
            for _, answer in asked:
                if not answer.done():
                    answer.set_exception(error)
            raise
        for (_, answer), marked in zip(asked, marks, strict=True):
            if not answer.done():  # its asker may have been cancelled meanwhile
                answer.set_result(bool(marked))

    async def _marks(self, runs: list[str]) -> list[int]:
        """Each run's mark (1 or 0): one EXISTS naming every run's mark, which counts them;
        only when it counts any (a cancel is rare) is each one read, in one pipeline.

        One command of N keys, against a pipeline of N commands, is packed and parsed once:
        at 1,000 runs in flight a loaded worker asks for hundreds at a time. (On a cluster,
        redis-py splits the EXISTS by slot and adds the counts up.)"""
        keys = [self._keys.cancel(correlation_id) for correlation_id in runs]
        marked = await self._redis.exists(*keys)
        if not marked or len(keys) == 1:
            return [int(bool(marked))] * len(keys)
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.exists(key)
        return list(await pipe.execute())

    @contextlib.asynccontextmanager
    async def watch(self, correlation_id: str) -> AsyncIterator[asyncio.Future[None]]:
        held = self._watched.get(correlation_id)
        seen, count = held or (asyncio.get_running_loop().create_future(), 0)
        self._watched[correlation_id] = (seen, count + 1)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())
        try:
            yield seen
        finally:
            seen, count = self._watched[correlation_id]
            if count <= 1:
                del self._watched[correlation_id]
            else:
                self._watched[correlation_id] = (seen, count - 1)

    async def _poll(self) -> None:
        """Read every watched run's mark at once, every `poll_s`, while any is watched."""
        while self._watched:
            await asyncio.sleep(self._poll_s)
            runs = list(self._watched)
            if not runs:
                return
            try:
                marks = await self._marks(runs)
            except TRANSIENT as error:
                log.info("cancels not read (%s); reading again", type(error).__name__)
                continue
            for correlation_id, marked in zip(runs, marks, strict=True):
                held = self._watched.get(correlation_id)
                if marked and held is not None and not held[0].done():
                    held[0].set_result(None)
