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

A memo only saves an LLM call, so one that cannot be read is a miss, never a failed handler:
memo keys are outside the runs' shards, and on a cluster the master of a memo's slot may be
failing over while the run's own master is fine. A handler that failed on it would spend its
attempts in well under a second and send its run to dead letters.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime

from aeonloop.bus.commit import Committer
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys
from aeonloop.bus.redis_errors import TRANSIENT

log = logging.getLogger("aeon.bus")

#: Seconds a memo outlives its run's deadline: the workers' clocks may disagree by that much.
MEMO_MARGIN_S = 5


def memo_ttl(until: datetime | None, longest_s: int, now: datetime | None = None) -> int:
    """Seconds to keep a memo of use until `until` (None: `longest_s`), never more than
    `longest_s` and at least one."""
    if until is None:
        return longest_s
    left = (until - (now or datetime.now(UTC))).total_seconds() + MEMO_MARGIN_S
    return max(1, min(longest_s, math.ceil(left)))


class RedisMemo:
    def __init__(self, redis: RedisClient, keys: Keys, committer: Committer) -> None:
        self._redis = redis
        self._keys = keys
        self._committer = committer

    async def get(self, key: str) -> str | None:
        try:
            value = await self._redis.get(self._keys.memo(key))
        except TRANSIENT as error:
            log.info("memo %s not read (%s): the call is made again", key, type(error).__name__)
            return None
        return value.decode() if value is not None else None

    async def put(self, key: str, value: str, until: datetime | None = None) -> None:
        self._committer.remember(key, value, memo_ttl(until, self._committer.memo_ttl_s))
