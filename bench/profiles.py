"""How big each benchmark is: full (the issue's figures), quick, and smoke (the test suite's).

The full profile keeps the whole invocation under five minutes on the 2-core machine; quick
keeps every target measurable (1,000 runs in flight included) within three (each profile's
`minutes`, judged as a target of its own); smoke only proves the harness works end to end and
its figures mean nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    #: Runs each system does before any measurement (start-up, caches, connections).
    warmup_runs: int
    #: Bus overhead: runs at 1 in flight, and runs at `parallel_in_flight` in flight.
    sequential_runs: int
    parallel_runs: int
    parallel_in_flight: int
    #: Concurrency, scale-out and memory: the slow LLM stand-in, per call.
    llm_delay_ms: float
    #: Runs at 1 in flight that give the time per run behind the slow LLM.
    single_runs: int
    #: Runs submitted at once, one worker (the last is also the scale-out and memory load).
    bursts: tuple[int, ...]
    #: AEON_CONCURRENCY for the slow-LLM workers (events in flight per phase per process).
    concurrency: int
    #: Sustained load: the largest burst's count kept in flight for this many runs per lane.
    sustained_rounds: int
    #: Redis Cluster: `cluster_runs` with `cluster_in_flight` in flight (instant LLM) on
    #: `cluster_workers` worker processes, once with 1 shard and once with one per master.
    cluster_workers: int
    cluster_runs: int
    cluster_in_flight: int
    #: Retention: runs whose leftover Redis memory is weighed (bench.retention).
    retention_runs: int
    #: Minutes the whole invocation (every section but quality) may take on a quiet machine:
    #: a target (bench.targets), so a bench that grows slow to run is seen.
    minutes: float

    @property
    def big_burst(self) -> int:
        return max(self.bursts)


FULL = Profile(
    name="full",
    warmup_runs=20,
    sequential_runs=300,
    parallel_runs=5000,
    parallel_in_flight=200,
    llm_delay_ms=200,
    single_runs=3,
    bursts=(200, 500, 1000),
    concurrency=1000,
    sustained_rounds=3,
    cluster_workers=2,
    cluster_runs=10_000,
    cluster_in_flight=200,
    retention_runs=300,
    minutes=5,
)
QUICK = Profile(
    name="quick",
    warmup_runs=10,
    sequential_runs=50,
    parallel_runs=600,
    parallel_in_flight=200,
    llm_delay_ms=200,
    single_runs=2,
    bursts=(200, 1000),
    concurrency=1000,
    sustained_rounds=2,
    cluster_workers=2,
    cluster_runs=5_000,
    cluster_in_flight=200,
    retention_runs=100,
    minutes=3,
)
SMOKE = Profile(
    name="smoke",
    warmup_runs=2,
    sequential_runs=4,
    parallel_runs=12,
    parallel_in_flight=6,
    llm_delay_ms=10,
    single_runs=1,
    bursts=(4, 12),
    concurrency=50,
    sustained_rounds=3,
    cluster_workers=2,
    cluster_runs=12,
    cluster_in_flight=6,
    retention_runs=6,
    minutes=3,
)
PROFILES = {p.name: p for p in (FULL, QUICK, SMOKE)}
