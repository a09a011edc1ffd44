"""Whether Redis takes writes: work waits while it refuses them, instead of being spent.

Redis refuses writes when it is out of memory (`maxmemory` with `noeviction`, which a stream
broker needs), when the connection reaches a read-only replica after a failover, or when it
cannot persist (MISCONF); bus.redis_errors recognises each. Reads, acks and claims still work
then, so a worker that went on would read and claim entries it cannot lock or commit: their
delivery counts would climb and the requests would end as dead letters once memory came back.
Instead, one gate per process:

- the first refused write closes it, and the worker says so once;
- while it is closed nothing new is read or claimed; what is in flight keeps its entries and
  locks (the heartbeat's XCLAIM and PEXPIRE are allowed) and retries its lock or commit;
- the first write that succeeds opens it, and the worker says so once.
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from aeonloop.bus.redis_errors import refuses_writes, said

log = logging.getLogger("aeon.bus")


class WriteGate:
    def __init__(self) -> None:
        self.is_open = True

    def refused(self, error: BaseException) -> None:
        if self.is_open:
            self.is_open = False
            log.warning(
                "Redis refuses writes (%s); work waits and nothing is given up until it "
                "accepts them again",
                said(error),
            )

    def accepted(self) -> None:
        """Call only after a write that needs free memory (SET, XADD) went through."""
        if not self.is_open:
            self.is_open = True
            log.warning("Redis accepts writes again; work goes on")

    async def probe(self, redis: Redis, key: str) -> None:
        """While closed, try one small write, so the gate opens even when nothing else in
        this process is waiting to write (the probe expires at once)."""
        try:
            await redis.set(key, b"1", px=1000)
        except ResponseError as error:
            if refuses_writes(error):
                return
            raise
        self.accepted()
