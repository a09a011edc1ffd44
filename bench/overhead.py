"""Section 1, bus overhead: the pipeline with an instant LLM against plain redis-py chains.

The pipeline runs first, so its own traffic (hops per run, each hop's event type and size) can
be read back from the streams; the two references then replay exactly that chain, and so does
the bus alone (bench.replay: Aeon's bus with handlers that return the recorded next event),
which splits the pipeline's cost into the bus's and the phases'. So do two FastStream chains
(bench.faststream_ref: stock FastStream subscribers, one message per call and batches of 100),
what a FastStream user would write instead of Aeon's bus. Every system gets the same warm-up
and the same loads: `sequential_runs` with one run in flight (latency), then `parallel_runs`
with `parallel_in_flight` in flight (throughput).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from bench import faststream_ref
from bench.chain import ChainSpec
from bench.context import BenchContext
from bench.eventloop import loop_name
from bench.gateways import FastStreamGateway, ReferenceGateway
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


@dataclass(frozen=True)
class Reference:
    """A chain carried by other consumers than Aeon's: the module their process runs, its mode,
    and the gateway that feeds the chain and waits for its answers."""

    module: str
    mode: str
    gateway: type[ReferenceGateway]


#: Every reference, by its system name in the report, in the order they run.
REFERENCES = {
    **{f"reference_{mode}": Reference("bench.reference", mode, ReferenceGateway) for mode in MODES},
    **{
        f"faststream_{mode}": Reference("bench.faststream_ref", mode, FastStreamGateway)
        for mode in faststream_ref.MODES
    },
}


async def run_overhead(ctx: BenchContext) -> dict[str, object]:
    measured: dict[str, list[Measured]] = {}
    measured[PIPELINE], traffic = await _pipeline(ctx)
    chain_types, chain_sizes = traffic.chain_types, traffic.chain_sizes
    measured[BUS_ONLY] = await _bus_only(ctx, traffic)
    for name, reference in REFERENCES.items():
        spec = ChainSpec(ctx.new_prefix(name.replace("_", "-")), chain_types, chain_sizes)
        measured[name] = await _reference(ctx, spec, reference)

    # The replays run the commonest chain; the pipeline's figure is what really ran.
    hops = {name: float(len(chain_types) - 1) for name in measured}
    hops[PIPELINE] = traffic.hops_per_run
    rows = [
        {"system": name, **m.as_dict(hops[name])} for name, loads in measured.items() for m in loads
    ]
    raw = {mode: f"reference_{mode}" for mode in MODES}
    ratios = _ratios(measured, hops, PIPELINE, "", raw)
    ratios |= _ratios(measured, hops, BUS_ONLY, f"{BUS_ONLY}_", raw)
    for mode in faststream_ref.MODES:
        ratios |= _ratios(
            measured,
            hops,
            f"faststream_{mode}",
            f"faststream_{mode}_",
            {BUS_ONLY: BUS_ONLY},
            ("throughput", "cpu_per_hop"),
        )
    return {
        "event_loop": loop_name(),
        "traffic": traffic.as_dict(),
        "results": rows,
        "ratios": ratios,
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


async def _reference(ctx: BenchContext, spec: ChainSpec, reference: Reference) -> list[Measured]:
    await ensure_groups(ctx.redis, spec)
    baseline = await blocked_readers(ctx.redis)
    with reference_consumers(
        ctx.redis_url, spec, reference.mode, ctx.log_dir, reference.module
    ) as consumer:
        await until_reading(ctx.redis, baseline, spec.hops, [consumer])
        async with reference.gateway(ctx.redis_url, spec) as gateway:
            loads = await _loads(ctx, gateway.one_run, [consumer])
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


METRICS = ("throughput", "p50_1_in_flight", "p50_parallel", "cpu_per_hop")


def _ratios(
    measured: dict[str, list[Measured]],
    hops: dict[str, float],
    system: str,
    label: str,
    others: dict[str, str],
    metrics: Sequence[str] = METRICS,
) -> dict[str, float]:
    """`system` ÷ each of `others` ({name in the key: system}) for each metric: throughput and
    CPU per hop at the parallel load, p50 latency at either load. Keys `{label}{metric}_vs_{name}`.
    """
    seq, par = measured[system]
    out: dict[str, float] = {}
    for name, other in others.items():
        other_seq, other_par = measured[other]
        figures = {
            "throughput": (par.load.runs_per_s, other_par.load.runs_per_s),
            "p50_1_in_flight": (
                percentile(seq.load.latencies, 50),
                percentile(other_seq.load.latencies, 50),
            ),
            "p50_parallel": (
                percentile(par.load.latencies, 50),
                percentile(other_par.load.latencies, 50),
            ),
            "cpu_per_hop": (
                par.cpu_us_per_hop(hops[system]),
                other_par.cpu_us_per_hop(hops[other]),
            ),
        }
        for metric in metrics:
            out[f"{label}{metric}_vs_{name}"] = round(ratio(*figures[metric]), 3)
    return out
