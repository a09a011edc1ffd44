"""The worker app: phase handlers wired to their streams, deadlines and dead-letter hand-offs.

Each route says what a phase consumes, how to handle it, and what carries a run on when the bus
gives up on one of its events: phases A–D send the run to Phase E as `failed`; Phase E, which
cannot send anything further, publishes a degraded answer made without the LLM. Either way the
request still ends with exactly one FinalAnswer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta

from redis.asyncio import Redis

from aeonloop.bus.consumer import Route
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.records import RunRecord
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker
from aeonloop.llm.base import LLMAdapter, LLMUnreachable
from aeonloop.phases import history, phase_a, phase_b, phase_c, phase_d, phase_e
from aeonloop.phases.deps import LoopSettings, PhaseDeps
from aeonloop.phases.events import (
    Event,
    LoopExited,
    PassCompleted,
    PassRequested,
    PlanReady,
    RequestSubmitted,
    RunState,
    TaskProfiled,
    derived_id,
    utcnow,
)
from aeonloop.prompts.registry import default_registry

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
            handle=_before_deadline(handler, deps),
            give_up=_send_to_phase_e,
            records=history.records_for_c if name == "c" else None,
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
                handle=lambda event: phase_e.handle(event, deps),
                give_up=_answer_without_llm,
                records=history.records_for_e,
            )
        )
    return routes


def make_worker(
    redis: Redis,
    settings: BusSettings,
    llm: LLMAdapter,
    phases: Iterable[str] = PHASES,
    loop: LoopSettings | None = None,
) -> BusWorker:
    """A bus worker running the named phases with `llm`, memoising replies in Redis; it reads
    no new work while the LLM server is away (llm.outage)."""
    worker = BusWorker(redis, settings, pauses=[llm.outage] if llm.outage else [])
    deps = PhaseDeps(
        llm=llm,
        registry=default_registry(),
        memo=worker.memo,
        records=worker.records,
        settings=loop or LoopSettings.from_env(),
    )
    worker.add(build_routes(deps, phases))
    return worker


def run_of(event: Event) -> RunState | None:
    """The run an event carries; a request is a run that has not started yet."""
    if isinstance(event, RequestSubmitted):
        return event.initial_state()
    return getattr(event, "run", None)


def _before_deadline(handler: Handler, deps: PhaseDeps) -> Callable[[Event], Awaitable[list]]:
    """A phase that sees the deadline passed sends the run to E instead of calling the LLM.
    What it returns goes with the records of the passes it ran (phases.history)."""

    async def handle(event: Event) -> list[Event | RunRecord]:
        kept = history.kept_passes(getattr(event, "run", None))
        if event.expired():
            outputs = [_exit(event, "deadline_exceeded", "the request's deadline passed")]
        else:
            try:
                outputs = await handler(event, deps)
            except LLMUnreachable as error:  # the deadline came while the LLM server was away
                outputs = [_exit(event, "deadline_exceeded", str(error))]
        return [*history.new_records(outputs, kept), *outputs]

    return handle


def _exit(event: Event, reason: str, detail: str) -> LoopExited:
    run = run_of(event)
    return event.child(
        LoopExited,
        reason=reason,
        detail=detail,
        request=run.request if run else "",
        run=run,
    )


def _send_to_phase_e(dead: DeadLetter) -> list[Event | RunRecord]:
    """The run to E as failed, with the records of passes its event carried inline (an event
    from a version that sent them so), which nothing else would write."""
    detail = f"{dead.group} gave up: {dead.reason}"
    if dead.event is not None:
        exit_event = _exit(dead.event, "failed", detail)
        return [*history.new_records([exit_event], history.kept_passes(exit_event.run)), exit_event]
    lost = _lost_run_exit(dead, detail)
    return [lost] if lost else []


def _answer_without_llm(dead: DeadLetter) -> list[Event]:
    """A degraded answer, from the run's history as read with the event's lock, if it was."""
    exit_event = dead.event if isinstance(dead.event, LoopExited) else None
    exit_event = exit_event or _lost_run_exit(dead, f"phase-e gave up: {dead.reason}")
    if exit_event is None:
        return []
    try:
        passes = history.prefetched_pass_json(exit_event)
    except Exception as error:  # a record that does not parse: answer without the history
        log.warning("%s: answering without its history: %s", exit_event.correlation_id, error)
        passes = None
    return [phase_e.fallback_answer(exit_event, dead.reason, passes)]


def _lost_run_exit(dead: DeadLetter, detail: str) -> LoopExited | None:
    """An exit for an entry that is not an event at all: answerable only if it names its run."""
    correlation_id = dead.correlation_id
    if not correlation_id:
        return None
    return LoopExited(
        event_id=derived_id(f"{dead.stream}/{dead.entry_id}", "LoopExited"),
        correlation_id=correlation_id,
        deadline=utcnow() + timedelta(hours=1),
        reason="failed",
        detail=detail,
    )
