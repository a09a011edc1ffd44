"""The workers' own account of a load, read from their /metrics (issue 15).

With AEON_METRICS_PORT set, each `aeon worker` of a load serves /metrics on that port plus its
index (bench.processes). Every load runs on fresh workers, so what they serve at its end is
that load alone. Summarised as means in ms (a histogram's sum ÷ its count, pooled over the
workers): per phase the queue wait, handle and commit times; the event loop's lag; per prompt
the LLM call time.

    AEON_METRICS_PORT=9464 python -m bench --quick --only concurrency,scaleout
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections import defaultdict
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

from bench.processes import Spawned

#: Histogram → the label its means are split by ("" for none).
HISTOGRAMS = {
    "aeon_queue_wait_seconds": "phase",
    "aeon_handle_seconds": "phase",
    "aeon_commit_seconds": "phase",
    "aeon_event_loop_lag_seconds": "",
    "aeon_llm_call_seconds": "prompt_id",
}


async def worker_metrics(workers: Sequence[Spawned]) -> dict[str, object] | None:
    """Mean ms (and count) per histogram and label over `workers`; None without metrics."""
    ports = [w.metrics_port for w in workers if w.metrics_port is not None]
    if not ports:
        return None
    totals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for port in ports:
        text = await asyncio.to_thread(_read, port)
        for family in text_string_to_metric_families(text):
            label = HISTOGRAMS.get(family.name)
            if label is None:
                continue
            for sample in family.samples:
                kind = sample.name.removeprefix(family.name)
                if kind in ("_sum", "_count"):
                    pooled = totals[family.name][sample.labels.get(label, "all")]
                    pooled[kind == "_count"] += sample.value
    return {
        name: {
            key: {"mean_ms": round(1000 * s / n, 2), "count": int(n)}
            for key, (s, n) in sorted(by_label.items())
            if n
        }
        for name, by_label in totals.items()
    }


def _read(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return reply.read().decode()
