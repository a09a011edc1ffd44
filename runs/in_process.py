"""The run store's three stores a handler reads, kept in this process's dicts, instead of Redis.

A phase handler is given a memo of LLM replies (Redis: runs.memo), the run records its events
refer to (runs.records) and the cancels it must obey (runs.cancels). Here are the same three held
in memory, with the interfaces the phases ask for (`llm.session.Memo`, `phases.history.RunRecords`,
`phases.cancels.Cancels`), for what runs without a bus:

- the phases' own defaults (`phases.deps.PhaseDeps`) and Phase E as a library call
  (`phases.phase_e.execute_phase_e`, FR-021), which share nothing with another process;
- tests that call handlers directly and chain them through the wire form (tests/unit).

They live in the run store, beside the Redis stores they stand in for, below the phases and the
LLM layer, so both can use them without importing upwards; `aeonloop.testing` offers them with
the rest of the test harness.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from aeonloop.bus.route import RunRecord

__all__ = ["DictCancels", "DictMemo", "DictRunRecords"]


class DictMemo:
    """An in-process memo: for tests and for one-shot runs that need no sharing."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get(self, key: str) -> str | None:
        return self.values.get(key)

    async def put(self, key: str, value: str, until: datetime | None = None) -> None:
        self.values[key] = value


class DictRunRecords:
    """Run records in a dict: for tests that chain handlers through the wire form."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], bytes] = {}

    def write(self, records: Sequence[RunRecord]) -> None:
        for record in records:
            self.values[(record.correlation_id, record.name)] = record.value

    async def read(self, correlation_id: str, names: Sequence[str]) -> list[bytes | None]:
        return [self.values.get((correlation_id, name)) for name in names]


class DictCancels:
    """Cancels kept in this process: for tests and one-shot runs."""

    def __init__(self) -> None:
        self.runs: set[str] = set()
        self._watched: dict[str, asyncio.Future[None]] = {}

    def cancel(self, correlation_id: str) -> None:
        self.runs.add(correlation_id)
        seen = self._watched.get(correlation_id)
        if seen is not None and not seen.done():
            seen.set_result(None)

    async def cancelled(self, correlation_id: str) -> bool:
        return correlation_id in self.runs

    @contextlib.asynccontextmanager
    async def watch(self, correlation_id: str) -> AsyncIterator[asyncio.Future[None]]:
        if correlation_id not in self._watched:
            self._watched[correlation_id] = asyncio.get_running_loop().create_future()
        seen = self._watched[correlation_id]
        if correlation_id in self.runs and not seen.done():
            seen.set_result(None)
        try:
            yield seen
        finally:
            self._watched.pop(correlation_id, None)
