"""The worker app: phase handlers wired to their streams, deadlines and dead-letter hand-offs.

Each route says what a phase consumes, how to handle it, and what carries a run on when the bus
gives up on one of its events: phases A–D send the run to Phase E as `failed`; Phase E, which
cannot send anything further, publishes a degraded answer made without the LLM. Either way the
request still ends with exactly one FinalAnswer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from redis.asyncio import Redis

from aeonloop.bus.consumer import Route
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.route import RunRecord
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMAdapter
from aeonloop.llm.factory import share_limit
from aeonloop.phases import (
    approvals,
    exits,
    history,
    phase_a,
    phase_b,
    phase_c,
    phase_d,
    phase_e,
)
from aeonloop.phases.cancels import Stopped, unless_stopped
from aeonloop.phases.deps import PhaseDeps
from aeonloop.phases.events import (
    Event,
    LoopExited,
    PassCompleted,
    PassRequested,
    PlanReady,
    RequestSubmitted,
    RunState,
    TaskProfiled,
)
from aeonloop.prompts.registry import default_registry
from aeonloop.runs.answer_text import RedisAnswerText
from aeonloop.runs.cancels import RedisCancels
from aeonloop.runs.memo import RedisMemo
from aeonloop.runs.records import RedisRunRecords
from aeonloop.tools.base import NoTools, Toolbox

log = logging.getLogger("aeon.phases")

PHASES = ("a", "b", "c", "d", "e")
#: What each phase consumes: its stream is theirs (one stream per phase).
PHASE_INPUTS: dict[str, tuple[type[Event], ...]] = {
    "a": (RequestSubmitted,),
    "b": (TaskProfiled,),
    "c": (PlanReady, PassRequested),
    "d": (PassCompleted,),
    "e": (LoopExited,),
}

Handler = Callable[[Event, PhaseDeps], Awaitable[list[Event]]]
#: The run records each phase of A–D reads with its event's lock (phases.history); E's route
#: names its own.
_RECORDS = {"b": history.records_for_b, "c": history.records_for_c}


def build_routes(deps: PhaseDeps, phases: Iterable[str] = PHASES) -> list[Route]:
    """Routes for the named phases (all by default), in pipeline order."""
    wanted = set(phases)
    unknown = wanted - set(PHASES)
    if unknown:
        raise ValueError(f"unknown phase(s) {sorted(unknown)}; choose from {', '.join(PHASES)}")
    handlers: dict[str, Handler] = {
        "a": phase_a.handle,
        "b": phase_b.handle,
        "c": phase_c.handle,
        "d": phase_d.handle,
    }
    routes = [
        Route(
            stream=PHASE_INPUTS[name][0].STREAM,
            group=name,
            types={t.__name__: t for t in PHASE_INPUTS[name]},
            handle=_stoppable(handler, deps),
            give_up=_send_to_phase_e,
            records=_RECORDS.get(name),
        )
        for name, handler in handlers.items()
        if name in wanted
    ]
    if "e" in wanted:
        routes.append(
            Route(
                stream=LoopExited.STREAM,
                group="e",
                types={LoopExited.__name__: LoopExited},
                handle=lambda event, delivery: phase_e.handle(
                    event, deps.delivered(delivery, event)
                ),
                give_up=_answer_without_llm,
                records=history.records_for_e,
                # A run whose deadline passed while the LLM server was away is answered then,
                # with what it has: E's own calls wait at the gate, bounded by the deadline.
                paused=False,
            )
        )
    return routes


def make_worker(
    redis: Redis,
    settings: BusSettings,
    llm: LLMAdapter,
    phases: Iterable[str] = PHASES,
    loop: LoopSettings | None = None,
    tools: Toolbox | None = None,
    routes: Callable[[BusWorker], Iterable[Route]] | None = None,
) -> BusWorker:
    """A bus worker running the named phases with `llm` and `tools` (connected by the caller,
    for the worker's life: tools.toolbox.open_toolbox), memoising replies in Redis; it reads
    no new work while the LLM server is away (llm.outage). `routes(worker)` run beside the
    phases': the processes that start workers add the webhooks group there
    (webhooks.worker_routes), which reads the phases' answers, so the phases do not import it
    back."""
    worker = BusWorker(redis, settings, pauses=[llm.outage] if llm.outage else [])
    share_limit(llm, redis, worker.keys)  # the LLM's rate limit, shared by every worker
    cancels = RedisCancels(redis, worker.keys)
    deps = PhaseDeps(
        llm=llm,
        registry=default_registry(),
        memo=RedisMemo(redis, worker.keys, worker.committer, settings.fork_keep_s),
        records=RedisRunRecords(redis, worker.keys),
        settings=loop or LoopSettings.from_env(),
        cancels=cancels,
        tools=tools or NoTools(),
        answers=RedisAnswerText(
            redis, worker.keys, settings.answer_text_maxlen, settings.answer_ttl_s
        ),
    )
    worker.add(build_routes(deps, phases))
    sweeper = approvals.Sweeper(redis, worker.keys, cancels, settings)
    worker.background.append(sweeper.run)
    if routes is not None:
        worker.add(list(routes(worker)))
    return worker


def _stoppable(handler: Handler, deps: PhaseDeps) -> Callable[[Event, Delivery], Awaitable[list]]:
    """A phase that sees the deadline passed, or its run cancelled, sends the run to E instead
    of calling the LLM; so does one whose run is cancelled while it works (the work is then
    abandoned, phases.cancels), that may start no further call (its token budget is spent), or
    whose LLM server stayed away until the deadline (phases.cancels.unless_stopped). A run so
    stopped goes to E as the hop was given it (its usage aside): what the abandoned
    work changed in place is not the run's. What the hop returns goes with the records of the
    passes it ran, and, for a request, of the files it attached (phases.history)."""

    async def handle(event: Event, delivery: Delivery) -> list[Event | RunRecord]:
        run = getattr(event, "run", None)
        kept = history.kept_passes(run)
        cid = event.correlation_id
        stop = exits.deadline_passed(event)
        if stop is None and await deps.cancels.cancelled(cid):
            stop = exits.cancelled(cid)
        if stop is not None:
            outputs: list[Event] = [exits.loop_exited(event, stop)]
        else:
            given = _as_given(event, deps)
            work = handler(event, deps.delivered(delivery, event))
            done = await unless_stopped(deps.cancels, cid, work)
            if isinstance(done, Stopped):
                outputs = [exits.loop_exited(event, exits.interrupted(done.error), run=given)]
            else:
                outputs = done
        records = [*history.request_records(event), *history.new_records(outputs, kept)]
        return [*records, *outputs]

    return handle


def _as_given(event: Event, deps: PhaseDeps) -> RunState | None:
    """The run as the hop is given it, kept apart from what the handler changes in place (its
    usage aside: what the hop spends counts); a request's run as Phase A starts it."""
    if isinstance(event, RequestSubmitted):
        return event.initial_state(deps.settings.max_passes, deps.settings.run_token_budget)
    run = getattr(event, "run", None)
    return run.snapshot() if isinstance(run, RunState) else None


def _send_to_phase_e(dead: DeadLetter, delivery: Delivery) -> list[Event | RunRecord]:
    """The run to E as failed, with the records of passes its event carried inline (an event
    from a version that sent them so), or of the files its request attached, which nothing
    else would write. (What the delivery read is not needed: E reads the run's history
    itself.)"""
    stop = exits.gave_up(dead.group, dead.reason)
    if dead.event is not None:
        exit_event = exits.loop_exited(dead.event, stop)
        kept = history.kept_passes(exit_event.run)
        records = [*history.request_records(dead.event), *history.new_records([exit_event], kept)]
        return [*records, exit_event]
    return [exits.loop_exited(dead, stop)] if dead.correlation_id else []


def _answer_without_llm(dead: DeadLetter, delivery: Delivery) -> list[Event]:
    """A degraded answer, from the run's history as read with the event's lock, if it was."""
    if isinstance(dead.event, LoopExited):
        exit_event = dead.event
    elif dead.correlation_id:  # an entry that is not an event at all, but names its run
        exit_event = exits.loop_exited(dead, exits.gave_up(dead.group, dead.reason))
    else:
        return []
    try:
        passes = history.prefetched_pass_json(exit_event, delivery.records)
    except Exception as error:  # a record that does not parse: answer without the history
        log.warning("%s: answering without its history: %s", exit_event.correlation_id, error)
        passes = None
    return [phase_e.fallback_answer(exit_event, dead.reason, passes)]
