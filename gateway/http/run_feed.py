"""Runs as the HTTP gateway serves them: read back from Redis, and followed live on the bus.

A run's events sit among every run's in its shard's streams, and a gateway only publishes and
reads; it reads runs through the run store (runs.store), never by their keys. What makes a run
cheap to read back is that each of its progress events carries the run so far but for its
passes, whose records the run's history holds (phases.history): the newest event and one read
of that history give every step (gateway.http.run_steps). The feed finds the newest event
with one read, `RunStore.get` (its head, its answer and its webhook's outcome, in one round
trip), then one XRANGE of the entry:

- **The run's head.** The script that adds each of a run's progress events (the client's for
  its request, the commit of each hop, an approval's) sets the run's head to it, so any
  gateway, this one restarted or another, finds the run's newest event without a scan,
  answered or not, until its events are trimmed (then the answer store still gives its exit
  and its answer).
- **Where this process saw it.** One follower (the AeonClient's own reader, which hands the
  feed every entry it takes: `RunFeed.seen`) reads every shard's requests, progress and
  answers streams with plain XREAD from the moment the process started, and for each entry
  notes, without decoding it, where the newest progress event of its run sits (stream and
  entry id; the most recent INDEX_SIZE runs): a run published without a head (by a FastStream
  app) is found here until its first hop is committed.
- **Where the reader says it was.** A run with no head yet, that this process never saw:
  an event id the API gave out names the Redis entry its step came from
  (`pass-2@1732300000000-0`), and the run's shard streams are scanned forward from there.

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

from aeonloop.bus.codec import entry_rank, text
from aeonloop.bus.keys import ANSWERS, AWAITING_APPROVAL
from aeonloop.bus.redis_errors import TRANSIENT
from aeonloop.exceptions import ForeignEventId
from aeonloop.gateway.client import PROGRESS_STREAMS, answer_due_by
from aeonloop.gateway.http.run_steps import (
    ANSWER_DELTA,
    ANSWER_RESET,
    ANSWERED,
    BEFORE_ANY_STEP,
    PHASE_OF_STEP,
    START,
    TYPE_RANK,
    WAITING,
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
from aeonloop.gateway.progress import Silence
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
from aeonloop.runs.answer_text import DELTA, RESET, TextEntry, TextWatch
from aeonloop.runs.store import RunHead, RunStore
from aeonloop.webhooks import outcome as webhook_outcome

log = logging.getLogger("aeon.http")

#: Runs whose newest event's place this process remembers (about 200 bytes each).
INDEX_SIZE = 100_000
#: Reading back from a reader's event id: entries scanned per stream at most (a bound on what
#: one request can make this process read; a reader away for long under heavy traffic gets what
#: the answer store has), and how far before the id's time the scan starts (the
#: run's other streams may hold entries of the same millisecond, and a clock can step back).
SCAN_LIMIT = 1_000
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
        return cls((TYPE_RANK[kind], *entry_rank(entry_id.encode())), stream, entry_id)


SUBMITTED = _Where((-1, 0, 0), None, None)


def answering(state: Event | str) -> bool:
    """Whether a run whose newest progress event is `state` (or of that type's name) is in
    Phase E's hands: its loop has ended, and Phase E answers every LoopExited it is given,
    however late (a redelivery after its worker died included), in the same commit that takes
    the event off its stream. Such a run is never `no_answer`: that state is final, and at 313 s
    of a 300 s deadline it was said of runs answered between 332 and 434 s (issue 41)."""
    kind = state if isinstance(state, str) else type(state).__name__
    return kind == LoopExited.__name__


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
        does now); None once answered, while its deadline is unknown, and while Phase E has
        it (`answering`)."""
        if self.answer is not None or self.state is None or answering(self.state):
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


@dataclass(frozen=True, slots=True)
class Recent:
    """A run as the run list shows it: its request, its answer once stored, and whether Phase
    E has it (`answering`: then it is not given up on)."""

    request: RequestSubmitted
    answer: ExecutionResult | None
    answering: bool = False

    def state(self) -> str:
        """`answered`, `running`, or `no_answer` once its deadline passed unanswered."""
        if self.answer is not None:
            return "answered"
        late = datetime.now(UTC) > answer_due_by(self.request.deadline)
        return "no_answer" if late and not self.answering else "running"


class WatchedRun:
    """A run someone is watching: the newest of it this process has, and a way to wait for
    more. The feed forgets it once its last watcher lets go."""

    def __init__(self, correlation_id: str, text: TextWatch | None = None) -> None:
        self.correlation_id = correlation_id
        #: Its answer's text as it is written (runs.answer_text), read by the feed's poller
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
    def __init__(self, runs: RunStore, *, index_size: int = INDEX_SIZE) -> None:
        #: What the feed reads of runs (runs.store): their heads, answers, records and text.
        self.runs = runs
        self._index_size = index_size
        self._index: OrderedDict[str, _Where] = OrderedDict()
        self._watched: dict[str, WatchedRun] = {}
        #: Where the runs' histories are read from (phases.history).
        self.records: RunRecords = runs.records
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
        found = await self.runs.get(correlation_id)
        answered = self._answer_of(correlation_id, found.answer)
        state, state_at = await self._newest(correlation_id, found.head)
        if state is None and after is not None and await self._is_entry_of(correlation_id, after):
            since = _entry_ms(after.entry_id) - SCAN_MARGIN_MS
            state, state_at = await self._scan(correlation_id, since)
        if state is None and answered is None and found.head is None:
            if correlation_id in self._index:
                return RunView(None, None, None)  # submitted here, no entry seen yet
            if not (after and after.text_after and await self.runs.has_text(correlation_id)):
                return None
            return RunView(None, None, None)  # known by its answer's text alone, so far
        run = getattr(state, "run", None)
        if isinstance(run, RunState):
            await _load_history(self.records, correlation_id, run)
        named = bool(webhook_url_of(state) or (answered and answered.webhook_url))
        webhook = webhook_outcome.parse(found.webhook) if named and answered else None
        return RunView(state, state_at, answered.result if answered else None, None, named, webhook)

    async def known(self, correlation_id: str, scan_limit: int | None = SCAN_LIMIT) -> bool:
        """Whether Aeon knows run `correlation_id`: `view` finds it (its answer, its head, or
        where this process saw it), it has a cancel mark or records, or an entry of its
        shard's streams is its (the newest `scan_limit` of each; None: all of them). False is
        the HTTP API's 404 for a cancel or an approval, and `aeon cancel`'s exit 2: nothing is
        written for a run nobody submitted."""
        if await self.view(correlation_id) is not None:
            return True
        if await self.runs.marked(correlation_id):
            return True
        return await self.runs.mentioned(correlation_id, STATE_STREAMS, scan_limit)

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
            text = self.runs.watch(correlation_id)
            run = self._watched[correlation_id] = WatchedRun(correlation_id, text)
            if self.stopping:
                run.stop()
        run.watchers += 1
        return Watch(self, run)

    def _let_go(self, run: WatchedRun) -> None:
        run.watchers -= 1
        if run.watchers == 0 and self._watched.get(run.correlation_id) is run:
            del self._watched[run.correlation_id]
            self.runs.release(run.text)

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

    async def recent(self, limit: int) -> list[Recent]:
        """The newest `limit` runs over every shard, newest first, each with its answer if one
        is stored. The run lists (`RunStore.listed`) keep a run as long as its answer; the
        requests streams, trimmed AEON_STREAM_KEEP_S after a run, add the runs published
        without a listing (by a FastStream app), while they hold them."""
        listed = await self.runs.listed(limit)
        runs: dict[str, Recent] = {}
        for run in listed:
            with contextlib.suppress(ValidationError):  # filed by another version
                request = RequestSubmitted.model_validate_json(run.listing)
                answered = self._answer_of(run.correlation_id, run.answer)
                result = answered.result if answered else None
                in_e = run.head is not None and answering(run.head.kind)
                runs[run.correlation_id] = Recent(request, result, in_e)
        entries = await self.runs.newest(RequestSubmitted.STREAM, limit)
        unlisted = [
            event
            for event in (_decode(fields) for _entry_id, fields in entries)
            if isinstance(event, RequestSubmitted) and event.correlation_id not in runs
        ]
        answers = await asyncio.gather(*(self._stored_answer(r.correlation_id) for r in unlisted))
        for request, answered in zip(unlisted, answers, strict=True):
            runs[request.correlation_id] = Recent(request, answered.result if answered else None)
        newest = sorted(runs.values(), key=lambda run: run.request.created_at, reverse=True)
        return newest[:limit]

    # -- reading ------------------------------------------------------------------------------

    async def _stored_answer(self, correlation_id: str) -> FinalAnswerReady | None:
        return self._answer_of(correlation_id, await self.runs.answer(correlation_id))

    def _answer_of(self, correlation_id: str, body: bytes | None) -> FinalAnswerReady | None:
        """The run's stored answer; None when there is none, or it cannot be read (written by
        another version, or damaged): one bad answer must not fail every list of runs."""
        if body is None:
            return None
        try:
            return FinalAnswerReady.model_validate_json(body)
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

    async def text_to_settled(self, run: WatchedRun) -> None:
        """Read the rest of an answered run's text, up to its settlement: the commit that
        published the answer settled it first (bus.commit), so one read has it all."""
        if run.text.settled:
            return
        after = run.text.entries[-1].entry_id if run.text.entries else "0-0"
        run.text.add(await self.runs.text(run.correlation_id, after))

    async def _newest(
        self, correlation_id: str, head: RunHead | None
    ) -> tuple[Event | None, str | None]:
        """The run's newest progress event and its entry id: the one its head names (the
        commit of each hop sets it), or the one this process saw, if newer (a run's request,
        which no commit adds); one read either way."""
        where = self._index.get(correlation_id)
        if head is not None and head.kind in TYPE_RANK:  # else written by another version
            at_head = _Where.of(head.kind, head.stream, head.entry_id)
            if where is None or at_head.rank >= where.rank:
                found = await self.runs.at_head(correlation_id, head)
                return (_decode(found[1]), head.entry_id) if found else (None, None)
        if where is None or where.stream is None or where.entry_id is None:
            return None, None
        found = await self.runs.entry(where.stream, where.entry_id)
        event = _decode(found[1]) if found else None  # None: trimmed since
        return event, where.entry_id if event is not None else None

    async def _is_entry_of(self, correlation_id: str, after: EventId) -> bool:
        """Whether the entry a reader's event id names is one of this run's, in its shard:
        only then is scanning from it worth its cost (a made-up id on a made-up run would
        otherwise make anyone able to reach the API read a whole window of every stream).
        False when there is no such entry (never was, or trimmed since); ForeignEventId when
        it is another run's."""
        entries = await self.runs.entries_at(
            correlation_id, (*STATE_STREAMS, ANSWERS), after.entry_id
        )
        owners = {text(fields, b"cid") for _entry, fields in entries}
        if owners and correlation_id not in owners:
            raise ForeignEventId(
                f"entry {after.entry_id} is an event of another run, not of {correlation_id}; "
                "send the id of the last event this run's stream gave"
            )
        return bool(owners)

    async def _scan(self, correlation_id: str, since_ms: int) -> tuple[Event | None, str | None]:
        """The newest progress event of a run with no head yet, in its shard's streams from
        `since_ms` on, and its entry id; at most SCAN_LIMIT entries read per stream."""
        newest: tuple[Event, str] | None = None
        entries = await self.runs.scan(correlation_id, STATE_STREAMS, since_ms, "+", SCAN_LIMIT)
        for entry_id, fields in entries:
            event = _decode(fields)
            if event is not None and (
                newest is None or progress_rank(event) >= progress_rank(newest[0])
            ):
                newest = (event, entry_id.decode())
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
    (`answer_delta`, `answer_reset`: runs.answer_text), after the entry `after` names, all of
    it before the answer; a reader that comes once the run is answered gets the answer alone.
    Every event's id says both where the reader is among the steps and in the text. While
    nothing comes, every WAITING_EVERY_S a `waiting` event says what the run waits for; it has
    no id, since it marks no place in the run."""
    run, feed = watch.run, watch.feed
    sent = after.order if after is not None else BEFORE_ANY_STEP
    step_id = after.step if after is not None else START
    text_after = after.text_after if after is not None else None
    with_deltas = text_after is not None or run.view.answer is None
    # What the reader has heard of the run: the newest step (by its order, as steps sent
    # before come round again each time the run is read), and when, for the waiting line.
    silence, heard, last_kind = Silence(), BEFORE_ANY_STEP, None
    feed.open_streams += 1
    try:
        while True:
            version, text_seen = run.version, len(run.text.entries)
            try:
                await run.load_history(feed.records)
            except TRANSIENT:
                return  # the reader tries again, by its id, when Redis is back
            steps = run.steps()
            newest = max(steps, key=lambda step: step.order, default=None)
            if newest is not None and newest.order > heard:
                heard, last_kind = newest.order, newest.kind
                silence.heard(PHASE_OF_STEP.get(newest.kind, silence.phase))
            for step in steps:
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
                    silence.writing()
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
            if last_kind != "awaiting_approval" and (line := silence.due()) is not None:
                yield WireStep(sent, WAITING, "", orjson.dumps({"line": line}).decode())
            wait_s = silence.next_in()
            if give_up_in is not None:
                wait_s = min(wait_s, give_up_in)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.changed(version, text_seen), wait_s)
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
    last step and the entry. Each entry goes once, at its place: the floor moves past every
    entry taken, so the reader's ids only grow."""
    floor = entry_rank((after or "0-0").encode())
    steps = []
    for entry in entries:
        rank = entry_rank(entry.entry_id.encode())
        if rank <= floor:
            continue
        floor = rank
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
