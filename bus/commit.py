"""The write side of a worker: outputs, dedupe marks and acks, one pipeline per loop tick.

Handlers finish at their own pace; each queues a Commit and awaits it. The flusher sends every
queued commit in one pipelined round trip, so under load a hop costs a fraction of a round trip,
and with one event in flight it costs exactly one (nothing waits for a batch to fill).

Each commit is one script (`_COMMIT`), run by Redis as one step: the run's records
(runs.records), then the output events, then the "done" mark, then XACK. A pipeline would not
do: Redis out of memory refuses the XADDs and SETs but takes the XACK (it needs no memory),
and a worker killed before its retry would then have acked an entry whose outputs never
existed. In the script the first refused write stops it. All of a commit's keys are in the
run's shard (bus.keys), so on a cluster it runs on one node.

A crash before the script leaves the entry pending; its redelivery finds the memoised LLM
replies, publishes the same deterministic event ids, and the next consumer's dedupe drops the
copy. Commits are settled one by one: those Redis took are done, those it could not take (a
master failing over, writes refused) are sent again, alone, without holding up the others.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aeonloop.bus.codec import Published, Routable, encode
from aeonloop.bus.compact import pack
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.keys import (
    ANSWERS,
    HEAD_RECORD,
    WEBHOOK_OUTCOMES,
    Keys,
    LockState,
    head_of,
)
from aeonloop.bus.redis_errors import (
    TRANSIENT,
    group_missing,
    refuses_writes,
    retry_later,
    said,
    script_missing,
)
from aeonloop.bus.route import RunRecord
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.settlement import SETTLE
from aeonloop.bus.writes import WriteGate

log = logging.getLogger("aeon.bus")

#: A memo write: its key (bus.keys.memo_key), its value, how many seconds it is kept.
MemoWrite = tuple[str, str, int]

#: One commit. KEYS: the entry's stream, its event's lock (the stream again when there is none),
#: then per output its stream (a record: its run's hash), for a step also its run's hash, and for an
#: answer also the answer key, the run's hash and its answer text stream. ARGV: group, entry id,
#: stream maxlen, done-mark TTL ms, answer TTL s, the done value, answer text maxlen, how long a
#: settled answer text stream is kept (s), the head's field (keys.HEAD_RECORD), then per output: its
#: kind ("record", "event", "step", "answer", "dead"), its number of fields and the fields (a
#: record's: its name and value), for a step its head but for the entry id (`<type> <stream>`), and
#: for an answer the value its answer key stores (its body, packed: bus.compact) and its published
#: text. A step is a progress event (one a reader of the run shows: not an answer, a webhook's
#: outcome or a dead letter): the run's head is set to it with its entry id in the same step as its
#: XADD, one HSET that costs no round trip. Records come first, so an event is never added without
#: the records it refers to; the run's hash expires with its answer (set again when the answer is).
#: Returns the dead letter's id, if any. One FinalAnswer per run, even if two exits reach Phase E:
#: an answer is added to its stream only if its answer key was not set yet (SET NX), and only then
#: is the run's answer text stream settled on its text (bus.settlement.SETTLE), before the answer
#: is added, so a reader that sees the answer finds the stream settled. A commit already done (its
#: lock says so: sent again after a cluster node failed under the pipeline) only acks.
_COMMIT = (
    SETTLE
    + """
if KEYS[2] ~= KEYS[1] and redis.call('GET', KEYS[2]) == ARGV[6] then
  redis.pcall('XACK', KEYS[1], ARGV[1], ARGV[2])
  return false
end
local maxlen, k, a, dead = ARGV[3], 3, 10, false
while a <= #ARGV do
  local kind, n = ARGV[a], tonumber(ARGV[a + 1])
  local fields = {unpack(ARGV, a + 2, a + 1 + 2 * n)}
  a = a + 2 + 2 * n
  if kind == 'record' then
    redis.call('HSET', KEYS[k], fields[1], fields[2])
    redis.call('EXPIRE', KEYS[k], ARGV[5])
    k = k + 1
  elseif kind == 'step' then
    local head = ARGV[a]
    a = a + 1
    local id = redis.call('XADD', KEYS[k], 'MAXLEN', '~', maxlen, '*', unpack(fields))
    redis.call('HSET', KEYS[k + 1], ARGV[9], head .. ' ' .. id)
    redis.call('EXPIRE', KEYS[k + 1], ARGV[5])
    k = k + 2
  elseif kind == 'answer' then
    local stored, published = ARGV[a], ARGV[a + 1]
    a = a + 2
    if redis.call('SET', KEYS[k + 1], stored, 'NX', 'EX', ARGV[5]) then
      text_settle(KEYS[k + 3], published, ARGV[7], ARGV[8])
      redis.call('XADD', KEYS[k], 'MAXLEN', '~', maxlen, '*', unpack(fields))
      redis.call('EXPIRE', KEYS[k + 2], ARGV[5])
    end
    k = k + 4
  else
    local id = redis.call('XADD', KEYS[k], 'MAXLEN', '~', maxlen, '*', unpack(fields))
    if kind == 'dead' then dead = id end
    k = k + 1
  end
end
if KEYS[2] ~= KEYS[1] then redis.call('SET', KEYS[2], ARGV[6], 'PX', ARGV[4]) end
redis.pcall('XACK', KEYS[1], ARGV[1], ARGV[2])  -- NOGROUP (Redis lost the group): no matter
return dead
"""
)
_COMMIT_SHA = hashlib.sha1(_COMMIT.encode()).hexdigest()


#: The streams whose events do not move their run's head (a run's head is its newest progress
#: event): a webhook's outcome is told beside the answer, never instead of its run's state.
_NOT_STEPS = frozenset({WEBHOOK_OUTCOMES})


def _settle(item: Commit, error: BaseException | None) -> None:
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
    #: The handler's events, and the run records they refer to (runs.records).
    outputs: list[Routable | RunRecord] = field(default_factory=list)
    lock_key: str | None = None
    dead: DeadLetter | None = None
    #: Fields every output carries beside the event: the trace context (telemetry.tracing).
    trace: dict[str, bytes] = field(default_factory=dict)
    encoded: list[tuple[str, dict[str, bytes]]] = field(default_factory=list)
    #: The text of each answer among the outputs, in order (`Routable.published_text`).
    published: list[str] = field(default_factory=list)
    records: list[RunRecord] = field(default_factory=list)
    done: asyncio.Future[None] | None = None
    #: The dead letter's id on the dead-letter stream, once committed.
    dead_id: str | None = None

    @property
    def writes(self) -> bool:
        """Whether it writes more than the ack (outputs, a dead letter, a done mark): only
        such a commit needs the script, and only its success says Redis has memory."""
        return bool(self.encoded or self.records or self.dead or self.lock_key)


class Committer:
    def __init__(self, redis: RedisClient, keys: Keys, settings: BusSettings) -> None:
        self._redis = redis
        self._keys = keys
        self._settings = settings
        self._queue: list[Commit] = []
        self._side_writes: list[MemoWrite] = []
        self._wake = asyncio.Event()
        self._closed = False
        self._script_loaded = False
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
        item.records = [out for out in item.outputs if isinstance(out, RunRecord)]
        item.encoded = [
            (out.STREAM, item.trace | encode(out))
            for out in item.outputs
            if not isinstance(out, RunRecord)
        ]
        item.published = [
            _published_text(out)
            for out in item.outputs
            if not isinstance(out, RunRecord) and out.STREAM == ANSWERS
        ]
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

    @property
    def memo_ttl_s(self) -> int:
        """The longest a memo is kept (AEON_MEMO_TTL_S)."""
        return self._settings.memo_ttl_s

    def remember(self, key: str, value: str, ttl_s: int) -> None:
        """A memo write, kept `ttl_s` seconds, that rides along with the next flush instead of
        costing a round trip."""
        self._side_writes.append((key, value, ttl_s))
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

    async def _flush_until_sent(self, batch: list[Commit], memos: list[MemoWrite]) -> None:
        """Send the batch; send again what Redis could not take (away, failing over, refusing
        writes) until it is taken, and give up at once on what it refused for good.

        After close, retries stop once the shutdown grace is spent: the entries stay pending
        for another worker to claim, rather than holding a stopping worker forever.
        """
        delay, started, told = 0.1, time.monotonic(), False
        while True:
            try:
                batch, memos = await self._flush(batch, memos)
            except TRANSIENT as error:  # a server away: sent again whole (a done commit only acks)
                trouble = f"commit failed ({error})"
            except Exception as error:  # a bug in one batch must not stop every later commit
                log.exception("commit failed for good; its entries stay pending")
                for item in batch:
                    _settle(item, error)
                return
            else:
                if not (batch or memos):
                    return
                trouble = f"{len(batch)} commits not taken yet"
            if not told and self.gate.is_open:  # refused writes were announced by the gate
                log.warning("%s; retrying until they are sent", trouble)
                told = True
            if self._closed and time.monotonic() - started > self._settings.shutdown_grace_s:
                for item in batch:
                    _settle(item, TimeoutError("not sent within the shutdown grace"))
                log.error("%d commits not sent at shutdown; entries stay pending", len(batch))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _flush(
        self, batch: list[Commit], memos: list[MemoWrite]
    ) -> tuple[list[Commit], list[MemoWrite]]:
        """One pipelined round trip; what is left to send again (commits, memos)."""
        pipe = self._redis.pipeline(transaction=False)
        if not self._script_loaded:  # once per process, and again after a NOSCRIPT
            await self._redis.script_load(_COMMIT)  # on every master of a cluster
            self._script_loaded = True
        for key, value, ttl_s in memos:
            pipe.set(self._keys.memo(key), value, ex=ttl_s)
        for item in batch:
            if item.writes:
                # execute_command: redis-py's cluster pipeline refuses its evalsha() method,
                # but routes the command by its keys like any other.
                pipe.execute_command("EVALSHA", _COMMIT_SHA, *self._script_args(item))
            else:  # a duplicate found done: nothing to write, only the ack
                pipe.xack(item.stream_key, item.group, item.entry_id)
        replies = await pipe.execute(raise_on_error=False)
        memo_replies, commit_replies = replies[: len(memos)], replies[len(memos) :]
        if any(script_missing(reply) for reply in commit_replies):
            self._script_loaded = False  # a new master after a failover, or a restarted one
        wrote = [r for r in memo_replies if not isinstance(r, Exception)] + [
            r
            for item, r in zip(batch, commit_replies, strict=True)
            if not isinstance(r, Exception) and item.writes
        ]
        self._tell_gate(replies, wrote)
        return self._settled(batch, commit_replies), _left(memos, memo_replies)

    def _tell_gate(self, replies: list[Any], wrote: list[Any]) -> None:
        """Close the gate on a refused write; open it on a write that needs memory (`wrote`:
        an ack alone says nothing, as XACK needs none)."""
        refused = [r for r in replies if isinstance(r, Exception) and refuses_writes(r)]
        if refused:
            self.gate.refused(refused[0])  # says so once, not once per retry
        elif wrote:
            self.gate.accepted()

    def _settled(self, batch: list[Commit], replies: list[Any]) -> list[Commit]:
        """Settle each commit Redis took or refused for good; the ones to send again."""
        again = []
        for item, reply in zip(batch, replies, strict=True):
            if not isinstance(reply, Exception) or group_missing(reply):
                if item.dead is not None and isinstance(reply, bytes):
                    item.dead_id = reply.decode()
                _settle(item, None)
            elif retry_later(reply):
                again.append(item)
            else:  # a wrong key type, no permission: a retry would fail the same way
                log.error("commit refused for good (%s); its entry stays pending", said(reply))
                _settle(item, reply)
        return again

    def _script_args(self, item: Commit) -> list[Any]:
        """`_COMMIT`'s key count, keys and arguments for `item`."""
        settings = self._settings
        keys = [item.stream_key, item.lock_key or item.stream_key]
        args: list[Any] = [
            item.group,
            item.entry_id,
            settings.stream_maxlen,
            settings.dedupe_ttl_s * 1000,
            settings.answer_ttl_s,
            LockState.DONE.value,
            settings.answer_text_maxlen,
            settings.stream_keep_s,
            HEAD_RECORD,
        ]
        published = iter(item.published)
        # Outputs go to the shard of the entry they come from, which is their run's (a run's
        # events share its correlation id). An entry put in another shard than its id picks
        # keeps its run there: one commit, one slot, whatever the entry says.
        for record in item.records:
            keys.append(self._keys.run_records(record.correlation_id, item.shard))
            args += ["record", 1, record.name, pack(record.value)]
        for stream, fields in item.encoded:
            keys.append(self._keys.stream(stream, item.shard))
            cid = fields["cid"].decode()
            kind = "answer" if stream == ANSWERS else "event" if stream in _NOT_STEPS else "step"
            if kind == "answer":
                keys.append(self._keys.answer(cid, item.shard))
                keys.append(self._keys.run_records(cid, item.shard))
                keys.append(self._keys.answer_text(cid, item.shard))
            elif kind == "step":
                keys.append(self._keys.run_records(cid, item.shard))
            args += [kind, len(fields)]
            args += itertools.chain.from_iterable(fields.items())
            if kind == "answer":
                args += [pack(fields["body"]), next(published)]
            elif kind == "step":
                args.append(head_of(fields["type"].decode(), stream))
        if item.dead is not None:
            keys.append(self._keys.dead_letter(item.shard))
            dead = item.dead.to_fields()
            args += ["dead", len(dead), *itertools.chain.from_iterable(dead.items())]
        return [len(keys), *keys, *args]


def _published_text(answer: Routable) -> str:
    """The text an answer publishes, which settles its run's answer text stream."""
    if not isinstance(answer, Published):
        raise ValueError(f"{type(answer).__name__} goes to the answers stream without its text")
    return answer.published_text


def _left(memos: list[MemoWrite], replies: list[Any]) -> list[MemoWrite]:
    """The memo writes to send again; one refused for good is dropped (a memo only saves an
    LLM call on a redelivery)."""
    left = []
    for memo, reply in zip(memos, replies, strict=True):
        if isinstance(reply, Exception) and retry_later(reply):
            left.append(memo)
        elif isinstance(reply, Exception):
            log.warning("memo not stored: %s", said(reply))
    return left
