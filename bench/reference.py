"""The plain redis-py reference consumers, run as their own process: `python -m bench.reference`.

Each hop of a `ChainSpec` gets one consumer (a stream, a group, one asyncio task), all in one
process like the pipeline's phases are in one `aeon worker`, so the CPU per hop of both can be
read from /proc the same way. Two modes, the issue's two references:

- sequential: XREADGROUP COUNT 1, then await XADD of the next hop's entry, then await XACK;
- batched: XREADGROUP COUNT 100, then XADD per entry plus one XACK, pipelined for the batch.

No decoding, no validation, no logging: this is what Python on Redis costs with nothing on top.
It runs on uvloop when the pipeline does (gateway.cli.main runs workers with uvloop.run).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from bench.chain import GROUP, STREAM_MAXLEN, ChainSpec, run_chain_process, stop_on_signals

MODES = ("sequential", "batched")
BATCH = 100
BLOCK_MS = 500
Hop = Callable[[Redis, ChainSpec, int, asyncio.Event], Awaitable[None]]


async def ensure_groups(redis: Redis, spec: ChainSpec) -> None:
    """Create every hop's group from id 0, so nothing published before the readers start is lost."""
    for hop in range(spec.hops):
        with contextlib.suppress(ResponseError):  # BUSYGROUP: already there
            await redis.xgroup_create(spec.stream(hop), GROUP, id="0", mkstream=True)


async def sequential_hop(redis: Redis, spec: ChainSpec, hop: int, stop: asyncio.Event) -> None:
    source, target = spec.stream(hop), spec.stream(hop + 1)
    while not stop.is_set():
        reply = await redis.xreadgroup(GROUP, "c", {source: ">"}, count=1, block=BLOCK_MS)
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                payload = spec.payload(hop + 1, fields[b"cid"])
                await redis.xadd(target, payload, maxlen=STREAM_MAXLEN, approximate=True)
                await redis.xack(source, GROUP, entry_id)


async def batched_hop(redis: Redis, spec: ChainSpec, hop: int, stop: asyncio.Event) -> None:
    source, target = spec.stream(hop), spec.stream(hop + 1)
    while not stop.is_set():
        reply = await redis.xreadgroup(GROUP, "c", {source: ">"}, count=BATCH, block=BLOCK_MS)
        for _stream, entries in reply or ():
            pipe = redis.pipeline(transaction=False)
            for _entry_id, fields in entries:
                payload = spec.payload(hop + 1, fields[b"cid"])
                pipe.xadd(target, payload, maxlen=STREAM_MAXLEN, approximate=True)
            pipe.xack(source, GROUP, *(entry_id for entry_id, _ in entries))
            await pipe.execute()


HOPS: dict[str, Hop] = {"sequential": sequential_hop, "batched": batched_hop}


async def serve(url: str, spec: ChainSpec, mode: str) -> None:
    """Run one consumer per hop until SIGTERM or SIGINT.

    The hops stop on a flag, not by cancellation: they end within one XREADGROUP block, and a
    cancellation swallowed by redis-py's wait_for on Python 3.11 cannot keep them looping.
    """
    redis = Redis.from_url(url)
    try:
        await ensure_groups(redis, spec)
        stop = stop_on_signals()
        hop_loop = HOPS[mode]
        await asyncio.gather(*(hop_loop(redis, spec, hop, stop) for hop in range(spec.hops)))
    finally:
        await redis.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    run_chain_process(argv, "python -m bench.reference", __doc__, MODES, serve)


if __name__ == "__main__":
    main()
