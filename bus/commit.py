"""The write side of a worker: outputs, dedupe marks and acks, one pipeline per loop tick.

Handlers finish at their own pace; each queues a Commit and awaits it. The flusher sends every
queued commit in one pipelined round trip, so under load a hop costs a fraction of a round trip,
and with one event in flight it costs exactly one (nothing waits for a batch to fill).

Order inside a commit matters: outputs first, then the "done" mark, then XACK. A crash in
between leaves the entry pending; its redelivery finds the memoised LLM replies, publishes the
same deterministic event ids, and the next consumer's dedupe drops the copy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from bus.codec import Routable, encode
from bus.connection import TRANSIENT, RedisClient
from bus.deadletter import DeadLetter
from bus.keys import ANSWERS, Keys, LockState
from bus.settings import BusSettings
from bus.writes import WriteGate, refuses_writes, said

log = logging.getLogger("aeon.bus")

#: One FinalAnswer per run, even if two exits reach Phase E: the answer key is set only if absent,
#: and the answers stream gets the entry only then. Both keys are in the run's shard (bus.keys).
_PUBLISH_ANSWER = """
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'EX', ARGV[4]) then
  return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*',
                    'type', ARGV[1], 'cid', ARGV[2], 'body', ARGV[3])
end
return false
"""


class WriteRefused(Exception):
    """Redis answered, but refused part of a commit."""

    def __init__(self, refused: list[Exception]) -> None:
        super().__init__(f"Redis refused {len(refused)} command(s): {refused[0]}")
        self.first = refused[0]


def _settle(batch: list[Commit], error: BaseException | None) -> None:
    for item in batch:
        if item.done is not None and not item.done.done():
            if error is None:
                item.done.set_result(None)
            else:
                item.done.set_exception(error)


@dataclass(slots=True)
class Commit:
    #: The shard of the entry being committed: its dead letter goes to that shard's stream.
    shard: int
    stream_key: str
    group: str
    entry_id: bytes
    outputs: list[Routable] = field(default_factory=list)
    lock_key: str | None = None
    dead: DeadLetter | None = None
    encoded: list[tuple[str, dict[str, bytes]]] = field(default_factory=list)
    done: asyncio.Future[None] | None = None
    #: The dead letter's id on the dead-letter stream, once committed.
    dead_id: str | None = None


class Committer:
    def __init__(self, redis: RedisClient, keys: Keys, settings: BusSettings) -> None:
        self._redis = redis
        self._keys = keys
        self._settings = settings
        self._queue: list[Commit] = []
        self._side_writes: list[tuple[str, str]] = []
        self._wake = asyncio.Event()
        self._closed = False
        #: Shared by every consumer of this process (bus.writes).
        self.gate = WriteGate()

    async def commit(self, item: Commit) -> str | None:
        """Queue `item` and wait until Redis has it.

        Outputs are encoded here, in the caller's task: an event that cannot be encoded fails
        its own commit (ValueError), never the flush that carries everyone else's. So does one
        larger than `max_event_bytes`: the phase that would read it refuses it at decode, where
        its run could only be answered as lost; refused here, the run is answered from the
        event being handled, with the true reason. Answers are exempt: gateways take them whole.
        """
        item.encoded = [(event.STREAM, encode(event)) for event in item.outputs]
        for stream, fields in item.encoded:
            size, limit = len(fields["body"]), self._settings.max_event_bytes
            if stream != ANSWERS and size > limit:
                kind = fields["type"].decode()
                raise ValueError(
                    f"the {kind} event would be {size} bytes, over AEON_MAX_EVENT_BYTES ({limit})"
                )
        item.done = asyncio.get_running_loop().create_future()
        self._queue.append(item)
        self._wake.set()
        await item.done
        return item.dead_id

    def remember(self, key: str, value: str) -> None:
        """A memo write that rides along with the next flush instead of costing a round trip."""
        self._side_writes.append((key, value))
        self._wake.set()

    async def run(self) -> None:
        """Flush until closed and drained."""
        while not (self._closed and not self._queue and not self._side_writes):
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            memos, self._side_writes = self._side_writes, []
            if batch or memos:
                await self._flush_until_sent(batch, memos)

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def _flush_until_sent(self, batch: list[Commit], memos: list[tuple[str, str]]) -> None:
        """Send the batch, retrying while Redis is away or refuses writes (say, out of memory).

        After close, retries stop once the shutdown grace is spent: the entries stay pending
        for another worker to claim, rather than holding a stopping worker forever.
        """
        delay, started = 0.1, time.monotonic()
        while True:
            try:
                await self._flush(batch, memos)
            except (*TRANSIENT, WriteRefused) as error:
                if self._closed and time.monotonic() - started > self._settings.shutdown_grace_s:
                    _settle(batch, error)
                    log.error("%d commits not sent at shutdown; entries stay pending", len(batch))
                    return
                if isinstance(error, WriteRefused) and not refuses_writes(error.first):
                    # Not an outage (a wrong key type, no permission): a retry would fail the
                    # same way and hold up every later commit. The entries stay pending.
                    log.error("commit refused for good (%s); its entries stay pending", said(error))
                    _settle(batch, error)
                    return
                if isinstance(error, WriteRefused):
                    self.gate.refused(error.first)  # says so once, not once per retry
                elif delay == 0.1:
                    log.warning("commit failed (%s); retrying until it is sent", error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            except Exception as error:  # a bug in one batch must not stop every later commit
                log.exception("commit failed for good; its entries stay pending")
                _settle(batch, error)
                return
            if memos or any(item.encoded or item.dead or item.lock_key for item in batch):
                self.gate.accepted()  # a batch of acks alone says nothing: XACK needs no memory
            _settle(batch, None)
            return

    async def _flush(self, batch: list[Commit], memos: list[tuple[str, str]]) -> None:
        settings = self._settings
        pipe = self._redis.pipeline(transaction=False)
        for key, value in memos:
            pipe.set(self._keys.memo(key), value, ex=settings.memo_ttl_s)
        dead_letters: list[tuple[Commit, int]] = []
        for item in batch:
            for stream, fields in item.encoded:
                self._publish(pipe, stream, fields)
            if item.dead is not None:
                dead_letters.append((item, len(pipe)))
                pipe.xadd(
                    self._keys.dead_letter(item.shard),
                    item.dead.to_fields(),
                    maxlen=settings.stream_maxlen,
                    approximate=True,
                )
            if item.lock_key is not None:
                pipe.set(item.lock_key, LockState.DONE.value, px=settings.dedupe_ttl_s * 1000)
            pipe.xack(item.stream_key, item.group, item.entry_id)
        # NOGROUP on an ack (Redis lost its data) is harmless; any other refused command (OOM
        # on an XADD) means outputs were not stored, so the whole batch is sent again: the
        # outputs' deterministic ids let consumers drop what the first attempt did store.
        replies = await pipe.execute(raise_on_error=False)
        for reply in replies:  # on a cluster, one node's trouble comes back as its replies
            if isinstance(reply, TRANSIENT):
                raise reply
        refused = [r for r in replies if isinstance(r, Exception) and "NOGROUP" not in str(r)]
        if refused:
            raise WriteRefused(refused)
        for item, index in dead_letters:
            item.dead_id = replies[index].decode()

    def _publish(self, pipe: Any, stream: str, fields: dict[str, bytes]) -> None:
        """Queue one output on `pipe` (a pipeline of either client), in its run's shard."""
        correlation_id = fields["cid"].decode()
        if stream == ANSWERS:
            # EVAL, not EVALSHA: a pipeline with registered scripts costs a SCRIPT EXISTS round
            # trip per flush, while Redis caches the compiled script by its text anyway.
            pipe.eval(
                _PUBLISH_ANSWER,
                2,
                self._keys.stream_of(ANSWERS, correlation_id),
                self._keys.answer(correlation_id),
                fields["type"],
                fields["cid"],
                fields["body"],
                self._settings.answer_ttl_s,
                self._settings.stream_maxlen,
            )
        else:
            pipe.xadd(
                self._keys.stream_of(stream, correlation_id),
                fields,
                maxlen=self._settings.stream_maxlen,
                approximate=True,
            )
