"""The Python client: publish requests, await their answers, follow their progress.

    import asyncio
    from aeonloop import AeonClient

    async def main() -> None:
        async with AeonClient("redis://localhost:6379/0") as client:
            result = await client.ask("Explain photosynthesis", timeout=120, on_progress=print)
            print(result.final_answer.answer_text)

    asyncio.run(main())

`on_progress` gets a small `Progress` record per step (printing it prints one line).

One client serves any number of requests in flight: one reader follows the answers and
progress streams of every shard (on a cluster, one reader per shard, as one XREAD may not span
slots) and hands each entry to the waiter of its correlation id, read from the entry's `cid`
field without decoding the body. Answers are also stored under their correlation id, so `wait`
checks the store too and `fetch` finds an answer long after the stream entry is gone.

With `AEON_WAIT_REPLICAS` set, `submit` returns once that many replicas hold the request
(Redis WAIT on the connection that wrote it), so a failover of its master cannot lose it.
While a cluster fails over, `submit` keeps trying until the request's timeout; a single server
that does not answer is an error at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from redis.asyncio.cluster import PipelineCommand
from redis.exceptions import ResponseError

from aeonloop.bus.codec import decode, encode, text
from aeonloop.bus.connection import RedisClient, connect, is_cluster
from aeonloop.bus.keys import ANSWERS, AWAITING_APPROVAL, TURNS_RECORD, WEBHOOK_OUTCOMES, Keys
from aeonloop.bus.layout import agree_on_shards
from aeonloop.bus.redis_errors import FAILING_OVER, TRANSIENT, unblocked
from aeonloop.bus.settings import BusSettings
from aeonloop.contracts import AttachedFile, Turn
from aeonloop.exceptions import AnswerTimeout, BadInput, DecodeError, ParentGone
from aeonloop.gateway.conversation import turns_after
from aeonloop.gateway.progress import Progress, progress_of
from aeonloop.gateway.validation import (
    FileSettings,
    RequestLimits,
    check_event_size,
    checked_request,
)
from aeonloop.limits import Effort, LoopSettings
from aeonloop.phases import approvals, history
from aeonloop.phases.events import (
    DEFAULT_THRESHOLD,
    EVENT_TYPES,
    ExecutionResult,
    FinalAnswerReady,
    Fork,
    PlanAwaitingApproval,
    RequestSubmitted,
    WebhookSettled,
    fork_id,
)
from aeonloop.phases.models import Plan, Rule
from aeonloop.runs.answer_text import TextEntry
from aeonloop.runs.cancels import CancelOutcome
from aeonloop.runs.memo import replies_kept_until
from aeonloop.runs.store import RunStore
from aeonloop.telemetry import tracing
from aeonloop.webhooks import outcome as webhook_outcome
from aeonloop.webhooks.policy import WebhookSettings

log = logging.getLogger("aeon.gateway")

PROGRESS_STREAMS = ("profiled", "passes", "pass-completed", "loop-exited")
#: How often a waiter also looks in the answer store, in case its stream entry was missed
#: (a reconnect, or an entry trimmed before this client read it).
_STORE_POLL_S = 2.0
#: How far before this host's clock a reader starts when its server cannot tell the time.
_CLOCK_MARGIN_S = 10.0
#: Entries one XREAD takes at most, how long it blocks (ms), and how long a reader waits before
#: trying a lost Redis again.
_READ_COUNT = 500
_BLOCK_MS = 500
_RECONNECT_S = 0.5
#: A submit that Redis could not take (a failover under way) is tried again after this long.
_SUBMIT_RETRY_S = 0.25
#: Seconds a request may take unless its submitter says otherwise (its deadline in the pipeline).
DEFAULT_TIMEOUT_S = 300.0
#: How long past a request's deadline its gateway keeps waiting: the phase that notices the
#: deadline still has to hand the run to Phase E, which answers degraded without the LLM.
ANSWER_GRACE_S = 5.0

ProgressCallback = Callable[[Progress], None]
#: Takes each entry a reader reads: its stream, its entry id, its fields.
EntryHandler = Callable[[str, bytes, dict[bytes, bytes]], None]


def answer_due_by(deadline: datetime) -> datetime:
    """When a run with `deadline` has its answer if it ever will: its gateway stops waiting
    then, and a run still unanswered is lost (or its answer expired)."""
    return deadline + timedelta(seconds=ANSWER_GRACE_S)


@dataclass
class _Waiter:
    future: asyncio.Future[ExecutionResult]
    on_progress: ProgressCallback | None
    #: The last pass reported, so a pass is reported once though two events describe it.
    passes_shown: int = 0


def fork_point(from_pass: int | None, plan: Plan | None) -> int | None:
    """The first pass a fork makes anew: `from_pass`, or 1 for a fork given a plan (every pass
    runs the plan given); BadInput for a plan with a later pass."""
    if plan is None:
        return from_pass
    if from_pass not in (None, 1):
        raise BadInput(
            "a fork given a plan runs every pass of it anew: give no from_pass above 1 with it"
        )
    return 1


class AeonClient:
    def __init__(
        self,
        redis_url: str | None = None,
        *,
        settings: BusSettings | None = None,
        redis: RedisClient | None = None,
        also: EntryHandler | None = None,
        loop: LoopSettings | None = None,
        file_limits: FileSettings | None = None,
    ) -> None:
        """`also` sees every entry the client's readers take, and they then read the requests
        streams too: `aeon serve`'s run feed follows every run this way, so one reader serves
        both and each entry is read from Redis once.

        `loop` gives AEON_MAX_PASSES, which a request's `max_ttl` may not exceed: the workers'
        cap, so it is set alike on gateways and workers (read from the environment if not
        given). `file_limits` are what a request may attach (AEON_MAX_FILES and the byte
        limits; from the environment if not given)."""
        self.settings = settings or BusSettings.from_env()
        self.max_passes = (loop or LoopSettings.from_env()).max_passes
        #: Which webhook URLs a request may name (AEON_WEBHOOK_*), set alike where Aeon runs.
        self.webhooks = WebhookSettings.from_env()
        self.file_limits = file_limits or FileSettings.from_env()
        self._also = also
        self._url = redis_url or self.settings.redis_url
        self._redis = redis
        self._owns_redis = redis is None
        self.keys = Keys(self.settings.prefix, self.settings.shards)
        self._waiters: dict[str, _Waiter] = {}
        self._readers: StreamReaders | None = None
        #: What the client reads of runs (their answers, records, text; cancel, approve).
        self._runs: RunStore | None = None

    @functools.cached_property
    def limits(self) -> RequestLimits:
        """What this client holds a request to (gateway.validation.request_checks): read once,
        as the settings above are: reading the environment's AEON_MAX_TURNS at every request
        was close to half of `ask`'s own CPU in a profile of 300 runs."""
        return RequestLimits(self.max_passes, self.webhooks, self.file_limits)

    async def __aenter__(self) -> Self:
        if self._redis is None:
            self._redis = await connect(self.settings, self._url, consumers=self.keys.shards)
        try:
            await self._agree_on_shards()
            self._readers = StreamReaders(self.redis, "the reader of the bus", self._take)
            for streams in self._reads():
                self._readers.start(streams, await self._start_id(streams[0]))
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _agree_on_shards(self) -> None:
        """As every process of the deployment must (bus.layout); on a cluster failing over,
        the check is skipped rather than holding up the start."""
        try:
            await agree_on_shards(self.redis, self.keys)
        except TRANSIENT:
            if not is_cluster(self.redis):
                raise

    async def _start_id(self, key: str) -> str:
        """Where a reader of `key` starts: now on its server's clock; if that server does not
        answer (a cluster failing over), a little earlier on this host's, which only means
        reading a few entries no waiter wants."""
        try:
            return await stream_id_now(self.redis, key)
        except TRANSIENT as error:
            if not is_cluster(self.redis):
                raise
            log.info(
                "no time from the server of %s (%s); starting from this host's clock", key, error
            )
            return f"{int((time.time() - _CLOCK_MARGIN_S) * 1000)}-0"

    def _reads(self) -> list[tuple[str, ...]]:
        """The streams each reader follows: all of them in one XREAD, or on a cluster, one
        XREAD per shard (a shard's streams share its slot)."""
        names = (ANSWERS, *PROGRESS_STREAMS)
        if self._also is not None:  # the HTTP run feed: requests, pauses, webhook outcomes too
            names = (RequestSubmitted.STREAM, *names, AWAITING_APPROVAL, WEBHOOK_OUTCOMES)
        shards = [tuple(self.keys.stream(n, s) for n in names) for s in range(self.keys.shards)]
        if is_cluster(self.redis):
            return shards
        return [tuple(key for shard in shards for key in shard)]

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runs is not None:
            await self._runs.aclose()
        if self._readers is not None:
            await self._readers.stop()
        if self._owns_redis and self._redis is not None:
            await self._redis.aclose()

    async def follow_text(
        self, correlation_id: str, on_text: Callable[[TextEntry], object]
    ) -> None:
        """Call `on_text` with each entry of the run's answer text as it is written (bus.
        answer_text), up to its settlement, which comes just before its answer; cancel it to
        stop sooner."""
        watch = self.runs.watch(correlation_id)
        seen = 0
        try:
            while True:
                for entry in watch.entries[seen:]:
                    on_text(entry)
                seen = len(watch.entries)
                if watch.settled:
                    return
                await watch.more_than(seen)
        finally:
            self.runs.release(watch)

    @property
    def runs_awaited(self) -> int:
        """Runs this client keeps a waiter for (each until `wait` takes its answer)."""
        return len(self._waiters)

    @property
    def reader_failure(self) -> str | None:
        """What stopped a reader for good (None while they all read): every wait, and every
        live event stream fed by `also`, behind it would wait in vain."""
        return self._readers.failure if self._readers is not None else None

    @property
    def redis(self) -> RedisClient:
        if self._redis is None:
            raise RuntimeError("use the client inside `async with AeonClient(...)`")
        return self._redis

    @property
    def runs(self) -> RunStore:
        """The run store on this client's Redis: every read of a run goes through it."""
        if self._runs is None:
            self._runs = RunStore(self.redis, self.keys, self.settings)
        return self._runs

    # -- requests ---------------------------------------------------------------------------

    async def submit(
        self,
        request: str,
        *,
        rules: list[Rule] | None = None,
        max_ttl: int | None = None,
        effort: Effort | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        timeout: float = DEFAULT_TIMEOUT_S,
        on_progress: ProgressCallback | None = None,
        watch: bool = True,
        token_budget: int | None = None,
        approve_plan: bool = False,
        webhook_url: str | None = None,
        files: list[AttachedFile] | None = None,
        tools: list[str] | None = None,
        messages: list[Turn] | None = None,
        tenant: str | None = None,
        correlation_id: str | None = None,
        fork: Fork | None = None,
    ) -> str:
        """Publish a request and return its correlation id; BadInput before publishing if the
        request is not acceptable. `timeout` becomes the request's deadline in the pipeline;
        `max_ttl` caps its passes, 1 to AEON_MAX_PASSES (None: AEON_MAX_PASSES itself);
        `effort` is how hard its run works (limits.Effort; None: the workers' AEON_EFFORT);
        `token_budget` caps the tokens its LLM calls may spend (None: the workers'
        AEON_RUN_TOKEN_BUDGET, if set); `approve_plan` pauses the run after its plan is made,
        until `approve` (or a cancel, or its deadline); `webhook_url` is POSTed the answer
        (aeonloop.webhooks: BadInput unless webhooks are on and it is allowed); `files` are
        given to the prompts as context (gateway.validation.check_files: BadInput, or TooLarge
        past a limit on bytes, which the request's whole event is held to as well); `tools`
        narrows the tools its steps may call to those named (None: every configured tool);
        `messages` are the earlier turns of the conversation it continues, oldest first, given
        to the prompts as context (gateway.validation.check_turns: BadInput, or TooLarge past
        AEON_MAX_TURNS_CHARS; `follow_up` makes them from a stored run). `tenant` is who asked
        (aeonloop.tenants); `correlation_id` one the caller chose (a fresh one if None);
        `fork` the run it forks (`fork` makes both).

        The client watches the run, keeping its answer until `wait` takes it. `watch=False`
        (without `on_progress`) keeps nothing, for a caller that will not wait on this client:
        a watched run nobody waits for is kept for the life of the client."""
        checked = checked_request(
            self.limits,
            request,
            max_ttl=max_ttl,
            timeout=timeout,
            token_budget=token_budget,
            webhook_url=webhook_url,
            files=files or [],
            tools=tools,
            messages=messages or [],
        )
        event = RequestSubmitted.new(
            **checked,
            rules=rules,
            threshold=threshold,
            approve_plan=approve_plan,
            tenant=tenant,
            correlation_id=correlation_id,
            fork=fork,
            effort=effort,
        )
        body = encode(event)
        check_event_size(len(body["body"]), self.settings.max_event_bytes)
        if watch or on_progress is not None:
            self._watch(event.correlation_id, on_progress)
        key = self.keys.stream_of(RequestSubmitted.STREAM, event.correlation_id)
        with tracing.submitting(event.correlation_id, key) as trace:  # the run's root span
            await self._publish(event, trace | body, key, time.monotonic() + timeout)
        return event.correlation_id

    async def _publish(
        self, event: RequestSubmitted, fields: dict[str, bytes], key: str, deadline: float
    ) -> None:
        """XADD the request's `fields` (its trace context and its encoding) to `key`, the run's
        head from then on (runs.store.RunStore.submission: one script, one round trip), and
        WAIT for replicas when asked, trying again through a failover until `deadline`. A
        second XADD of the same event is harmless: the phase's dedupe handles an event id
        once, and the head is set only if the run has none."""
        wanted = self.settings.wait_replicas
        cid, kind = event.correlation_id, type(event).__name__
        add = self.runs.submission(cid, kind, event.STREAM, fields, listing(event))
        while True:
            try:
                if wanted:
                    confirmed = await self._add_and_wait(key, add)
                else:
                    await self.redis.execute_command(*add)
            except FAILING_OVER as error:
                if not is_cluster(self.redis) or time.monotonic() + _SUBMIT_RETRY_S > deadline:
                    raise  # one server away: say so now (`aeon ask` exits 4)
                log.info("submit of %s failed (%s); trying again", event.correlation_id, error)
                await asyncio.sleep(_SUBMIT_RETRY_S)
                await self._relearn(key)
                continue
            if wanted and confirmed < wanted:
                log.warning(
                    "request %s is stored but only %d of %d replicas confirmed it within %d ms; "
                    "a failover of its master now could lose it",
                    event.correlation_id,
                    confirmed,
                    wanted,
                    self.settings.wait_timeout_ms,
                )
            return

    async def _add_and_wait(self, key: str, xadd: tuple[Any, ...]) -> int:
        """The command `xadd` (which adds to `key`), then WAIT on the same connection (WAIT
        counts the replicas holding what its own connection wrote); how many replicas
        confirmed."""
        wait = ("WAIT", self.settings.wait_replicas, self.settings.wait_timeout_ms)
        if not is_cluster(self.redis):
            pipe = self.redis.pipeline(transaction=False)
            pipe.execute_command(*xadd)
            pipe.execute_command(*wait)
            return (await pipe.execute())[-1]
        # Not the cluster client's pipeline: after a redirection or a lost connection it sends
        # a command again alone, on another connection or node, and WAIT would count nothing.
        # Both go to the master the client knows for the key, on one of its connections; a
        # MOVED or a lost node fails the pair, and it is tried again once the client relearnt.
        pair = [PipelineCommand(0, *xadd), PipelineCommand(1, *wait)]
        await self.redis.get_node_from_key(key).execute_pipeline(pair)
        for command in pair:
            if isinstance(command.result, Exception):
                raise command.result
        return pair[1].result

    async def _relearn(self, key: str) -> None:
        """On a cluster, let the client find the key's master again: a command through it
        follows MOVED and refreshes its map of the slots after a failover."""
        if is_cluster(self.redis):
            with contextlib.suppress(ResponseError, *TRANSIENT):
                await self.redis.xlen(key)

    async def wait(self, correlation_id: str, timeout: float) -> ExecutionResult:
        """The run's result, or AnswerTimeout after `timeout` seconds."""
        waiter = self._watch(correlation_id, None)
        deadline = time.monotonic() + timeout
        try:
            while True:
                stored = await self._stored(correlation_id)
                if stored is not None:
                    return stored
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AnswerTimeout(correlation_id, timeout)
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(
                        asyncio.shield(waiter.future), min(left, _STORE_POLL_S)
                    )
        finally:
            self._waiters.pop(correlation_id, None)

    async def ask(
        self,
        request: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        on_progress: ProgressCallback | None = None,
        **options: object,
    ) -> ExecutionResult:
        correlation_id = await self.submit(
            request, timeout=timeout, on_progress=on_progress, **options
        )
        return await self.wait(correlation_id, timeout + ANSWER_GRACE_S)

    async def fork(
        self,
        parent: str,
        *,
        from_pass: int | None = None,
        rules: list[Rule] | None = None,
        plan: Plan | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        on_progress: ProgressCallback | None = None,
        watch: bool = True,
        tenant: str | None = None,
        admit: Callable[[str], Awaitable[None]] | None = None,
    ) -> str:
        """Start a fork of run `parent` and return its correlation id (docs/forks.md): its
        request again, with `rules` in place of the parent's (None: the same) or `plan` in
        place of the one Phase B would write, taking the parent's recorded replies for every
        call before pass `from_pass` (None: every pass; with `plan`, 1), so they cost no LLM
        call. A fork that changes nothing takes the parent's answer too: no call at all.

        The id is derived from the parent and the change (`fork_id`), so asking for the same
        fork again is the same run: one already answered is not published again. ParentGone
        when `parent` is unknown, its records expired (AEON_ANSWER_KEEP_S) or its replies
        (AEON_FORK_KEEP_S past its deadline); BadInput for a plan with `from_pass` above 1
        (a plan given is the one every pass runs). `admit` is given the fork's id before it is
        published (the HTTP API's tenant quotas, gateway.http.guards.TenantGate.fork)."""
        first_pass = fork_point(from_pass, plan)
        request = await self._request(parent)
        if request is None:
            raise ParentGone(
                parent, "no request of it is recorded (unknown, or expired: AEON_ANSWER_KEEP_S)"
            )
        kept_until = replies_kept_until(request.deadline, self.settings.fork_keep_s)
        if kept_until <= datetime.now(UTC):
            raise ParentGone(
                parent,
                f"its recorded replies were kept until {kept_until:%Y-%m-%d %H:%M:%S} UTC "
                f"(AEON_FORK_KEEP_S, {self.settings.fork_keep_s} s past its deadline)",
            )
        changed = rules is not None or plan is not None
        fork = Fork(parent=parent, from_pass=first_pass, changed=changed, plan=plan)
        correlation_id = fork_id(fork, rules)
        if await self._stored(correlation_id) is not None:
            return correlation_id  # asked before and answered: the same run, not a second
        if admit is not None:
            await admit(correlation_id)
        return await self.submit(
            request.request,
            rules=request.rules if rules is None else rules,
            max_ttl=request.max_ttl,
            threshold=request.threshold,
            timeout=timeout,
            on_progress=on_progress,
            watch=watch,
            token_budget=request.token_budget,
            files=request.files,
            tools=request.tools,
            messages=request.messages,
            effort=request.effort,
            tenant=tenant,
            correlation_id=correlation_id,
            fork=fork,
        )

    async def lineage(self, correlation_id: str) -> Fork | None:
        """The run `correlation_id` was forked from, and where, if it is a fork whose request
        is still recorded (as long as its answer); None otherwise."""
        request = await self._request(correlation_id)
        return request.fork if request is not None else None

    async def _request(self, correlation_id: str) -> RequestSubmitted | None:
        """The request that started the run: its record (history.load_request), or, before
        Phase A has taken it, the request's entry, which the run's head names from the moment
        it is submitted (runs.store.RunStore.submission). The commit that writes the record
        moves the head on, so a run submitted is found by one or the other, read in this order:
        a fork asked for right after its parent's submit is not refused as unknown. None for a
        run unknown, expired, or whose request this version cannot read."""
        recorded = await history.load_request(self.runs.records, correlation_id)
        if recorded is not None:
            return recorded
        head = (await self.runs.get(correlation_id)).head
        if head is None:
            return None
        if head.kind != RequestSubmitted.__name__:  # taken between the two reads: recorded now
            return await history.load_request(self.runs.records, correlation_id)
        found = await self.runs.at_head(correlation_id, head)
        if found is None:  # trimmed from its stream before a worker took it
            return None
        types = {head.kind: RequestSubmitted}
        try:
            return decode(found[1], types, self.settings.max_event_bytes)
        except DecodeError:
            return None

    async def cancel(self, correlation_id: str) -> CancelOutcome:
        """Cancel a run: REQUESTED, and it stops at its next hop, abandoning a call in flight,
        and is answered `cancelled` without another LLM call; ANSWERED if it already has its
        answer, which stays. Cancelling twice is the same as once (docs/failure-behaviour.md)."""
        return await self.runs.cancel(correlation_id)

    async def awaiting(self, correlation_id: str) -> PlanAwaitingApproval | None:
        """The run paused for its plan's approval, with the plan; None if it is not paused."""
        found = await self.runs.paused(correlation_id)
        if found is None:
            return None
        return approvals.read(found[1], self.settings.max_event_bytes)

    async def approve(self, correlation_id: str, plan: Plan | None = None) -> bool:
        """Approve a paused run's plan, or put `plan` in its place (phases.approvals.edited_plan
        reads and checks one): it goes on to its passes. False when it is not paused (not yet,
        or no longer: approved, cancelled, past its deadline)."""
        found = await self.runs.paused(correlation_id)
        paused = approvals.read(found[1], self.settings.max_event_bytes) if found else None
        if found is None or paused is None:
            return False
        return await self.runs.approve(correlation_id, found[0], approvals.approved(paused, plan))

    async def cancel_requested(self, correlation_id: str) -> bool:
        """Whether the run was cancelled (its answer may still be on its way)."""
        return await self.runs.cancel_requested(correlation_id)

    async def webhook(self, correlation_id: str) -> WebhookSettled | None:
        """What became of the run's webhook (aeonloop.webhooks): None until the webhooks group
        is done with it, and for a run that named none."""
        return await webhook_outcome.outcome(self.runs.records, correlation_id)

    async def fetch(self, correlation_id: str) -> ExecutionResult | None:
        """A stored answer, whenever it was produced (until it expires)."""
        return await self._stored(correlation_id)

    async def follow_up(self, correlation_id: str) -> list[Turn]:
        """The earlier turns of a request that follows up run `correlation_id`: the run's own
        earlier turns, then its request and its answer (`aeon ask --continue`). Read from its
        stored answer, which says what it answered, and its record of turns, which is kept as
        long; BadInput when no answer is stored, or it does not say its request (an answer
        from an older version)."""
        stored = await self._stored_event(correlation_id)
        if stored is None:
            raise BadInput(
                f"no answer stored for {correlation_id} (not finished, expired or unknown): "
                "there is nothing to continue"
            )
        if not stored.request:
            raise BadInput(f"the answer of {correlation_id} does not say its request: ask anew")
        (value,) = await self.runs.records.read(correlation_id, [TURNS_RECORD])
        earlier = history.turns_of(value) if value is not None else []
        return turns_after(earlier, stored.request, stored.result.final_answer.answer_text)

    # -- reading ----------------------------------------------------------------------------

    def _watch(self, correlation_id: str, on_progress: ProgressCallback | None) -> _Waiter:
        waiter = self._waiters.get(correlation_id)
        if waiter is None:
            future = asyncio.get_running_loop().create_future()
            waiter = self._waiters[correlation_id] = _Waiter(future, on_progress)
        elif on_progress is not None:
            waiter.on_progress = on_progress
        return waiter

    async def _stored(self, correlation_id: str) -> ExecutionResult | None:
        stored = await self._stored_event(correlation_id)
        return stored.result if stored is not None else None

    async def _stored_event(self, correlation_id: str) -> FinalAnswerReady | None:
        with contextlib.suppress(*TRANSIENT):
            body = await self.runs.answer(correlation_id)
            if body is not None:
                return FinalAnswerReady.model_validate_json(body)
        return None

    def _take(self, stream: str, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        if self._also is not None:
            self._also(stream, entry_id, fields)
        self._deliver(fields)

    def _deliver(self, fields: dict[bytes, bytes]) -> None:
        waiter = self._waiters.get(text(fields, b"cid"))
        if waiter is None:
            return
        kind = text(fields, b"type")
        if kind == FinalAnswerReady.__name__:
            result = FinalAnswerReady.model_validate_json(fields[b"body"]).result
            if not waiter.future.done():
                waiter.future.set_result(result)
        elif waiter.on_progress is not None and kind in EVENT_TYPES:
            event = EVENT_TYPES[kind].model_validate_json(fields[b"body"])
            for progress in progress_of(event):
                if progress.pass_number is not None:
                    if progress.pass_number <= waiter.passes_shown:
                        continue
                    waiter.passes_shown = progress.pass_number
                waiter.on_progress(progress)


class StreamReaders:
    """The client's XREAD loops (which also feed `aeon serve`'s run feed), one per group of
    streams, each handing every entry to `handle`.

    Everyone waiting on a reader stalls silently if it stops, so it must outlive anything
    Redis or one entry can do: a lost Redis is waited out, an entry `handle` cannot take (a
    producer's garbage, a failing progress callback) is skipped and logged once per reader,
    and a reader that stops anyway is logged and named by `failure`, which readiness reports.
    """

    def __init__(
        self,
        redis: RedisClient,
        name: str,
        handle: EntryHandler,
    ) -> None:
        self._redis = redis
        self._name = name
        self._handle = handle
        self._tasks: list[asyncio.Task[None]] = []
        #: Why a reader stopped for good; None while every one reads.
        self.failure: str | None = None

    def start(self, streams: tuple[str, ...], start: str) -> None:
        """Read `streams` from entry id `start` on, until `stop`."""
        task = asyncio.create_task(self._follow(streams, start))
        task.add_done_callback(self._ended)
        self._tasks.append(task)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        self.failure = self.failure or f"{self._name} stopped ({type(error).__name__}: {error})"
        log.error("%s; restart this process", self.failure, exc_info=error)

    async def _follow(self, streams: tuple[str, ...], start: str) -> None:
        last: dict[Any, Any] = dict.fromkeys(streams, start)
        failing = skipped = False
        while True:
            try:
                reply = await self._redis.xread(last, count=_READ_COUNT, block=_BLOCK_MS)
            except (*TRANSIENT, ResponseError) as error:
                # A read a failover unblocked (its master made a replica) is read again, as
                # one Redis dropped: it had stopped the reader (tests/e2e/test_cluster.py).
                if not isinstance(error, TRANSIENT) and not unblocked(error):
                    raise
                if not failing:
                    log.warning("lost Redis (%s); reconnecting", type(error).__name__)
                failing = True
                await asyncio.sleep(_RECONNECT_S)
                continue
            failing = False
            for stream, entries in reply or ():
                name = stream.decode()
                last[name] = entries[-1][0]
                for entry_id, fields in entries:
                    try:
                        self._handle(name, entry_id, fields)
                    except Exception as error:  # one entry must not stop every waiter
                        if not skipped:
                            log.warning(
                                "%s skipped entry %s of %s, which it cannot take (%s: %s); "
                                "further ones are skipped silently",
                                self._name,
                                entry_id.decode(),
                                name,
                                type(error).__name__,
                                error,
                            )
                        skipped = True


async def stream_id_now(redis: RedisClient, key: str) -> str:
    """A stream id just before now on the clock of the server holding `key`: every entry
    added to it later gets read."""
    if is_cluster(redis):
        seconds, micros = await redis.time(target_nodes=redis.get_node_from_key(key))
    else:
        seconds, micros = await redis.time()
    return f"{seconds * 1000 + micros // 1000 - 1}-0"


#: What a run list shows of a request's text (gateway.http.models.RecentRun.request).
LISTED_CHARS = 300


def listing(event: RequestSubmitted) -> bytes:
    """What a run list keeps of `event` beside its run (runs.store.RunStore.listed): the
    request as sent, cut to LISTED_CHARS, without its files, turns and rules, which a list
    does not show and which can weigh megabytes."""
    listed = event.model_copy(
        update={"request": event.request[:LISTED_CHARS], "files": [], "messages": [], "rules": []}
    )
    return listed.model_dump_json().encode()
