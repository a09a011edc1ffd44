"""Aeon's streams for a FastStream app: submit requests, and receive answers and progress as the
typed events they are, with the run's correlation id in FastStream's message context.

    from faststream import Context, FastStream
    from faststream.redis import RedisBroker

    from aeonloop import AeonStreams, FinalAnswerReady, RequestSubmitted

    broker = RedisBroker("redis://localhost:6379/0")
    aeon = AeonStreams(broker)  # AEON_PREFIX and AEON_SHARDS from the environment, as Aeon's own
    app = FastStream(broker)

    @aeon.subscriber(FinalAnswerReady)
    async def on_answer(
        event: FinalAnswerReady, correlation_id: str = Context("message.correlation_id")
    ) -> None:
        print(correlation_id, event.result.final_answer.answer_text)

    @app.after_startup
    async def ask() -> None:
        await aeon.submit(RequestSubmitted.new("Explain how tides work", timeout=120))

Both wire forms work. A request published with FastStream's own `broker.publish(...)` carries
FastStream's envelope, which Aeon's consumers accept (bus.codec); `submit` adds the `type`
header and picks the run's shard. Aeon writes its own flat entries (`type`, `cid`, `body`), which
the parser here turns into FastStream messages: the body as JSON, `cid` as the correlation id.

The same declarations, with a subscriber per phase group and a publisher per stream, make the
AsyncAPI document of `aeon asyncapi`.
"""

from __future__ import annotations

import json
import time
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from faststream.message import StreamMessage
from faststream.redis import RedisBroker, StreamSub
from faststream.specification import AsyncAPI

from aeonloop import __version__
from aeonloop.bus.codec import FASTSTREAM_FIELD, trace_context
from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.validation import FileSettings, TurnSettings, check_files, check_turns
from aeonloop.phases.events import EVENT_TYPES, Event, RequestSubmitted
from aeonloop.phases.worker import PHASE_INPUTS

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


async def parse_aeon_entry(
    message: Any, parse: Callable[[Any], Awaitable[StreamMessage[Any]]]
) -> StreamMessage[Any]:
    """FastStream's parser, taught Aeon's flat entries: the body is the event's JSON, the
    correlation id is `cid`, the `type` header names the event class, and the trace context
    fields are headers as FastStream writes them. FastStream's own entries pass through
    unchanged."""
    parsed = await parse(message)
    fields = message.get("data") or {}
    if FASTSTREAM_FIELD in fields or b"body" not in fields:
        return parsed
    correlation_id = fields.get(b"cid", b"").decode()
    parsed.body = fields[b"body"]
    parsed.correlation_id = correlation_id
    parsed.content_type = "application/json"
    parsed.headers = {
        "type": fields.get(b"type", b"").decode(),
        "correlation_id": correlation_id,
        **trace_context(fields),  # so FastStream's telemetry middleware continues the run's trace
    }
    return parsed


class AeonStreams:
    """Aeon's streams on a FastStream `RedisBroker`, named as Aeon names them (bus.keys)."""

    def __init__(
        self,
        broker: RedisBroker,
        settings: BusSettings | None = None,
        file_limits: FileSettings | None = None,
    ) -> None:
        self.broker = broker
        self.settings = settings or BusSettings.from_env()
        self.keys = Keys(self.settings.prefix, self.settings.shards)
        #: What a request may attach (AEON_MAX_FILES and the byte limits), as Aeon's gateways.
        self.file_limits = file_limits or FileSettings.from_env()
        #: What earlier turns it may carry (AEON_MAX_TURNS, AEON_MAX_TURNS_CHARS), likewise.
        self.turn_limits = TurnSettings.from_env()

    async def submit(self, request: RequestSubmitted) -> str:
        """Publish `request` with FastStream, to its run's shard; its correlation id. Its files
        and earlier turns are held to the limits Aeon's gateways hold them to: BadInput
        (TooLarge past a limit on size) before anything is published."""
        check_files(request.files, self.file_limits)
        check_turns(request.messages, self.turn_limits)
        await self.broker.publish(
            request,
            stream=self.keys.stream_of(request.STREAM, request.correlation_id),
            correlation_id=request.correlation_id,
            headers={"type": type(request).__name__},
            maxlen=self.settings.stream_maxlen,
        )
        return request.correlation_id

    def subscriber(self, *event_types: type[Event], **options: Any) -> Decorator:
        """Subscribe a handler to `event_types` (only those: a stream may carry others) in
        every shard, reading as a gateway does (no consumer group) every entry added after this
        declaration, by this host's clock: FastStream's `$` would miss what is added between
        two of its reads until it has seen one entry."""
        streams = dict.fromkeys(key for t in event_types for key in self.keys.streams(t.STREAM))
        names = {t.__name__ for t in event_types}
        since = f"{int(time.time() * 1000)}-0"

        def wanted(message: StreamMessage[Any]) -> bool:
            return message.headers.get("type") in names

        def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
            for key in streams:
                subscriber = self.broker.subscriber(
                    stream=StreamSub(key, last_id=since), parser=parse_aeon_entry, **options
                )
                handler = subscriber(handler, filter=wanted)
            return handler

        return decorate


def describe(settings: BusSettings) -> RedisBroker:
    """A broker declaring every Aeon stream: a subscriber per phase group with the events it
    consumes, and a publisher per stream with the events written to it. Shard 0's keys stand
    for every shard's. For the document only: started, it would join the phase groups."""
    broker = RedisBroker(settings.redis_url or "redis://localhost:6379/0")
    keys = Keys(settings.prefix, settings.shards)
    for phase, consumed in PHASE_INPUTS.items():
        group = keys.group(phase)
        broker.subscriber(
            stream=StreamSub(keys.stream(consumed[0].STREAM, 0), group=group, consumer="host-pid"),
            title=group,
            description=f"Phase {phase.upper()}: the consumer group of every `aeon worker`.",
        )(_handler_of(consumed))
    for stream, written in _streams().items():
        broker.publisher(
            stream=keys.stream(stream, 0),
            title=stream,
            description=f"The {stream} stream, once per shard (AEON_SHARDS): "
            f"{', '.join(t.__name__ for t in written)}.",
            schema=_union(written),
        )
    return broker


def asyncapi_json(settings: BusSettings) -> str:
    """The AsyncAPI 3.0 document of Aeon's streams, generated by FastStream."""
    spec = AsyncAPI(
        describe(settings),
        title="Aeon",
        version=__version__,
        description="Multi-pass LLM reasoning over Redis Streams: its streams, consumer "
        "groups and events. Entries are flat fields (type, cid, body); FastStream's envelope "
        "is accepted too.",
        schema_version="3.0.0",
    )
    # Sorted: FastStream keeps its subscribers in a set, so its own order varies between runs.
    return json.dumps(json.loads(spec.to_specification().to_json()), indent=2, sort_keys=True)


def _streams() -> dict[str, tuple[type[Event], ...]]:
    """Every stream and the event types written to it, in pipeline order."""
    streams: dict[str, tuple[type[Event], ...]] = {}
    for event_type in EVENT_TYPES.values():
        streams[event_type.STREAM] = (*streams.get(event_type.STREAM, ()), event_type)
    return streams


def _union(event_types: tuple[type[Event], ...]) -> Any:
    return event_types[0] if len(event_types) == 1 else typing.Union[event_types]  # noqa: UP007


def _handler_of(event_types: tuple[type[Event], ...]) -> Callable[..., Any]:
    """A handler whose signature names what it consumes (FastStream reads the schema from it);
    declared only: `aeon worker` does the work."""

    async def consume(event: Any) -> None:
        raise NotImplementedError("a declaration for the AsyncAPI document only")

    consume.__annotations__ = {"event": _union(event_types), "return": types.NoneType}
    return consume
