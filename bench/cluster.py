"""Section 5, Redis Cluster: the same load on 3 masters with 1 shard, then with one per master.

The section starts a throwaway 3-master cluster of its own (servers.local_cluster, from the same
redis-server binary), whatever --redis-url says, and closes it at the end. On it the same
`cluster_workers` `aeon worker` processes, each time fresh and under a prefix of their own,
serve `cluster_runs` runs kept `cluster_in_flight` at once with an instant LLM, the load that
asks the most of Redis: first with AEON_SHARDS=1 (every stream, so every command, on the
master owning shard 0's slot), then with AEON_SHARDS=3 (bus.keys puts shard i on master i).

Then what AEON_WAIT_REPLICAS=1 costs a submit: on a cluster with a replica per master, the time
of one `AeonClient.submit` (XADD, plus WAIT on the same connection), without and with it,
alternating so both see the same machine.

Besides runs/s, how the load spread over the masters: each master's commands over the load
(INFO stats, total_commands_processed) and its CPU (/proc). On this 2-core machine the workers,
the gateway (this process) and the three redis-servers share two cores, so the CPU columns say
which of them is the limit: sharding can only help when one master is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.crc import key_slot

from aeonloop.bus.connection import connect
from aeonloop.bus.keys import shard_tag
from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient
from aeonloop.servers.embedded import RedisServer
from aeonloop.servers.local_cluster import LocalCluster
from bench.context import BenchContext
from bench.load import closed_loop
from bench.measure import guarded, measure
from bench.pipeline import running_pipeline
from bench.procstat import CpuSnapshot
from bench.stats import ratio

MASTERS = 3
#: Runs in flight during the warm-up (connections, caches, the workers' first batches).
_WARMUP_IN_FLIGHT = 4
#: Submits timed per setting of AEON_WAIT_REPLICAS (fewer in smaller profiles), in rounds.
_SUBMITS = 600
_SUBMIT_ROUNDS = 3


async def run_cluster(ctx: BenchContext) -> dict[str, object]:
    # Started from this (the main) thread, so its nodes die with the benchmark if it is killed.
    with LocalCluster(masters=MASTERS) as cluster:
        masters = cluster.masters()
        redis = await connect(BusSettings(redis_url=cluster.url))
        try:
            on_cluster = dataclasses.replace(
                ctx, redis_url=cluster.url, redis_pid=None, redis=redis, prefixes=[], shared={}
            )
            async with contextlib.AsyncExitStack() as stack:
                admins = [
                    await stack.enter_async_context(Redis.from_url(node.url)) for node in masters
                ]
                version = (await admins[0].info("server"))["redis_version"]
                points = [
                    await _point(on_cluster, cluster, masters, admins, shards)
                    for shards in (1, MASTERS)
                ]
        finally:
            await redis.aclose()
    one, sharded = points
    return {
        "masters": MASTERS,
        "redis_version": version,
        "workers": ctx.profile.cluster_workers,
        "in_flight": ctx.profile.cluster_in_flight,
        "points": points,
        f"speedup_{MASTERS}_shards_vs_1": round(ratio(sharded["runs_per_s"], one["runs_per_s"]), 3),
        f"min_master_share_{MASTERS}_shards": sharded["min_master_share"],
        "submit_us": await _submit_cost(ctx, min(_SUBMITS, ctx.profile.cluster_runs)),
    }


async def _submit_cost(ctx: BenchContext, submits: int) -> dict[str, float]:
    """Median µs of a submit with AEON_WAIT_REPLICAS 0 and 1, on masters with a replica each."""
    times: dict[int, list[float]] = {0: [], 1: []}
    with LocalCluster(masters=MASTERS, replicas=1) as cluster:
        for _ in range(_SUBMIT_ROUNDS):
            for wait in times:
                settings = BusSettings(
                    redis_url=cluster.url,
                    prefix=ctx.new_prefix(f"submit-{wait}"),
                    shards=MASTERS,
                    wait_replicas=wait,
                )
                async with AeonClient(settings=settings) as client:
                    await client.submit("Explain tides", timeout=60)  # connections, warm
                    for _ in range(max(1, submits // _SUBMIT_ROUNDS)):
                        started = time.perf_counter()
                        await client.submit("Explain tides", timeout=60)
                        times[wait].append(1e6 * (time.perf_counter() - started))
    plain, waited = (statistics.median(times[w]) for w in (0, 1))
    return {
        "submits": len(times[0]),
        "p50_without_wait": round(plain, 1),
        "p50_with_wait_1": round(waited, 1),
        "ratio": round(ratio(waited, plain), 3),
    }


async def _point(
    ctx: BenchContext,
    cluster: LocalCluster,
    masters: Sequence[RedisServer],
    admins: Sequence[Redis],
    shards: int,
) -> dict[str, object]:
    """The load with `shards` shards on fresh workers: throughput, and each master's part."""
    profile = ctx.profile
    prefix = ctx.new_prefix(f"cluster-{shards}")
    async with running_pipeline(ctx, prefix, workers=profile.cluster_workers, shards=shards) as (
        procs,
        gateway,
    ):
        await guarded(closed_loop(gateway.one_run, profile.warmup_runs, _WARMUP_IN_FLIGHT), procs)
        pids = {str(node.port): [node.pid] for node in masters}
        commands_before = await _commands(admins)
        cpu_before = CpuSnapshot.take(pids)
        measured = await measure(
            gateway.one_run, profile.cluster_runs, profile.cluster_in_flight, procs, None
        )
        cpu = CpuSnapshot.take(pids).since(cpu_before)
        commands = [
            after - before
            for after, before in zip(await _commands(admins), commands_before, strict=True)
        ]
    await ctx.clean(prefix)

    home = [masters.index(cluster.master_of_slot(_slot(s, shards))) for s in range(shards)]
    total = sum(commands)
    runs = measured.load.runs
    per_master = [
        {
            "port": node.port,
            "shards": [s for s in range(shards) if home[s] == index],
            "commands": commands[index],
            "share": round(ratio(commands[index], total), 3),
            "commands_per_run": round(commands[index] / runs, 1),
            "cpu_percent": round(cpu.percent(str(node.port)), 1),
        }
        for index, node in enumerate(masters)
    ]
    cpu_percent = {role: measured.cpu.percent(role) for role in measured.cpu.seconds}
    cpu_percent["redis"] = sum(cpu.percent(role) for role in pids)
    return {
        "shards": shards,
        "workers": len(procs),
        **measured.as_dict(),
        # Share of one core each: the machine's total is 100 × its cores.
        "cpu_percent": {role: round(value, 1) for role, value in cpu_percent.items()},
        "cpu_percent_total": round(sum(cpu_percent.values()), 1),
        "worker_cpu_ms_per_run": round(1000 * measured.cpu.seconds["consumer"] / runs, 3),
        "commands_per_run": round(total / runs, 1),
        "masters": per_master,
        "min_master_share": min(master["share"] for master in per_master),
    }


async def _commands(admins: Sequence[Redis]) -> list[int]:
    """Commands each master has processed so far."""
    return [int((await admin.info("stats"))["total_commands_processed"]) for admin in admins]


def _slot(shard: int, shards: int) -> int:
    """The hash slot of shard `shard` out of `shards` (every key of the shard has its tag)."""
    return key_slot(shard_tag(shard, shards).encode())
