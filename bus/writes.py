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

import asyncio
import logging

from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

log = logging.getLogger("aeon.bus")


def refuses_writes(error: BaseException) -> bool:
    """Whether `error` is Redis refusing a write it would take once its trouble is over."""
    if isinstance(error, (OutOfMemoryError, ReadOnlyError)):
        return True
    return isinstance(error, ResponseError) and str(error).startswith("MISCONF")


class WriteGate:
    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def refused(self, error: BaseException) -> None:
        if self._open.is_set():
            self._open.clear()
            said = str(error).splitlines()[0] if str(error) else type(error).__name__
            log.warning(
                "Redis refuses writes (%s); work waits and nothing is given up until it "
                "accepts them again",
                said,
            )

    def accepted(self) -> None:
        if not self._open.is_set():
            self._open.set()
            log.warning("Redis accepts writes again; work goes on")

    async def wait_open(self) -> None:
        await self._open.wait()
