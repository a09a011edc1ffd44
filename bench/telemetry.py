"""Section 6, telemetry: what metrics and tracing cost a worker per hop.

The pipeline with an instant LLM (where the bus's own cost shows most) runs the overhead
section's parallel load once per configuration, each on fresh workers under a fresh prefix:
with nothing configured, with `/metrics` served, with every run traced and exported over OTLP,
with one run in ten traced (the sampler a busy deployment would use), and with metrics and
every run traced. Traces go
to a local sink that accepts OTLP/HTTP and discards it, so the exporter does all its work
(batching, protobuf encoding, the POST) and no collector's CPU is counted: the worker's CPU is
read from /proc, as everywhere in the benchmark. Each configuration's CPU per hop is compared
with the run with nothing configured.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.context import BenchContext
from bench.load import closed_loop
from bench.measure import guarded, measure
from bench.pipeline import running_pipeline
from bench.stats import ratio
from bench.traffic import measure_traffic

OFF = "off"
#: Each configuration's name, whether it serves metrics, and the share of runs traced.
CONFIGURATIONS = {
    OFF: (False, 0.0),
    "metrics": (True, 0.0),
    "tracing": (False, 1.0),
    "tracing_10pct": (False, 0.1),
    "metrics_and_tracing": (True, 1.0),
}


async def run_telemetry(ctx: BenchContext) -> dict[str, object]:
    rows = []
    with _otlp_sink() as endpoint:
        for name, (metrics_on, traced) in CONFIGURATIONS.items():
            env = {}
            if metrics_on:
                env["AEON_METRICS_PORT"] = str(_free_port())
            if traced:
                env |= {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
                # A run's first hop decides (the bench's gateway does not trace), the rest
                # follow it: the sampler a busy deployment would choose.
                env |= {
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                    "OTEL_TRACES_SAMPLER_ARG": f"{traced:g}",
                }
            rows.append({"configuration": name, **await _measured(ctx, name, env)})
    off = rows[0]["cpu_us_per_hop"]
    return {
        "results": rows,
        "ratios": {
            f"{row['configuration']}_cpu_per_hop_vs_off": ratio(row["cpu_us_per_hop"], off)
            for row in rows[1:]
        },
    }


async def _measured(ctx: BenchContext, name: str, env: dict[str, str]) -> dict[str, object]:
    profile = ctx.profile
    prefix = ctx.new_prefix(f"telemetry-{name.replace('_', '-')}")
    async with running_pipeline(ctx, prefix, env=env) as (workers, gateway):
        await guarded(closed_loop(gateway.one_run, profile.warmup_runs, 4), workers)
        loaded = await measure(
            gateway.one_run,
            profile.parallel_runs,
            profile.parallel_in_flight,
            workers,
            ctx.redis_pid,
        )
    traffic = await measure_traffic(ctx.redis, prefix, profile.warmup_runs + profile.parallel_runs)
    await ctx.clean(prefix)
    return loaded.as_dict(traffic.hops_per_run)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Discard(BaseHTTPRequestHandler):
    """Takes an OTLP/HTTP export and answers 200 with an empty response, as a collector does."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:  # one line per export would drown the bench
        pass


@contextlib.contextmanager
def _otlp_sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint on localhost that keeps nothing, for the length of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Discard)
    thread = threading.Thread(target=server.serve_forever, name="otlp-sink", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
