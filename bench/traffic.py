"""What the pipeline actually sent: hops per run and the size of each hop's event.

The references must replay the same traffic, so rather than assume a run's path (the offline
model converges on pass 2, so A, B, C, D, C, E: six hops) we read it back from the streams:
hops per run is every entry the worker groups consumed divided by the runs submitted, and the
chain is rebuilt per run by following `causation_id` from the RequestSubmitted to the
FinalAnswerReady, with each event's body size.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import orjson
from redis.asyncio import Redis

from aeonloop.bus.keys import Keys
from aeonloop.phases.events import (
    FinalAnswerReady,
    LoopExited,
    PassCompleted,
    PlanReady,
    RequestSubmitted,
    TaskProfiled,
)

#: The streams the worker's phase groups consume (the answers stream is the gateway's).
CONSUMED_STREAMS = tuple(
    dict.fromkeys(
        cls.STREAM for cls in (RequestSubmitted, TaskProfiled, PlanReady, PassCompleted, LoopExited)
    )
)
ALL_STREAMS = (*CONSUMED_STREAMS, FinalAnswerReady.STREAM)


@dataclass(frozen=True)
class Traffic:
    """Consumed entries per run, and the commonest chain of (event type, body size)."""

    hops_per_run: float
    chain_types: tuple[str, ...]
    chain_sizes: tuple[int, ...]
    runs_sampled: int
    runs_on_chain: int
    #: One run on the commonest chain, as recorded: (event type, JSON body).
    recorded: tuple[tuple[str, bytes], ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "hops_per_run": round(self.hops_per_run, 3),
            "chain": [
                {"type": kind, "body_bytes": size}
                for kind, size in zip(self.chain_types, self.chain_sizes, strict=True)
            ],
            "runs_sampled": self.runs_sampled,
            "runs_on_chain": self.runs_on_chain,
        }


async def measure_traffic(redis: Redis, prefix: str, runs: int, sample: int = 200) -> Traffic:
    """Hops per run over all `runs` submitted under `prefix`; the chain from the first `sample`."""
    keys = Keys(prefix)
    consumed = 0
    for stream in CONSUMED_STREAMS:
        consumed += await redis.xlen(keys.stream(stream, 0))
    events: dict[str, list[tuple[str, str | None, str, bytes]]] = defaultdict(list)
    for stream in ALL_STREAMS:
        # Each run leaves at most a few entries per stream; this bounds the read to the sample.
        for _entry_id, fields in await redis.xrange(keys.stream(stream, 0), count=4 * sample):
            body = fields[b"body"]
            head = orjson.loads(body)
            events[head["correlation_id"]].append(
                (head["event_id"], head.get("causation_id"), fields[b"type"].decode(), body)
            )
    chains = [chain for chain in map(_chain, events.values()) if chain]
    if not chains:
        raise RuntimeError(f"no complete run found in the streams of prefix {prefix!r}")
    commonest, count = Counter(tuple(kind for kind, _ in c) for c in chains).most_common(1)[0]
    on_chain = [c for c in chains if tuple(kind for kind, _ in c) == commonest]
    sizes = tuple(
        round(sum(len(chain[i][1]) for chain in on_chain) / len(on_chain))
        for i in range(len(commonest))
    )
    return Traffic(consumed / runs, commonest, sizes, len(chains), count, tuple(on_chain[0]))


def _chain(events: list[tuple[str, str | None, str, bytes]]) -> list[tuple[str, bytes]]:
    """(type, body) from the request to the answer, following causation; [] if incomplete."""
    by_parent = {parent: (eid, kind, body) for eid, parent, kind, body in events if parent}
    roots = [(eid, kind, body) for eid, parent, kind, body in events if not parent]
    if len(roots) != 1 or roots[0][1] != RequestSubmitted.__name__:
        return []
    eid, kind, body = roots[0]
    chain = [(kind, body)]
    while eid in by_parent:
        eid, kind, body = by_parent[eid]
        chain.append((kind, body))
    return chain if kind == FinalAnswerReady.__name__ else []
