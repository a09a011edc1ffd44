"""Runs as the HTTP gateway serves them: read back from Redis, and followed live on the bus.

A run's events sit among every run's in its shard's streams, and a gateway only publishes and
reads. What makes a run cheap to read back anyway is that each of its progress events carries
the run so far but for its passes, whose records the run's history holds (phases.history): the
newest event and one read of that history give every step (gateway.http.run_steps). The feed finds
the newest event three ways, cheapest first:

- **Where this process saw it.** One follower (the AeonClient's own reader, which hands the
  feed every entry it takes: `RunFeed.seen`) reads every shard's requests, progress and
  answers streams with plain XREAD from the moment the process started, and for each entry
  notes, without decoding it, where the newest progress event of its run sits (stream and
  entry id; the most recent INDEX_SIZE runs). Reading the run back is one XRANGE of that entry.
- **Where the reader says it was.** An event id the API gave out names the Redis entry its
  step came from (`pass-2@1732300000000-0`). A process that never saw the run (another
  gateway, or this one restarted) scans the run's shard streams forward from there, and the
  newest of the run's entries it finds holds every step after the reader's.
- **When it was answered.** For a run this process never saw, the stored answer's time and
  the run's length bound where its LoopExited was added: a short scan of that stream finds it,
  and with it every step. If its events are trimmed by then, the answer store still gives its
  exit and its answer.

Live: the follower decodes an entry only when someone watches its run, once for all of them,
and keeps the newest event and the answer of each watched run (`WatchedRun`); each watcher
wakes, loads the history of that newest state if it has not been loaded (once for all of
them), works out the steps it has not sent yet, and sends them. A slow
watcher never holds anything up: nothing queues for it, it finds the newest state whenever it
is ready, and the follower never waits on a watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import orjson
from pydantic import ValidationError

from aeonloop import webhooks
from aeonloop.bus import answer_text
from aeonloop.bus.answer_text import DELTA, RESET, TextEntry, TextPoller, TextWatch
from aeonloop.bus.codec import text
from aeonloop.bus.compact import unpack
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import ANSWERS, AWAITING_APPROVAL, Keys
from aeonloop.bus.records import RedisRunRecords
from aeonloop.bus.redis_errors import TRANSIENT
from aeonloop.exceptions import ForeignEventId
from aeonloop.gateway.client import PROGRESS_STREAMS, answer_due_by
from aeonloop.gateway.http.run_steps import (
    ANSWER_DELTA,
    ANSWER_RESET,
    ANSWERED,
    BEFORE_ANY_STEP,
    START,
    TYPE_RANK,
    WEBHOOK_SETTLED,
    EventId,
    Order,
    Step,
    format_event_id,
    no_answer_step,
    progress_rank,
    request_of,
    run_steps,
    webhook_url_of,
    with_text,
)
from aeonloop.phases import history
from aeonloop.phases.events import (
    EVENT_TYPES,
    Event,
    ExecutionResult,
    FinalAnswerReady,
    LoopExited,
    RequestSubmitted,
    RunState,
    WebhookSettled,
)
from aeonloop.phases.history import RunRecords

log = logging.getLogger("aeon.http")

#: Runs whose newest event's place this process remembers (about 200 bytes each).
INDEX_SIZE = 100_000
#: Reading back from a reader's event id: entries scanned per stream at most (a bound on what
#: one request can make this process read; a reader away for long under heavy traffic gets what
#: the answer store has), per XRANGE, and how far before the id's time the scan starts (the
#: run's other streams may hold entries of the same millisecond, and a clock can step back).
SCAN_LIMIT = 1_000
SCAN_PAGE = 250
SCAN_MARGIN_MS = 1_000
#: How long a run's event stream waits, after the answer, for the outcome of its webhook (the
#: webhooks group may be down, or not run at all): then it ends without it.
WEBHOOK_WAIT_S = 600.0
#: The streams a run's progress is in, in the order its events go through them.
STATE_STREAMS = (RequestSubmitted.STREAM, *PROGRESS_STREAMS, AWAITING_APPROVAL)


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a run's newest known progress event sits. Newer is a later event type, then a
    later entry id: a run's events are written one after another on its shard's server, so a
    later one has no earlier millisecond (unless that server's clock steps back, when this
    lags until the run's next event); within one millisecond only a PassCompleted and the
    PassRequested made from it meet, and they describe the same passes."""

    rank: tuple[int, int, int]
    stream: str | None  # None: submitted here, no entry seen yet
    entry_id: str | None

    @classmethod
    def of(cls, kind: str, stream: str, entry_id: str) -> _Where:
        return cls((TYPE_RANK[kind], *_entry_rank(entry_id.encode())), stream, entry_id)


SUBMITTED = _Where((-1, 0, 0), None, None)


@dataclass(frozen=True, slots=True)
class RunView:
    """A run as read back: its newest progress event (and the entry it came from), its answer,
    and its webhook's outcome when it named one (`webhook_named`) and that has come."""

    state: Event | None
    state_at: str | None
    answer: ExecutionResult | None
    answer_at: str | None = None
    webhook_named: bool = False
    webhook: WebhookSettled | None = None

    @property
    def request(self) -> str | None:
        return request_of(self.state)

    @property
    def last_order(self) -> Order:
        """The order of the step this run's event stream ends with, once answered."""
        return WEBHOOK_SETTLED if self.webhook_named else ANSWERED

    def seconds_to_give_up(self) -> float | None:
        """Seconds until this run, unanswered, counts as never to be answered (0 or less: it
        does now); None once answered, or while its deadline is unknown."""
        if self.answer is not None or self.state is None:
            return None
        return (answer_due_by(self.state.deadline) - datetime.now(UTC)).total_seconds()

    def no_answer(self) -> WireStep:
        """The step that ends the stream of a run given up on."""
        assert self.state is not None
        return _wire(no_answer_step(self.state.deadline), self.state_at or "0-0")


@dataclass(frozen=True, slots=True)
class WireStep:
    """A step as sent: its order, its event id, and its data already as JSON (made once for
    every watcher of the run)."""

    order: Order
    kind: str
    event_id: str
    data: str


def wire_steps(view: RunView) -> list[WireStep]:
    """The run's steps with their event ids, each naming the entry of the progress event they
    were worked out from (the answer's own when no progress event is known): a place in the
    run's shard at or before everything that follows them."""
    entry_id = view.state_at or view.answer_at or "0-0"
    steps = run_steps(view.state, view.answer, view.webhook)
    return [_wire(step, entry_id) for step in steps]


def _wire(step: Step, entry_id: str) -> WireStep:
    data = orjson.dumps(step.data).decode()
    return WireStep(step.order, step.kind, format_event_id(step, entry_id), data)


class WatchedRun:
    """A run someone is watching: the newest of it this process has, and a way to wait for
    more. The feed forgets it once its last watcher lets go."""

    def __init__(self, correlation_id: str, text: TextWatch | None = None) -> None:
        self.correlation_id = correlation_id
        #: Its answer's text as it is written (bus.answer_text), read by the feed's poller
        #: (none read: a run watched without one).
        self.text = text or TextWatch(correlation_id, "0-0")
        self.text.listeners.append(self._wake)
        self.watchers = 0
        self.stopping = False
        self.view = RunView(None, None, None)
        self.version = 0
        self.loaded = False
        self.load_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._wire: tuple[int, list[WireStep]] = (-1, [])
        #: The run whose history was last loaded (or found gone).
        self._tried: RunState | None = None

    def offer(self, view: RunView) -> None:
        """Keep what `view` knows beyond what this run already has."""
        state, state_at = self.view.state, self.view.state_at
        if view.state is not None and (
            state is None or progress_rank(view.state) >= progress_rank(state)
        ):
            state, state_at = view.state, view.state_at
        answer, answer_at = self.view.answer, self.view.answer_at
        if answer is None and view.answer is not None:
            answer, answer_at = view.answer, view.answer_at
        named = self.view.webhook_named or view.webhook_named
        new = RunView(state, state_at, answer, answer_at, named, self.view.webhook or view.webhook)
        if new != self.view:
            self.view = new
            self.version += 1
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def load_history(self, records: RunRecords) -> None:
        """Put the passes' records in the newest state's run, if they are not there: once,
        before its steps are worked out, so a step of a pass is never skipped for want of it.
        A newer state offered while one loads is loaded in turn."""
        while True:
            run = getattr(self.view.state, "run", None)
            if not isinstance(run, RunState) or run.history_loaded or run is self._tried:
                return
            async with self.load_lock:
                if run is getattr(self.view.state, "run", None) and run is not self._tried:
                    await _load_history(records, self.correlation_id, run)
                    self._tried = run  # loaded, or found gone: not asked for again
                    self._wire = (-1, [])

    def steps(self) -> list[WireStep]:
        version, steps = self._wire
        if version != self.version:
            steps = wire_steps(self.view)
            self._wire = (self.version, steps)
        return steps

    async def changed(self, since: int, text_seen: int | None = None) -> None:
        """Return once the run has changed after version `since` (or, given `text_seen`, its
        answer's text has more entries than that), or its watchers are to stop."""
        while self.version == since and not self.stopping:
            if text_seen is not None and len(self.text.entries) > text_seen:
                return
            await self._changed.wait()

    def stop(self) -> None:
        """Wake every watcher for good: the process is stopping."""
        self.stopping = True
        self._changed.set()


class RunFeed:
    def __init__(self, redis: RedisClient, keys: Keys, *, index_size: int = INDEX_SIZE) -> None:
        self._redis = redis
        self._keys = keys
        self._index_size = index_size
        self._index: OrderedDict[str, _Where] = OrderedDict()
        self._watched: dict[str, WatchedRun] = {}
        #: Where the runs' histories are read from (phases.history).
        self.records = RedisRunRecords(redis, keys)
        #: Reads the answer text of the runs watched (bus.answer_text).
        self.text = TextPoller(redis, keys)
        self._unreadable_answer_logged = False
        #: Event streams open now (for /healthz).
        self.open_streams = 0
        self.stopping = False

    def stats(self) -> dict[str, int]:
        return {
            "open_event_streams": self.open_streams,
            "watched_runs": len(self._watched),
            "runs_indexed": len(self._index),
        }

    # -- what is known ------------------------------------------------------------------------

    def note_submitted(self, correlation_id: str) -> None:
        """A run this process just submitted: known before the follower sees its request."""
        if correlation_id not in self._index:
            self._remember(correlation_id, SUBMITTED)

    async def view(self, correlation_id: str, after: EventId | None = None) -> RunView | None:
        """The run as Redis has it now; None when nothing of it is found (unknown, or its
        events and answer are gone)."""
        answered = await self._stored_answer(correlation_id)
        where = self._index.get(correlation_id)
        state = state_at = None
        if where is not None and where.stream and where.entry_id:
            state = await self._read(where.stream, where.entry_id)
            state_at = where.entry_id if state is not None else None
        if state is None and after is not None and await self._is_entry_of(correlation_id, after):
            since = _entry_ms(after.entry_id) - SCAN_MARGIN_MS
            state, state_at = await self._scan(correlation_id, STATE_STREAMS, since)
        if state is None and answered is not None:
            state, state_at = await self._scan_for_exit(correlation_id, answered)
        if state is None and answered is None and where is None:
            if not (after and after.text_after and await self._has_text(correlation_id)):
                return None
            return RunView(None, None, None)  # known by its answer's text alone, so far
        run = getattr(state, "run", None)
        if isinstance(run, RunState):
            await _load_history(self.records, correlation_id, run)
        named = bool(webhook_url_of(state) or (answered and answered.webhook_url))
        webhook = (
            await webhooks.outcome(self.records, correlation_id) if named and answered else None
        )
        return RunView(state, state_at, answered.result if answered else None, None, named, webhook)

    async def known(self, correlation_id: str, scan_limit: int | None = SCAN_LIMIT) -> bool:
        """Whether Aeon knows run `correlation_id`: `view` finds it (its answer, or where this
        process saw it), it has a cancel mark or records, or an entry of its shard's streams
        is its (the newest `scan_limit` of each; None: all of them). False is the HTTP API's
        404 for a cancel or an approval, and `aeon cancel`'s exit 2: nothing is written for a
        run nobody submitted."""
        if await self.view(correlation_id) is not None:
            return True
        keys = self._keys
        marks = (keys.cancel(correlation_id), keys.run_records(correlation_id))
        if await self._redis.exists(*marks):
            return True
        wanted = correlation_id.encode()
        for name in STATE_STREAMS:
            key, high, scanned = keys.stream_of(name, correlation_id), "+", 0
            while scan_limit is None or scanned < scan_limit:
                entries = await self._redis.xrevrange(key, high, "-", count=SCAN_PAGE)
                if any(fields.get(b"cid") == wanted for _entry, fields in entries):
                    return True
                scanned += len(entries)
                if len(entries) < SCAN_PAGE:
                    break
                high = b"(" + entries[-1][0]
        return False

    def stop_streams(self) -> None:
        """End every event stream after the step it is sending, now and from now on: the
        process is stopping, and a reader resumes elsewhere by its Last-Event-ID."""
        self.stopping = True
        for run in self._watched.values():
            run.stop()

    def watch(self, correlation_id: str) -> Watch:
        """A hold on the watched run of `correlation_id`, shared by everyone watching it;
        release it when done."""
        run = self._watched.get(correlation_id)
        if run is None:
            text = self.text.watch(correlation_id)
            run = self._watched[correlation_id] = WatchedRun(correlation_id, text)
            if self.stopping:
                run.stop()
        run.watchers += 1
        return Watch(self, run)

    def _let_go(self, run: WatchedRun) -> None:
        run.watchers -= 1
        if run.watchers == 0 and self._watched.get(run.correlation_id) is run:
            del self._watched[run.correlation_id]
            self.text.release(run.text)

    async def load(self, run: WatchedRun, after: EventId | None) -> bool:
        """Fill `run` from Redis the first time it is watched (later watchers share what the
        follower has added since); False when nothing of the run is found. A reader resuming
        from an event id this process cannot place is read back from that id."""
        async with run.load_lock:
            if run.loaded and (after is None or run.view.state is not None):
                return True
            view = await self.view(run.correlation_id, after)
            if view is None:
                return run.loaded
            run.offer(view)
            run.loaded = True
            return True

    async def settle(self, run: WatchedRun) -> None:
        """Look in the answer store once more before giving up on a run: its answer may have
        come while this process was not reading."""
        answered = await self._stored_answer(run.correlation_id)
        if answered is not None:
            run.offer(RunView(None, None, answered.result, None, bool(answered.webhook_url)))

    async def recent(self, limit: int) -> list[tuple[RequestSubmitted, ExecutionResult | None]]:
        """The newest `limit` requests over every shard, newest first, each with its answer if
        one is stored: the requests streams keep the question, the answer store the rest."""
        keys = self._keys.streams(RequestSubmitted.STREAM)
        replies = await asyncio.gather(*(self._redis.xrevrange(k, count=limit) for k in keys))
        entries = sorted(
            (entry for reply in replies for entry in reply),
            key=lambda entry: _entry_rank(entry[0]),
            reverse=True,
        )
        requests = [
            event
            for event in (_decode(fields) for _entry_id, fields in entries[:limit])
            if isinstance(event, RequestSubmitted)
        ]
        answers = await asyncio.gather(*(self._stored_answer(r.correlation_id) for r in requests))
        return [
            (request, answered.result if answered else None)
            for request, answered in zip(requests, answers, strict=True)
        ]

    # -- reading ------------------------------------------------------------------------------

    async def _stored_answer(self, correlation_id: str) -> FinalAnswerReady | None:
        """The run's stored answer; None when there is none, or it cannot be read (written by
        another version, or damaged): one bad answer must not fail every list of runs."""
        body = await self._redis.get(self._keys.answer(correlation_id))
        if body is None:
            return None
        try:
            return FinalAnswerReady.model_validate_json(unpack(body))
        except ValidationError as error:
            if not self._unreadable_answer_logged:
                self._unreadable_answer_logged = True
                log.warning(
                    "the stored answer of %s cannot be read (%d problem(s), first: %s); such "
                    "answers are shown as missing, and further ones are not logged",
                    correlation_id,
                    error.error_count(),
                    error.errors(include_url=False)[0]["msg"],
                )
            return None

    async def _has_text(self, correlation_id: str) -> bool:
        return bool(await self._redis.exists(self._keys.answer_text(correlation_id)))

    async def text_to_settled(self, run: WatchedRun) -> None:
        """Read the rest of an answered run's text, up to its settlement: the commit that
        published the answer settled it first (bus.commit), so one read has it all."""
        if run.text.settled:
            return
        after = run.text.entries[-1].entry_id if run.text.entries else "0-0"
        run.text.add(await answer_text.read(self._redis, self._keys, run.correlation_id, after))

    async def _is_entry_of(self, correlation_id: str, after: EventId) -> bool:
        """Whether the entry a reader's event id names is one of this run's, in its shard:
        only then is scanning from it worth its cost (a made-up id on a made-up run would
        otherwise make anyone able to reach the API read a whole window of every stream).
        False when there is no such entry (never was, or trimmed since); ForeignEventId when
        it is another run's."""
        names = (*STATE_STREAMS, ANSWERS)
        keys = [self._keys.stream_of(name, correlation_id) for name in names]
        entry_id = after.entry_id
        replies = await asyncio.gather(
            *(self._redis.xrange(key, entry_id, entry_id, count=1) for key in keys)
        )
        owners = {text(fields, b"cid") for reply in replies for _entry, fields in reply}
        if owners and correlation_id not in owners:
            raise ForeignEventId(
                f"entry {entry_id} is an event of another run, not of {correlation_id}; "
                "send the id of the last event this run's stream gave"
            )
        return bool(owners)

    async def _read(self, stream: str, entry_id: str) -> Event | None:
        entries = await self._redis.xrange(stream, entry_id, entry_id, count=1)
        return _decode(entries[0][1]) if entries else None  # None: trimmed since

    async def _scan_for_exit(
        self, correlation_id: str, answered: FinalAnswerReady
    ) -> tuple[Event | None, str | None]:
        """The LoopExited of an answered run this process never saw: it was added to its
        stream while the run ran, which the answer's time and the run's length bound."""
        end_ms = int(answered.created_at.timestamp() * 1000) + SCAN_MARGIN_MS
        start_ms = end_ms - int(answered.result.elapsed_seconds * 1000) - 2 * SCAN_MARGIN_MS
        streams = (LoopExited.STREAM,)
        return await self._scan(correlation_id, streams, start_ms, str(end_ms))

    async def _scan(
        self, correlation_id: str, names: tuple[str, ...], since_ms: int, until: str = "+"
    ) -> tuple[Event | None, str | None]:
        """The newest progress event of the run in the streams `names`, from `since_ms` on to
        entry `until`, and its entry id; at most SCAN_LIMIT entries read per stream."""
        start = f"{max(0, since_ms)}-0"
        wanted = correlation_id.encode()
        newest: tuple[Event, str] | None = None
        for name in names:
            key = self._keys.stream_of(name, correlation_id)
            low, scanned = start, 0
            while scanned < SCAN_LIMIT:
                entries = await self._redis.xrange(key, low, until, count=SCAN_PAGE)
                for entry_id, fields in entries:
                    if fields.get(b"cid") != wanted:
                        continue
                    event = _decode(fields)
                    if event is not None and (
                        newest is None or progress_rank(event) >= progress_rank(newest[0])
                    ):
                        newest = (event, entry_id.decode())
                scanned += len(entries)
                if len(entries) < SCAN_PAGE:
                    break
                low = b"(" + entries[-1][0]
        return newest if newest is not None else (None, None)

    # -- following ----------------------------------------------------------------------------

    def seen(self, stream: str, entry: bytes, fields: dict[bytes, bytes]) -> None:
        """Take an entry of a requests, progress or answers stream, as read (`AeonClient`'s
        `also`): note where its run's newest event is, and offer it to the run's watchers."""
        cid = text(fields, b"cid")
        kind = text(fields, b"type")
        if not cid:
            return  # not an entry of Aeon's flat form: no run to file it under
        entry_id = entry.decode()
        if kind in TYPE_RANK:
            where = _Where.of(kind, stream, entry_id)
            known = self._index.get(cid)
            if known is None or where.rank >= known.rank:
                self._remember(cid, where)
        run = self._watched.get(cid)
        if run is None:
            return
        event = _decode(fields)
        if isinstance(event, FinalAnswerReady):
            run.offer(RunView(None, None, event.result, entry_id, bool(event.webhook_url)))
        elif isinstance(event, WebhookSettled):
            run.offer(RunView(None, None, None, None, True, event))
        elif event is not None:
            run.offer(RunView(event, entry_id, None, None, bool(webhook_url_of(event))))

    def _remember(self, correlation_id: str, where: _Where) -> None:
        self._index[correlation_id] = where
        self._index.move_to_end(correlation_id)
        while len(self._index) > self._index_size:
            self._index.popitem(last=False)


async def _load_history(records: RunRecords, correlation_id: str, run: RunState) -> None:
    """The run's passes from its history; a history that is gone (expired before the events
    that refer to it were trimmed) leaves the run's steps without its passes."""
    try:
        await history.load(records, correlation_id, run)
    except history.HistoryMissing as error:
        log.info("%s", error)


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


def _entry_rank(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


def _decode(fields: dict[bytes, bytes]) -> Event | None:
    """The event in an entry of Aeon's flat form; None for anything else (a poison entry is
    the phases' business, not a reader's)."""
    cls = EVENT_TYPES.get(text(fields, b"type"))
    body = fields.get(b"body")
    if cls is None or body is None:
        return None
    try:
        return cls.model_validate_json(body)
    except ValidationError:
        return None


class Watch:
    """One reader's hold on a watched run. `release` lets go, once however often it is called:
    a stream may end by its last step, its reader leaving, or never starting at all."""

    def __init__(self, feed: RunFeed, run: WatchedRun) -> None:
        self.feed = feed
        self.run = run
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.feed._let_go(self.run)


async def stream_steps(watch: Watch, after: EventId | None) -> AsyncIterator[WireStep]:
    """The run's steps after `after`, as they come, ending with the answer, or with its
    webhook's outcome when it named one (or WEBHOOK_WAIT_S after the answer, if none comes);
    lets the watch go at the end. Between them, the answer's text as it is written
    (`answer_delta`, `answer_reset`: bus.answer_text), after the entry `after` names, all of
    it before the answer; a reader that comes once the run is answered gets the answer alone.
    Every event's id says both where the reader is among the steps and in the text."""
    run, feed = watch.run, watch.feed
    sent = after.order if after is not None else BEFORE_ANY_STEP
    step_id = after.step if after is not None else START
    text_after = after.text_after if after is not None else None
    with_deltas = text_after is not None or run.view.answer is None
    feed.open_streams += 1
    try:
        while True:
            version, text_seen = run.version, len(run.text.entries)
            try:
                await run.load_history(feed.records)
            except TRANSIENT:
                return  # the reader tries again, by its id, when Redis is back
            for step in run.steps():
                if step.order <= sent:
                    continue
                if step.order >= ANSWERED and with_deltas:
                    try:
                        await feed.text_to_settled(run)
                    except TRANSIENT:
                        return
                    for text_step in _text_steps(run.text.entries, text_after, sent, step_id):
                        text_after = text_step.text_after
                        yield text_step.wire
                    with_deltas = False
                sent, step_id = step.order, step.event_id
                yield replace(step, event_id=with_text(step.event_id, text_after))
            if with_deltas:
                for text_step in _text_steps(run.text.entries, text_after, sent, step_id):
                    text_after = text_step.text_after
                    yield text_step.wire
            if run.view.answer is not None and sent >= run.view.last_order:
                return
            if run.stopping:
                return
            if run.view.answer is not None:  # answered: only the webhook's outcome is to come
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(run.changed(version), WEBHOOK_WAIT_S)
                if run.version == version:
                    return
                continue
            give_up_in = run.view.seconds_to_give_up()
            if give_up_in is not None and give_up_in <= 0:
                try:
                    await feed.settle(run)
                except TRANSIENT:
                    return  # the reader tries again, by its id, when Redis is back
                if run.view.answer is None:
                    yield run.view.no_answer()
                    return
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.changed(version, text_seen), give_up_in)
    finally:
        feed.open_streams -= 1
        watch.release()


@dataclass(frozen=True, slots=True)
class _TextStep:
    wire: WireStep
    text_after: str


def _text_steps(
    entries: list[TextEntry], after: str | None, order: Order, step_id: str
) -> list[_TextStep]:
    """The answer text events for `entries` after entry `after` (None: all of them): a delta
    or a reset each (a `settled` entry is said by the answer itself), each id the reader's
    last step and the entry."""
    floor = _entry_rank((after or "0-0").encode())
    steps = []
    for entry in entries:
        if _entry_rank(entry.entry_id.encode()) <= floor:
            continue
        if entry.kind in (DELTA, RESET):
            kind = ANSWER_DELTA if entry.kind == DELTA else ANSWER_RESET
            data = (
                {"text": entry.text, "candidate": entry.candidate, "provisional": entry.provisional}
                if entry.kind == DELTA
                else {"why": entry.why}
            )
            event_id = with_text(step_id, entry.entry_id)
            wire = WireStep(order, kind, event_id, orjson.dumps(data).decode())
            steps.append(_TextStep(wire, entry.entry_id))
        elif steps:
            steps[-1] = _TextStep(steps[-1].wire, entry.entry_id)
    return steps
