"""A run's answer text, as the model writes it: one Redis stream per run (`Keys.answer_text`).

The FinalAnswer stays the one source of truth; this stream lets a reader show the answer while
it is written (docs/run-lifecycle.md, "The answer's text as it is written"). Its entries:

- `delta`: a piece of a candidate answer (`text`), which candidate it belongs to (`candidate`:
  `draft`, `draft:2`, `answer`, `refinement:1`, … or `published`), and whether the host's
  checks may still set it aside (`provisional` "1") or it will be published as written ("0");
- `reset`: the text since the previous reset is not the answer (`why`, `ResetWhy`): another
  candidate replaces it, the call was cut and is made again, the host set it aside, or the
  answer published differs from it;
- `settled`: the answer is published; nothing follows.

Every entry is numbered (`n`, from 1) by the script that adds it, so a reader, and the
settlement, can tell a stream whose oldest entries were trimmed (MAXLEN) from a whole one.

A stream is kept as long as its run's answer while the run goes on (each write sets it to
AEON_ANSWER_TTL_S), and AEON_STREAM_KEEP_S once settled: the window a run's progress entries
are kept for the readers that follow them live (bus.retention). Later, the answer itself is
what a reader gets (a reader that comes after it gets no text), and a run's text kept a day
would more than double what a run leaves in Redis (4.8 KB for an offline run's, beside 3.5 KB
for its answer and records).

The invariant, kept by the script that publishes the answer (bus.commit, bus.settlement): once a
stream is settled, its deltas since the last reset, joined, are the FinalAnswer's
`answer_text`. The settlement writes what the published text adds to the streamed text when
the one starts with the other, else a reset and the whole published text. It runs in the
commit that sets the answer key (SET NX: once per run), so it holds however the run ended (a
host-made answer, a fallback from dead letters, a caveat before the model's text), and a
worker killed between the answer and its settlement cannot be: they are one script.

Writes (`AnswerSink`) are refused once the run's answer key is set: a worker still writing
a candidate that lost (a duplicate Phase E, a redelivery) cannot add to a settled stream. A
call's first write resets the text before it when that text is a delta of an unsettled
attempt, so a call made again after its worker was killed mid-answer starts clean
(`ResetWhy.RETRIED` when it is the same candidate, `REPLACED` for another), deterministically.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from aeonloop.bus.codec import entry_rank
from aeonloop.bus.codec import text as field_text
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys
from aeonloop.bus.redis_errors import FAILURES, TRANSIENT, said
from aeonloop.bus.settlement import TEXT_LUA

log = logging.getLogger("aeon.bus")

DELTA = "delta"
RESET = "reset"
SETTLED = "settled"
#: The candidate label of the text the settlement adds: the published answer's own.
PUBLISHED = "published"
#: How often a `TextPoller` reads the runs it watches: about a token's time on a fast server.
POLL_S = 0.05
#: How long a sink gathers pieces before it writes them as one delta (its first piece goes at
#: once). One write a piece cost a worker a script call a token: at 1,000 runs in flight it
#: doubled the worker's CPU per run (python -m bench, concurrency). A reader polls every
#: POLL_S, so it sees the text about as soon either way.
GATHER_S = 0.1
#: While Redis is away, how often a `TextPoller` tries again (a round every POLL_S would
#: only load a process that is waiting anyway), and how often it says it still fails.
OUTAGE_POLL_S = 0.5
OUTAGE_LOG_EVERY_S = 60.0


class ResetWhy(StrEnum):
    """Why the text since the previous reset is not the answer."""

    #: Another candidate answer is being written in its place.
    REPLACED = "replaced"
    #: The call writing it was cut (its worker killed, its attempt void) and is made again.
    RETRIED = "retried"
    #: The host set it aside (its checks failed; the run goes on past its draft).
    SET_ASIDE = "set_aside"
    #: The answer published is not this text (nor does it start with it).
    PUBLISHED = "published"


@dataclass(frozen=True, slots=True)
class TextEntry:
    """One entry of a run's answer text stream."""

    entry_id: str
    number: int
    kind: str
    text: str = ""
    candidate: str = ""
    provisional: bool = True
    why: str = ""


def parse(entry_id: bytes | str, fields: dict[bytes, bytes]) -> TextEntry:
    number = field_text(fields, b"n")
    return TextEntry(
        entry_id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
        number=int(number) if number.isdigit() else 0,
        kind=field_text(fields, b"kind"),
        text=field_text(fields, b"text"),
        candidate=field_text(fields, b"candidate"),
        provisional=field_text(fields, b"provisional") != "0",
        why=field_text(fields, b"why"),
    )


def since_reset(entries: list[TextEntry]) -> str:
    """The deltas after the last reset, joined: once settled, the published answer's text."""
    parts: list[str] = []
    for entry in entries:
        if entry.kind == RESET:
            parts = []
        elif entry.kind == DELTA:
            parts.append(entry.text)
    return "".join(parts)


#: One write. KEYS: the run's answer text stream, its answer key. ARGV: maxlen, ttl s, kind
#: ("delta" or "reset"), fresh ("1": a call's first write), text, candidate, provisional, why.
#: Nothing once the answer is set (or the stream settled). A reset, or a call's first write,
#: first closes the text before it when that text is a delta: `retried` for the same
#: candidate, else `replaced` (a reset names its own why). Returns the last entry's number.
_WRITE = (
    TEXT_LUA
    + """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local n, kind, candidate = text_last(KEYS[1])
if kind == 'settled' then return 0 end
local maxlen = ARGV[1]
if kind == 'delta' and (ARGV[3] == 'reset' or ARGV[4] == '1') then
  local why = ARGV[8]
  if ARGV[3] == 'delta' then why = (candidate == ARGV[6]) and 'retried' or 'replaced' end
  n = text_add(KEYS[1], maxlen, n + 1, 'kind', 'reset', 'why', why)
end
if ARGV[3] == 'delta' then
  n = text_add(KEYS[1], maxlen, n + 1, 'kind', 'delta', 'text', ARGV[5],
    'candidate', ARGV[6], 'provisional', ARGV[7])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return n
"""
)


#: One write waiting for the next round trip: the script's keys and arguments, and who waits.
_Write = tuple[list[str], list[object], "asyncio.Future[int]"]


class RedisAnswerText:
    """Where the phases write their runs' answer text: makes a sink per call (llm.base.TextSink),
    and resets a run's text when the host sets a candidate aside.

    The writes of every run this process writes meanwhile go in one pipelined round trip
    (`_flush`): one script call a write, a round trip each, was three quarters of a worker's
    round trips and a fifth of its CPU per run at 1,000 runs in flight (python -m bench,
    concurrency). Each caller still waits for its own write, so a run's writes keep their
    order."""

    def __init__(
        self, redis: RedisClient, keys: Keys, maxlen: int, ttl_s: int, gather_s: float = GATHER_S
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._maxlen = maxlen
        self._ttl_s = ttl_s
        #: How long each sink gathers pieces before it writes them (0: each piece at once).
        self.gather_s = gather_s
        self._waiting: list[_Write] = []
        self._flushing: asyncio.Task[None] | None = None

    def sink(self, correlation_id: str, candidate: str, provisional: bool) -> AnswerSink:
        """A sink for one call writing `candidate` of run `correlation_id`."""
        return AnswerSink(self, correlation_id, candidate, provisional)

    async def reset(self, correlation_id: str, why: ResetWhy) -> None:
        """Close the run's text so far (if it is a delta): the host set it aside. A reset
        Redis does not take is logged, not raised: the settlement still makes the text the
        answer's (`AnswerSink`)."""
        try:
            await self._write(correlation_id, RESET, False, "", "", True, why)
        except FAILURES as error:
            log.warning("%s: the answer's text not reset (%s)", correlation_id, said(error))

    async def _write(
        self,
        correlation_id: str,
        kind: str,
        fresh: bool,
        text: str,
        candidate: str,
        provisional: bool,
        why: str,
    ) -> int:
        keys = [self._keys.answer_text(correlation_id), self._keys.answer(correlation_id)]
        args: list[object] = [self._maxlen, self._ttl_s, kind, "1" if fresh else "0", text]
        args += [candidate, "1" if provisional else "0", why]
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append((keys, args, done))
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush(), name="answer-text-writes")
        return await done

    async def _flush(self) -> None:
        """Send the writes made since the last round trip, in one: those of every task that
        runs before this one does (the loop's turn), and of the turn after."""
        await asyncio.sleep(0)
        writes, self._waiting, self._flushing = self._waiting, [], None
        pipe = self._redis.pipeline(transaction=False)
        for keys, args, _ in writes:
            # EVAL, not EVALSHA: a master new after a failover knows no script, and Redis
            # keeps the compiled script by its hash anyway. execute_command: redis-py's
            # cluster pipeline refuses its eval() method, but routes the command by its keys.
            pipe.execute_command("EVAL", _WRITE, len(keys), *keys, *args)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:  # the loop ends: so do the writes
            for _, _, done in writes:
                done.cancel()
            raise
        except Exception as error:  # the round trip failed: every write of it did
            for _, _, done in writes:
                if not done.done():
                    done.set_exception(error)
            return
        for (_, _, done), reply in zip(writes, replies, strict=True):
            if done.done():  # its writer was cancelled meanwhile
                continue
            if isinstance(reply, Exception):
                done.set_exception(reply)
            else:
                done.set_result(int(reply))


class AnswerSink:
    """One call's answer text (llm.base.TextSink): its first write starts a new attempt.

    Pieces are gathered for GATHER_S and written as one delta; the first goes at once, so the
    answer shows as soon as it starts. Pieces still gathered when the call ends are not written:
    the settlement writes what the published text adds (the rest of an answer published as
    written), and a candidate set aside needs no more.

    The text is a view of the answer, never a condition of it: a write Redis does not take
    (away, failing over, out of memory) is logged, and the sink writes nothing more of this
    attempt (a gap would show a text that is not the answer's); the call goes on, and the
    settlement writes what the readers lack."""

    def __init__(
        self, stream: RedisAnswerText, correlation_id: str, candidate: str, provisional: bool
    ) -> None:
        self._stream = stream
        self._cid = correlation_id
        self.candidate = candidate
        self.provisional = provisional
        self._fresh = True
        self._broken = False
        self._gathered: list[str] = []
        self._written_at: float | None = None

    async def write(self, text: str) -> None:
        if not text or self._broken:
            return
        self._gathered.append(text)
        now = asyncio.get_running_loop().time()
        if self._written_at is not None and now - self._written_at < self._stream.gather_s:
            return
        self._written_at = now
        pieces, self._gathered = "".join(self._gathered), []
        fresh, self._fresh = self._fresh, False
        await self._send(DELTA, fresh, pieces)

    async def reset(self) -> None:
        """The attempt is void: what it wrote is not the reply; the next write starts over."""
        self._fresh, self._broken = True, False
        self._gathered, self._written_at = [], None
        await self._send(RESET, False, "")

    async def _send(self, kind: str, fresh: bool, text: str) -> None:
        why = ResetWhy.RETRIED if kind == RESET else ""
        try:
            await self._stream._write(
                self._cid, kind, fresh, text, self.candidate, self.provisional, why
            )
        except FAILURES as error:
            self._broken = True
            log.warning(
                "%s: the answer's text is not written as it comes (%s); it is whole once published",
                self._cid,
                said(error),
            )


async def read(
    redis: RedisClient, keys: Keys, correlation_id: str, after: str = "0-0"
) -> list[TextEntry]:
    """The run's answer text entries after entry `after`, without waiting."""
    entries = await redis.xrange(keys.answer_text(correlation_id), f"({after}", "+")
    return [parse(entry_id, fields) for entry_id, fields in entries]


class _Outage:
    """The poller's log of a Redis outage: one line when it starts, one a minute with the
    rounds that failed since, one when Redis answers again. A line a round (every POLL_S)
    was 295 lines in a 15 s outage (issue 41, finding 6)."""

    def __init__(self, every_s: float = OUTAGE_LOG_EVERY_S) -> None:
        self._every_s = every_s
        self._failed = 0
        self._since_said = 0
        self._said_at = 0.0

    def failed(self, error: BaseException) -> None:
        now = time.monotonic()
        self._failed += 1
        self._since_said += 1
        if self._failed == 1:
            log.warning(
                "answer text not read (%s); trying again until Redis answers",
                type(error).__name__,
            )
        elif now - self._said_at >= self._every_s:
            log.warning(
                "answer text still not read (%s): %d rounds failed in the last %.0f s",
                type(error).__name__,
                self._since_said,
                now - self._said_at,
            )
        else:
            return
        self._said_at, self._since_said = now, 0

    def ended(self) -> None:
        if self._failed:
            log.info("answer text read again, after %d rounds that failed", self._failed)
        self._failed = 0


class TextWatch:
    """One run's answer text as a `TextPoller` reads it: every entry so far, and who to tell
    when more come."""

    def __init__(self, correlation_id: str, after: str) -> None:
        self.correlation_id = correlation_id
        self.entries: list[TextEntry] = []
        #: Called (with no argument) after new entries are added.
        self.listeners: list[Callable[[], None]] = []
        self.holders = 0
        self._after = after
        self._grew = asyncio.Event()

    @property
    def settled(self) -> bool:
        return bool(self.entries) and self.entries[-1].kind == SETTLED

    def add(self, entries: list[TextEntry]) -> None:
        """Keep the entries after the last one held. Two reads may be in flight at once from
        the same entry (the poller's round, and a reader's read up to the settlement:
        RunFeed.text_to_settled), and both replies hold the same entries: each is kept once,
        or every reader would send it twice (issue 41)."""
        if self.entries:
            last = entry_rank(self.entries[-1].entry_id.encode())
            entries = [e for e in entries if entry_rank(e.entry_id.encode()) > last]
        if not entries:
            return
        self.entries += entries
        self._after = entries[-1].entry_id
        for listener in self.listeners:
            listener()
        self._grew.set()
        self._grew = asyncio.Event()

    async def more_than(self, count: int) -> None:
        """Return once more than `count` entries are in."""
        while len(self.entries) <= count:
            await self._grew.wait()


class TextPoller:
    """Reads the answer text of every run someone watches, in one pipelined round trip each
    `interval_s`: a process that follows many runs at once (the HTTP gateway's event streams
    and chat completions) must not hold a connection per run in a blocking read, which its
    bounded pool (bus.connection) cannot give. A run stops being read once settled, and the
    poller stops once nobody watches anything (the next watch starts it again)."""

    def __init__(self, redis: RedisClient, keys: Keys, interval_s: float = POLL_S) -> None:
        self._redis = redis
        self._keys = keys
        self._interval_s = interval_s
        self._watches: dict[str, TextWatch] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, correlation_id: str) -> TextWatch:
        """Hold run `correlation_id`'s text (shared with its other holders); `release` it."""
        watch = self._watches.get(correlation_id)
        if watch is None:
            watch = self._watches[correlation_id] = TextWatch(correlation_id, "0-0")
        watch.holders += 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        return watch

    def release(self, watch: TextWatch) -> None:
        watch.holders -= 1
        if watch.holders <= 0 and self._watches.get(watch.correlation_id) is watch:
            del self._watches[watch.correlation_id]

    async def poll(self) -> None:
        """One read of every watched run not settled yet."""
        watches = [watch for watch in self._watches.values() if not watch.settled]
        if not watches:
            return
        pipe = self._redis.pipeline(transaction=False)
        for watch in watches:
            pipe.xrange(self._keys.answer_text(watch.correlation_id), f"({watch._after}", "+")
        replies = await pipe.execute()
        for watch, entries in zip(watches, replies, strict=True):
            watch.add([parse(entry_id, fields) for entry_id, fields in entries])

    async def _run(self) -> None:
        outage = _Outage()
        while self._watches:
            try:
                await self.poll()
            except TRANSIENT as error:  # Redis away: the next round reads on from where it was
                outage.failed(error)
                await asyncio.sleep(max(self._interval_s, OUTAGE_POLL_S))
                continue
            outage.ended()
            await asyncio.sleep(self._interval_s)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
