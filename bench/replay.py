"""The bus alone: Aeon's bus runtime with handlers that replay a recorded run, no phase logic.

Run as its own process like `aeon worker` (`python -m bench.replay --chain FILE`, settings from
the same AEON_* variables), it uses everything a worker's bus does per hop: batched
XREADGROUP, dedupe locks, Pydantic decoding of the real event, the committer's pipelined
XADD + done mark + XACK, the answer script. Only the handler differs: instead of calling the LLM
and running a phase, it returns the next event of a run recorded from the real pipeline (same
type, same body), re-addressed to this run. So the pipeline's CPU per hop splits into what the
bus costs (this) and what the phases and the instant LLM cost (the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from aeonloop.bus.connection import connect
from aeonloop.bus.consumer import Route
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.settings import BusSettings
from aeonloop.bus.worker import BusWorker, tune_gc
from aeonloop.phases.events import EVENT_TYPES, Event, derived_id
from bench import eventloop
from bench.pipeline import PHASE_ROUTES

#: (event type, passes so far) → the event the pipeline made from it. Passes tell apart the
#: same type met twice in one run (a third pass repeats PassRequested → PassCompleted).
Successors = dict[tuple[str, int], Event]


def load_successors(chain: Sequence[tuple[str, bytes]]) -> Successors:
    """The recorded chain (type, JSON body), request first, as a successor table."""
    events = [EVENT_TYPES[kind].model_validate_json(body) for kind, body in chain]
    return {_key(event): after for event, after in itertools.pairwise(events)}


def _key(event: Event) -> tuple[str, int]:
    run = getattr(event, "run", None)
    return type(event).__name__, len(run.passes) if run is not None else 0


def replay_routes(successors: Successors) -> list[Route]:
    """One route per phase group, as phases.worker wires them, each replaying the chain."""

    async def handle(event: Event, delivery: Delivery) -> list[Event]:
        template = successors[_key(event)]
        kind = type(template).__name__
        return [
            template.model_copy(
                update={
                    "event_id": derived_id(event.event_id, kind),
                    "correlation_id": event.correlation_id,
                    "causation_id": event.event_id,
                    "deadline": event.deadline,
                }
            )
        ]

    def give_up(dead: DeadLetter, delivery: Delivery) -> list[Event]:
        return []

    return [replace(route, handle=handle, give_up=give_up) for route in PHASE_ROUTES]


def write_chain(path: Path, chain: Sequence[tuple[str, bytes]]) -> None:
    path.write_text(json.dumps([{"type": kind, "body": body.decode()} for kind, body in chain]))


def read_chain(path: Path) -> list[tuple[str, bytes]]:
    return [(item["type"], item["body"].encode()) for item in json.loads(path.read_text())]


async def serve(chain_file: Path) -> None:
    """Serve every phase group with replaying handlers until SIGTERM, like `aeon worker`."""
    settings = BusSettings.from_env()
    redis = await connect(settings, consumers=len(PHASE_ROUTES) * settings.shards)
    try:
        worker = BusWorker(redis, settings)
        worker.add(replay_routes(load_successors(read_chain(chain_file))))
        tune_gc()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()
    finally:
        await redis.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__)
    parser.add_argument("--chain", type=Path, required=True, help="recorded chain (JSON)")
    args = parser.parse_args(argv)
    eventloop.run(serve(args.chain))


if __name__ == "__main__":
    main()
