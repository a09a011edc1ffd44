"""Whether Redis takes writes: work waits while it refuses them, instead of being spent.

Redis refuses writes when it is out of memory (`maxmemory` with `noeviction`, which a stream
broker needs), when the connection reaches a read-only replica after a failover, or when it
cannot persist (MISCONF). Reads, acks and claims still work then, so a worker that went on
would read and claim entries it cannot lock or commit: their delivery counts would climb and
the requests would end as dead letters once memory came back. Instead, one gate per process:

- the first refused write closes it, and the worker says so once;
- while it is closed nothing new is read or claimed; what is in flight keeps its entries and
  locks (the heartbeat's XCLAIM and PEXPIRE are allowed) and retries its lock or commit;
- the first write that succeeds opens it, and the worker says so once.
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

log = logging.getLogger("aeon.bus")


#: How Redis words a refused write, wherever redis-py puts it: a reply of its own (`OOM ...`,
#: `READONLY ...`), inside a pipeline's "Command # N ... caused error", or inside a script's
#: error on Redis 6 ("Error running script ... -OOM ...").
_REFUSALS = ("when used memory > 'maxmemory'", "READONLY", "read only replica", "MISCONF")


def refuses_writes(error: BaseException) -> bool:
    """Whether `error` is Redis refusing a write it would take once its trouble is over."""
    if isinstance(error, (OutOfMemoryError, ReadOnlyError)):
        return True
    return isinstance(error, ResponseError) and any(words in str(error) for words in _REFUSALS)


def said(error: BaseException) -> str:
    """What Redis said, without redis-py's pipeline preamble (which quotes whole scripts)."""
    text = str(error).split("caused error: ")[-1].strip("()'\" ")
    return text.splitlines()[0] if text else type(error).__name__


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
