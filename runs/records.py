"""A run's records: what its events refer to instead of carrying, kept in one hash per run.

An event that carried everything its run had produced would grow with every pass and every
output, and each hop would pay to decode and encode all of it. So a handler may return, beside
its events, `RunRecord`s: fields of the run's hash (`Keys.run_records`), written by the same
commit script as the events and before them (bus.commit). Hence, for every event in a stream,
the records it refers to exist:

- a commit is one script, and the first refused write stops it, so no event is added without
  the records written before it; on a cluster both live in the run's slot, so a failover that
  loses the newest writes loses the event with them, or neither;
- a record is written with HSET of a deterministic field, and a redelivered handler rebuilds
  it from the same event and memoised replies, so writing it again changes nothing; a commit
  that finds its event done writes nothing at all;
- each value is stored compressed (bus.compact), and read back as the JSON written;
- the hash expires with the run's answer: AEON_ANSWER_TTL_S from its last write, and from
  the answer's, set in the same script.

Readers (the phases that need a run's history, the HTTP gateway's run steps) read the fields
they need with one HMGET. A phase names them in its route (`Route.records`), and the consumer
reads them in the round trip that locks the event (bus.locking) and hands them to the handler
in its `Delivery` (bus.delivery), so a hop that needs its run's history costs no round trip
more than one that does not: the handler reads from those first (phases.history.ReadAhead),
and asks `RedisRunRecords` only for what they lack.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from aeonloop.bus.compact import unpack
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys
from aeonloop.bus.redis_errors import TRANSIENT

log = logging.getLogger("aeon.bus")


class RedisRunRecords:
    """Reads a run's records from the run's shard."""

    def __init__(self, redis: RedisClient, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys

    async def read(self, correlation_id: str, names: Sequence[str]) -> list[bytes | None]:
        """Each named field's value, None where there is none.

        A run is kept in the shard its id picks; one whose first entry was put in another
        shard keeps its records there, so any field missing is looked for in the others.
        """
        values = await self._hmget(self._keys.run_records(correlation_id), names)
        home = self._keys.shard_of(correlation_id)
        for shard in range(self._keys.shards):
            if all(value is not None for value in values):
                break
            if shard != home:
                other = await self._hmget(self._keys.run_records(correlation_id, shard), names)
                values = [v if v is not None else o for v, o in zip(values, other, strict=True)]
        return values

    async def _hmget(self, key: str, names: Sequence[str]) -> list[bytes | None]:
        """HMGET, waiting out a Redis that is away (a master failing over) for about 20 s: a
        handler failing on it instead would spend its attempts in under a second and send its
        run to dead letters, while the history it needs is there once the failover is over."""
        values = await _WAIT_OUT.call_with_retry(
            lambda: self._redis.hmget(key, list(names)), _not_yet
        )
        return [None if value is None else unpack(value) for value in values]


def forget(pipe: Any, keys: Keys, correlation_id: str, shard: int, name: str) -> None:
    """Queue on `pipe` (a pipeline bound to `shard`'s slot, written in order) the deletion of
    the run's record `name`: `aeon dlq replay` forgets a webhook's count of tries with it."""
    pipe.hdel(keys.run_records(correlation_id, shard), name)


#: Backoff 0.2, 0.4, 0.8, 1.6, then 2 s: 12 retries, about 19 s (redis-py's own retry loop).
_WAIT_OUT = Retry(ExponentialBackoff(cap=2.0, base=0.1), retries=12, supported_errors=TRANSIENT)


async def _not_yet(error: Exception) -> None:
    log.info("a run's history not read yet (%s); trying again", type(error).__name__)
