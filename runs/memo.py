"""LLM replies remembered in Redis, so a redelivered event does not pay for the same calls.

Reads happen only when the event may have been handled before (`Delivery.redelivered`, which
phases.deps.PhaseDeps.delivered turns into the memo a handler is given): a first delivery
cannot have memoised replies, so it spends no round trip asking. Writes ride along with the
committer's next flush instead of costing a round trip each.

A memo is kept only while a redelivery could use it: until the run's deadline (plus
`MEMO_MARGIN_S` for clocks that disagree), as a hop redelivered after it ends its run without
calling the LLM (the deadline check before every handler, and the LLM session's own), and at
most `AEON_MEMO_TTL_S` for a run without a deadline. With the default 300 s timeout that is
minutes, not the day every memo used to be kept (7.9 KiB a run, measured in a soak).

A memo is also what a fork of a run takes its parent's replies from (`ForkedMemo`,
docs/forks.md), so each is kept `AEON_FORK_KEEP_S` past its run's deadline as well: a run can be
forked, without paying again for what it called, until its deadline and that long after (0 by
default, so a memo costs nothing once its run's deadline is past, as before forks).

A memo only saves an LLM call, so one that cannot be read is a miss, never a failed handler:
memo keys are outside the runs' shards, and on a cluster the master of a memo's slot may be
failing over while the run's own master is fine. A handler that failed on it would spend its
attempts in well under a second and send its run to dead letters.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys, memo_call, memo_key
from aeonloop.bus.redis_errors import TRANSIENT

if TYPE_CHECKING:  # the client reads `replies_kept_until`, and loads no committer
    from aeonloop.bus.commit import Committer

log = logging.getLogger("aeon.bus")

#: Seconds a memo outlives its run's deadline: the workers' clocks may disagree by that much.
MEMO_MARGIN_S = 5


def memo_ttl(
    until: datetime | None, longest_s: int, now: datetime | None = None, after_s: int = 0
) -> int:
    """Seconds to keep a memo of use until `until` (None: `longest_s`) and `after_s` past it
    (for forks), never more than `longest_s` and at least one."""
    if until is None:
        return longest_s
    left = (until - (now or datetime.now(UTC))).total_seconds() + MEMO_MARGIN_S + after_s
    return max(1, min(longest_s, math.ceil(left)))


def replies_kept_until(deadline: datetime, fork_keep_s: int) -> datetime:
    """Until when the memoised replies of a run with `deadline` are kept for forks (`memo_ttl`
    with AEON_FORK_KEEP_S): a fork made later would pay again for every call."""
    return deadline + timedelta(seconds=MEMO_MARGIN_S + fork_keep_s)


class Memo(Protocol):
    """Where LLM replies are remembered (llm.session.Memo, which this layer may not import)."""

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str, until: datetime | None = None) -> None: ...


class RedisMemo:
    def __init__(
        self, redis: RedisClient, keys: Keys, committer: Committer, fork_keep_s: int = 0
    ) -> None:
        """`fork_keep_s`: how long past its run's deadline a memo is kept for forks
        (AEON_FORK_KEEP_S)."""
        self._redis = redis
        self._keys = keys
        self._committer = committer
        self._fork_keep_s = fork_keep_s

    async def get(self, key: str) -> str | None:
        try:
            value = await self._redis.get(self._keys.memo(key))
        except TRANSIENT as error:
            log.info("memo %s not read (%s): the call is made again", key, type(error).__name__)
            return None
        return value.decode() if value is not None else None

    async def put(self, key: str, value: str, until: datetime | None = None) -> None:
        ttl = memo_ttl(until, self._committer.memo_ttl_s, after_s=self._fork_keep_s)
        self._committer.remember(key, value, ttl)


class ForkedMemo:
    """A fork's memo: its own replies first, then, for a call before its fork point, the reply
    its parent recorded for the same call (the same scope and prompt, under the parent's id),
    so the fork makes no LLM call for it. Replies it is given are written as its own.

    `own` is the memo the delivery reads (which asks nothing on a first delivery); `recorded`
    the memo as stored, read whatever the delivery: the parent's replies are there before the
    fork's first hop. `replays(phase, pass_number)` says which calls are the parent's
    (phases.events.Fork.replays)."""

    def __init__(
        self,
        own: Memo,
        recorded: Memo,
        run: str,
        parent: str,
        replays: Callable[[str, int | None], bool],
    ) -> None:
        self._own = own
        self._recorded = recorded
        self._run = run
        self._parent = parent
        self._replays = replays

    async def get(self, key: str) -> str | None:
        value = await self._own.get(key)
        if value is not None:
            return value
        call = memo_call(key, self._run)
        if call is None or not self._replays(call.phase, call.pass_number):
            return None
        return await self._recorded.get(memo_key(self._parent, *call.rest.rsplit("/", 1)))

    async def put(self, key: str, value: str, until: datetime | None = None) -> None:
        await self._own.put(key, value, until)
