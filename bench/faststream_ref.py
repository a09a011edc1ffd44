"""The FastStream reference, run as its own process: `python -m bench.faststream_ref`.

What a FastStream user would write to carry the same chain as the plain redis-py references
(bench.reference): one stock `RedisBroker`, one `@broker.subscriber(stream=StreamSub(...))` per
hop, each reading its hop's stream through a consumer group and publishing the next hop's event
with `broker.publish(..., stream=<next stream>)`. All hops in one process, like the references
and `aeon worker`, so the CPU per hop is read from /proc the same way. Two modes:

- default: FastStream's defaults, one message per handler call. FastStream reads with XREADGROUP
  (no COUNT, BLOCK 100 ms), calls the handler for each entry in turn, and XACKs it after the
  handler returns (AckPolicy.REJECT_ON_ERROR): XADD, then XACK, per message, like the
  sequential reference;
- batch: `StreamSub(batch=True, max_records=100)`, the batched reference's read size; the
  handler publishes the batch's outputs through FastStream's `Pipeline` dependency (its
  documented way to send many commands in one round trip: one MULTI/EXEC), then FastStream
  XACKs the whole batch. Its batch parser turns the bodies into one JSON list, which the
  handler's `list[bytes]` is decoded from again: bodies must be UTF-8 (these are), and one
  that is not leaves the whole batch pending without the handler ever being called.

The three fields of a reference entry map onto FastStream's message: the body is the message
(bytes, so FastStream sends it as is, with no serializer), the type is a header, and the cid
is FastStream's own correlation_id header, which each hop passes on explicitly: `broker.publish`
in a handler does not inherit the incoming message's correlation_id, it makes a new one. The
handler reads it from the message it asks for with FastStream's documented annotation
(`RedisStreamMessage`); in this FastStream that is a Context, a synchronous dependency, which
fast-depends runs in anyio's worker threads: one thread round trip per handler call (two per
batch, with the `Pipeline`), part of what FastStream costs per message.

One setting differs from the defaults: `log_level=DEBUG`, the level FastStream writes its access
log at. By default it writes two lines per message (Received, Processed) at INFO; neither Aeon's
bus nor the references log per message, so that would measure the logging module and the log
file rather than the bus (about 45 µs more CPU per message here). At DEBUG its logger drops
them, at the cost of `logger=None`, while errors still reach this process's log: a failing
handler is otherwise silent, and its entry stays pending for good (see `build_broker`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import Pipeline, RedisBatchStreamMessage, RedisStreamMessage
from faststream.redis.parser import BinaryMessageFormatV1

from bench.chain import GROUP, STREAM_MAXLEN, ChainSpec, run_chain_process, stop_on_signals
from bench.reference import BATCH

MODES = ("default", "batch")
#: The envelope `broker.publish` writes into a stream entry, under this one field.
MESSAGE_FORMAT = BinaryMessageFormatV1
DATA_FIELD = b"__data__"


async def encode(spec: ChainSpec, hop: int, cid: bytes) -> dict[bytes, bytes]:
    """The entry `broker.publish` would write into stream `hop` for run `cid` (the gateway's)."""
    kind, body = spec.event(hop)
    data = await MESSAGE_FORMAT.encode(
        message=body, reply_to=None, headers={"type": kind.decode()}, correlation_id=cid.decode()
    )
    return {DATA_FIELD: data}


def correlation_id(fields: dict[bytes, bytes]) -> bytes:
    """The cid of an entry FastStream published, read as FastStream's parser reads it."""
    _body, headers = MESSAGE_FORMAT.parse(fields[DATA_FIELD])
    return str(headers["correlation_id"]).encode()


def add_default_hop(broker: RedisBroker, spec: ChainSpec, hop: int) -> None:
    kind, body = spec.event(hop + 1)
    target, headers = spec.stream(hop + 1), {"type": kind.decode()}

    @broker.subscriber(stream=StreamSub(spec.stream(hop), group=GROUP, consumer="c"))
    async def handle(_body: bytes, message: RedisStreamMessage) -> None:
        await broker.publish(
            body,
            stream=target,
            correlation_id=message.correlation_id,
            headers=headers,
            maxlen=STREAM_MAXLEN,
        )


def add_batch_hop(broker: RedisBroker, spec: ChainSpec, hop: int) -> None:
    kind, body = spec.event(hop + 1)
    target, headers = spec.stream(hop + 1), {"type": kind.decode()}
    source = StreamSub(spec.stream(hop), group=GROUP, consumer="c", batch=True, max_records=BATCH)

    @broker.subscriber(stream=source)
    async def handle(
        _bodies: list[bytes], message: RedisBatchStreamMessage, pipe: Pipeline
    ) -> None:
        for incoming in message.batch_headers:
            await broker.publish(
                body,
                stream=target,
                correlation_id=incoming["correlation_id"],
                headers=headers,
                maxlen=STREAM_MAXLEN,
                pipeline=pipe,
            )
        await pipe.execute()


HOPS = {"default": add_default_hop, "batch": add_batch_hop}


def build_broker(url: str, spec: ChainSpec, mode: str) -> RedisBroker:
    """A broker with every hop's subscriber, not started.

    With FastStream's default AckPolicy.REJECT_ON_ERROR a handler that raises has its entry
    rejected, and a reject is a no-op on a Redis stream: the entry is neither acknowledged nor
    delivered again (only a subscriber with `min_idle_time` would claim it). So a run whose
    hop fails never answers; the error is in this process's log.
    """
    broker = RedisBroker(url, log_level=logging.DEBUG)
    for hop in range(spec.hops):
        HOPS[mode](broker, spec, hop)
    return broker


async def serve(url: str, spec: ChainSpec, mode: str) -> None:
    """Run the broker until SIGTERM or SIGINT.

    The bench process created every group from id 0 beforehand (reference.ensure_groups):
    FastStream creates a missing group at `$`, which would lose what was published before its
    subscribers started; an existing one it leaves as it is.
    """
    broker = build_broker(url, spec, mode)
    stop = stop_on_signals()
    await broker.start()
    try:
        await stop.wait()
    finally:
        await broker.stop()


def main(argv: Sequence[str] | None = None) -> None:
    run_chain_process(argv, "python -m bench.faststream_ref", __doc__, MODES, serve)


if __name__ == "__main__":
    main()
