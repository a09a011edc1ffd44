"""Section 1, bus overhead: the pipeline with an instant LLM against plain redis-py chains.

The pipeline runs first, so its own traffic (hops per run, each hop's event type and size) can
be read back from the streams; the two references then replay exactly that chain, and so does
the bus alone (bench.replay: Aeon's bus with handlers that return the recorded next event),
which splits the pipeline's cost into the bus's and the phases'. Every system gets the same
warm-up and the same loads: `sequential_runs` with one run in flight (latency), then
`parallel_runs` with `parallel_in_flight` in flight (throughput).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench.chain import ChainSpec
from bench.context import BenchContext
from bench.eventloop import loop_name
from bench.gateways import ReferenceGateway
from bench.load import OneRun, closed_loop
from bench.measure import Measured, guarded, measure
from bench.pipeline import running_pipeline
from bench.processes import Spawned, reference_consumers
from bench.readiness import blocked_readers, until_reading
from bench.reference import MODES, ensure_groups
from bench.replay import write_chain
from bench.stats import percentile, ratio
from bench.traffic import Traffic, measure_traffic

PIPELINE = "pipeline"
#: The bus runtime replaying a recorded run: the pipeline without phases or LLM (bench.replay).
BUS_ONLY = "bus_only"


async def run_overhead(ctx: BenchContext) -> dict[str, object]:
    measured: dict[str, list[Measured]] = {}
    measured[PIPELINE], traffic = await _pipeline(ctx)
    chain_types, chain_sizes = traffic.chain_types, traffic.chain_sizes
    measured[BUS_ONLY] = await _bus_only(ctx, traffic)
    for mode in MODES:
        spec = ChainSpec(ctx.new_prefix(f"ref-{mode}"), chain_types, chain_sizes)
        measured[f"reference_{mode}"] = await _reference(ctx, spec, mode)

    # The replays run the commonest chain; the pipeline's figure is what really ran.
    hops = {name: float(len(chain_types) - 1) for name in measured}
    hops[PIPELINE] = traffic.hops_per_run
    rows = [
        {"system": name, **m.as_dict(hops[name])} for name, loads in measured.items() for m in loads
    ]
    return {
        "event_loop": loop_name(),
        "traffic": traffic.as_dict(),
        "results": rows,
        "ratios": _ratios(measured, hops, PIPELINE, "")
        | _ratios(measured, hops, BUS_ONLY, f"{BUS_ONLY}_"),
    }


async def _pipeline(ctx: BenchContext) -> tuple[list[Measured], Traffic]:
    """The real thing, then what it sent: hops per run, and the chain the others replay."""
    profile = ctx.profile
    prefix = ctx.new_prefix("overhead")
    async with running_pipeline(ctx, prefix) as (workers, gateway):
        loads = await _loads(ctx, gateway.one_run, workers)
    runs = profile.warmup_runs + profile.sequential_runs + profile.parallel_runs
    traffic = await measure_traffic(ctx.redis, prefix, runs)
    await ctx.clean(prefix)
    return loads, traffic


async def _bus_only(ctx: BenchContext, traffic: Traffic) -> list[Measured]:
    prefix = ctx.new_prefix("bus")
    chain_file = ctx.log_dir / f"{prefix}-chain.json"
    write_chain(chain_file, traffic.recorded)
    argv = [sys.executable, "-m", "bench.replay", "--chain", str(chain_file)]
    async with running_pipeline(ctx, prefix, argv=argv) as (workers, gateway):
        loads = await _loads(ctx, gateway.one_run, workers)
    await ctx.clean(prefix)
    return loads


async def _reference(ctx: BenchContext, spec: ChainSpec, mode: str) -> list[Measured]:
    await ensure_groups(ctx.redis, spec)
    baseline = await blocked_readers(ctx.redis)
    with reference_consumers(ctx.redis_url, spec, mode, ctx.log_dir) as consumer:
        await until_reading(ctx.redis, baseline, spec.hops, [consumer])
        async with ReferenceGateway(ctx.redis_url, spec) as reference:
            loads = await _loads(ctx, reference.one_run, [consumer])
    await ctx.clean(spec.prefix)
    return loads


async def _loads(
    ctx: BenchContext, one_run: OneRun, consumers: Sequence[Spawned]
) -> list[Measured]:
    """Warm-up, then the sequential and the parallel load."""
    profile = ctx.profile
    await guarded(closed_loop(one_run, profile.warmup_runs, 4), consumers)
    sequential = await measure(one_run, profile.sequential_runs, 1, consumers, ctx.redis_pid)
    parallel = await measure(
        one_run, profile.parallel_runs, profile.parallel_in_flight, consumers, ctx.redis_pid
    )
    return [sequential, parallel]


def _ratios(
    measured: dict[str, list[Measured]], hops: dict[str, float], system: str, label: str
) -> dict[str, float]:
    """`system` ÷ each reference: throughput and p50 latency at both loads, CPU per hop."""
    (seq, par) = measured[system]
    out: dict[str, float] = {}
    for mode in MODES:
        name = f"reference_{mode}"
        ref_seq, ref_par = measured[name]
        out[f"{label}throughput_vs_{mode}"] = ratio(par.load.runs_per_s, ref_par.load.runs_per_s)
        out[f"{label}p50_1_in_flight_vs_{mode}"] = ratio(
            percentile(seq.load.latencies, 50), percentile(ref_seq.load.latencies, 50)
        )
        out[f"{label}p50_parallel_vs_{mode}"] = ratio(
            percentile(par.load.latencies, 50), percentile(ref_par.load.latencies, 50)
        )
        out[f"{label}cpu_per_hop_vs_{mode}"] = ratio(
            par.cpu_us_per_hop(hops[system]), ref_par.cpu_us_per_hop(hops[name])
        )
    return {key: round(value, 3) for key, value in out.items()}
