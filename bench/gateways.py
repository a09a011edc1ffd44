"""The gateway side of a benchmark: one coroutine per run, submit and await the answer.

`PipelineGateway` is the real thing (AeonClient's `ask`: validation, a RequestSubmitted, one
reader for every answer). `ReferenceGateway` does what a gateway of the plain redis-py chain
must: XADD the first entry, and hand each entry of the final stream to the waiter of its cid,
read by one XREAD loop for all runs in flight; `FastStreamGateway` does the same with the
entries in FastStream's envelope. All run in the bench process, whose CPU the report shows, so
it is visible if the gateway rather than the worker is the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Self

from aeonloop.bus.connection import connect
from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient, stream_id_now
from aeonloop.phases.events import ExecutionResult
from bench import faststream_ref
from bench.chain import STREAM_MAXLEN, ChainSpec

#: The README's main-job request: two clauses, so the offline model plans more than one step.
REQUEST = "Explain how photosynthesis works, then rewrite it for a 10-year-old"
RUN_TIMEOUT_S = 600.0
_RECANCEL_S = 2.0


class PipelineGateway:
    """Runs through the real pipeline, via AeonClient."""

    def __init__(self, redis_url: str, prefix: str, shards: int | None = None) -> None:
        """`shards` as the workers' AEON_SHARDS (None: from the environment, as theirs)."""
        sharding = {} if shards is None else {"shards": shards}
        settings = BusSettings(redis_url=redis_url, prefix=prefix, **sharding)
        self._client = AeonClient(settings=settings)

    async def __aenter__(self) -> Self:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # AeonClient cancels its readers and awaits them. On Python 3.11 a cancellation that
        # lands while redis-py sends a command is swallowed by asyncio.wait_for (CPython
        # gh-86296; redis-py sends through wait_for when socket_timeout is set), and the
        # reader's `while True` loop goes on: the exit then never ends. Until the client
        # stops on a flag, cancel its readers again until they are gone.
        closing = asyncio.ensure_future(self._client.__aexit__(*exc_info))
        while not (await asyncio.wait({closing}, timeout=_RECANCEL_S))[0]:
            for reader in self._client._readers:
                reader.cancel()
        closing.result()

    async def one_run(self, timeout: float = RUN_TIMEOUT_S) -> ExecutionResult:
        return await self.ask(REQUEST, timeout)

    async def ask(self, request: str, timeout: float = RUN_TIMEOUT_S) -> ExecutionResult:
        return await self._client.ask(request, timeout=timeout)


class ReferenceGateway:
    """Runs through a reference chain: XADD into hop 0, wait for the cid on the final stream."""

    def __init__(self, redis_url: str, spec: ChainSpec) -> None:
        self._url = redis_url
        self._spec = spec
        self._waiters: dict[bytes, asyncio.Future[None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closing = False

    async def __aenter__(self) -> Self:
        # The same pool as AeonClient's, so the two gateways differ only in what they do.
        self._redis = await connect(BusSettings(redis_url=self._url), consumers=1)
        start = await stream_id_now(self._redis, self._spec.stream(self._spec.hops))
        self._reader = asyncio.create_task(self._follow(start))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # A flag as well as the cancel: a swallowed cancellation (see PipelineGateway) must
        # not keep the reader looping; it ends within one XREAD block either way.
        self._closing = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self._redis.aclose()

    async def one_run(self) -> None:
        cid = uuid.uuid4().hex.encode()
        future = self._waiters[cid] = asyncio.get_running_loop().create_future()
        try:
            await self._redis.xadd(
                self._spec.stream(0),
                await self._first_entry(cid),
                maxlen=STREAM_MAXLEN,
                approximate=True,
            )
            await asyncio.wait_for(future, RUN_TIMEOUT_S)
        finally:
            self._waiters.pop(cid, None)

    async def _first_entry(self, cid: bytes) -> dict[bytes, bytes]:
        return self._spec.payload(0, cid)

    def _cid(self, fields: dict[bytes, bytes]) -> bytes:
        return fields[b"cid"]

    async def _follow(self, start: str) -> None:
        out = self._spec.stream(self._spec.hops)
        last = start
        while not self._closing:
            reply = await self._redis.xread({out: last}, count=500, block=1000)
            for _stream, entries in reply or ():
                last = entries[-1][0]
                for _entry_id, fields in entries:
                    future = self._waiters.get(self._cid(fields))
                    if future is not None and not future.done():
                        future.set_result(None)


class FastStreamGateway(ReferenceGateway):
    """Runs through the FastStream chain (bench.faststream_ref): the same XADD and XREAD loop,
    with the entries in FastStream's envelope and the cid in its correlation_id header.

    The chain ends as every FastStream hop does: the last hop's `broker.publish` writes its
    envelope into the answers stream. Every hop of the measured process then runs the same
    FastStream code; a last hop writing a plain entry for this gateway would make one hop in
    N cheaper than FastStream is, and would not be what a FastStream chain does. The reading
    is adapted here instead, in the bench process, whose CPU is not in CPU per hop: hop 0's
    entry is what `broker.publish` writes (FastStream's own encoder, same bytes), and the
    answers are read by FastStream's own parser (its format is documented as readable without
    FastStream). Not a FastStream subscriber either: its per-message machinery (dependency
    injection, middlewares, a consumer group and an XACK per answer) would load the bench
    process, which shares the cores at 200 in flight, so the FastStream rows' latency would
    differ from the plain references' for a reason outside the chain they measure.
    """

    async def _first_entry(self, cid: bytes) -> dict[bytes, bytes]:
        return await faststream_ref.encode(self._spec, 0, cid)

    def _cid(self, fields: dict[bytes, bytes]) -> bytes:
        return faststream_ref.correlation_id(fields)
