"""The report: a table on stdout for people, the same figures as JSON for machines and CI."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def write_json(report: Mapping[str, Any], path: Path) -> None:
    """Strict JSON: a figure that could not be computed (NaN) is written as null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(report), indent=2, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def render(report: Mapping[str, Any]) -> str:
    """Every section that ran, then the targets."""
    parts = [_header(report["meta"])]
    for name, render_section in _SECTIONS.items():
        if name in report:
            parts.append(render_section(report[name]))
    parts.append(_targets(report["targets"]))
    return "\n\n".join(parts)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Right-aligned columns (left for the first), figures formatted for reading."""
    cells = [list(headers)] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}" if value else "0"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _header(meta: Mapping[str, Any]) -> str:
    return (
        f"Aeon benchmark ({meta['profile']}): {meta['cpus']} CPUs, Python {meta['python']}, "
        f"Redis {meta['redis']['version']} ({meta['redis']['source']}), "
        f"{meta['event_loop']} everywhere, {meta['duration_s']:.0f} s"
    )


def _overhead(section: Mapping[str, Any]) -> str:
    traffic = section["traffic"]
    chain = " → ".join(f"{hop['type']} {hop['body_bytes']:,} B" for hop in traffic["chain"])
    rows = [
        [
            row["system"],
            row["in_flight"],
            row["runs"],
            row["runs_per_s"],
            row["latency_ms"]["p50"],
            row["latency_ms"]["p99"],
            row["cpu_us_per_hop"],
            row["cpu_percent"]["consumer"],
            row["cpu_percent"]["bench"],
            row["cpu_percent"].get("redis"),
        ]
        for row in section["results"]
    ]
    headers = ["system", "in flight", "runs", "runs/s", "p50 ms", "p99 ms", "CPU µs/hop"]
    headers += ["consumer CPU%", "bench CPU%", "redis CPU%"]
    ratios = section["ratios"]
    return "\n".join(
        [
            f"1. Bus overhead, instant LLM ({traffic['hops_per_run']:g} hops per run: {chain})",
            table(headers, rows),
            "ratios (system_metric_vs_other: system ÷ other; no system named: the pipeline): "
            + ", ".join(f"{key} {_cell(value)}" for key, value in ratios.items()),
        ]
    )


def _bursts(points: Sequence[Mapping[str, Any]]) -> str:
    headers = ["workers", "submitted", "max in flight", "runs/s", "ideal", "efficiency"]
    headers += ["p50 ms", "p99 ms", "worker CPU%", "bench CPU%", "CPU ms/run", "CPU knee"]
    rows = [
        [
            p["workers"],
            p["submitted"],
            p["max_in_flight"],
            p["runs_per_s"],
            p["ideal_runs_per_s"],
            p["efficiency"],
            p["latency_ms"]["p50"],
            p["latency_ms"]["p99"],
            p["worker_cpu_percent"],
            p["cpu_percent"]["bench"],
            p["worker_cpu_ms_per_run"],
            p["cpu_knee_in_flight"],
        ]
        for p in points
    ]
    return table(headers, rows)


def _concurrency(section: Mapping[str, Any]) -> str:
    steady = section["sustained"]
    return "\n".join(
        [
            f"2. Concurrency, one worker, {section['llm_delay_ms']:g} ms LLM "
            f"({section['llm_calls_per_run']:g} calls per run, "
            f"time per run at 1 in flight {section['time_per_run_s']:.3f} s, "
            f"LLM floor {section['llm_floor_s']:.3f} s; ideal = submitted ÷ time per run; "
            "CPU knee = runs in flight one core can serve)",
            _bursts(section["points"]),
            f"sustained: {steady['in_flight']:,} kept in flight for {steady['submitted']:,} runs: "
            f"{_cell(steady['steady_runs_per_s'])} runs/s in steady state "
            f"(in flight ÷ mean latency of {steady['steady_runs_counted']:,} runs after the "
            f"first wave) vs ideal "
            f"{_cell(steady['ideal_runs_per_s'])} → efficiency {_cell(steady['efficiency'])}, "
            f"max in flight {steady['max_in_flight']:,}, worker CPU "
            f"{_cell(steady['worker_cpu_percent'])} % ({_cell(steady['worker_cpu_ms_per_run'])} "
            f"ms per run), p50 {_cell(steady['latency_ms']['p50'])} ms",
        ]
    )


def _scaleout(section: Mapping[str, Any]) -> str:
    return "\n".join(
        [
            f"3. Scale-out, {section['submitted']:,} runs at once "
            f"(2 workers ÷ 1: {_cell(section['speedup_2_vs_1'])})",
            _bursts(section["points"]),
        ]
    )


def _memory(section: Mapping[str, Any]) -> str:
    return (
        f"4. Memory: peak RSS {section['peak_rss_kb_1_in_flight']:,} KB with 1 run in flight, "
        f"{section['peak_rss_kb_n_in_flight']:,} KB with {section['n_max_in_flight']:,} "
        f"→ {_cell(section['kb_per_in_flight_run'])} KB per in-flight run"
    )


def _cluster(section: Mapping[str, Any]) -> str:
    masters = section["masters"]
    headers = ["shards", "runs", "runs/s", "p50 ms", "p99 ms", "worker CPU%", "bench CPU%"]
    headers += ["redis CPU%", "total CPU%", "worker CPU ms/run", "commands/run"]
    headers += ["share of commands", "CPU% by master"]
    rows = [
        [
            p["shards"],
            p["runs"],
            p["runs_per_s"],
            p["latency_ms"]["p50"],
            p["latency_ms"]["p99"],
            p["cpu_percent"]["consumer"],
            p["cpu_percent"]["bench"],
            p["cpu_percent"]["redis"],
            p["cpu_percent_total"],
            p["worker_cpu_ms_per_run"],
            p["commands_per_run"],
            " / ".join(f"{m['share']:.0%}" for m in p["masters"]),
            " / ".join(f"{m['cpu_percent']:.0f}" for m in p["masters"]),
        ]
        for p in section["points"]
    ]
    return "\n".join(
        [
            f"5. Redis Cluster, {masters} masters (Redis {section['redis_version']}), "
            f"{section['workers']} workers, {section['in_flight']} runs in flight, instant LLM "
            f"({masters} shards ÷ 1: {_cell(section[f'speedup_{masters}_shards_vs_1'])}; "
            "CPU% is of one core)",
            table(headers, rows),
            _submit_line(section["submit_us"]),
        ]
    )


def _submit_line(cost: Mapping[str, Any]) -> str:
    return (
        f"AEON_WAIT_REPLICAS=1 (a replica per master): submit p50 {cost['p50_with_wait_1']} µs "
        f"against {cost['p50_without_wait']} µs without ({_cell(cost['ratio'])}×, "
        f"{cost['submits']} submits each)"
    )


def _telemetry(section: Mapping[str, Any]) -> str:
    headers = ["configuration", "runs", "in flight", "runs/s", "p50 ms", "worker CPU%"]
    headers += ["CPU µs/hop", "÷ off"]
    ratios = section["ratios"]
    rows = [
        [
            r["configuration"],
            r["runs"],
            r["in_flight"],
            r["runs_per_s"],
            r["latency_ms"]["p50"],
            r["cpu_percent"]["consumer"],
            r["cpu_us_per_hop"],
            ratios.get(f"{r['configuration']}_cpu_per_hop_vs_off", 1.0),
        ]
        for r in section["results"]
    ]
    return "\n".join(
        [
            "6. Telemetry: the pipeline, instant LLM, with metrics served and traces exported "
            "over OTLP (to a local sink), against neither",
            table(headers, rows),
        ]
    )


def _sse(section: Mapping[str, Any]) -> str:
    headers = ["slow readers", "streams", "most open", "events", "missed", "repeated"]
    headers += ["out of order"]
    headers += ["seconds", "answer late p50 ms", "p99 ms", "max ms", "serve CPU%"]
    rows = [
        [
            r["slow_readers"],
            r["streams"],
            r["peak_open_streams"],
            r["events_delivered"],
            r["missed"],
            r["repeated"],
            r["out_of_order"],
            r["seconds"],
            r["answer_lateness_ms"]["p50"],
            r["answer_lateness_ms"]["p99"],
            r["answer_lateness_ms"]["max"],
            r["server_cpu_percent"],
        ]
        for r in section["rounds"]
    ]
    slowed = section["rounds"][-1]
    compared = [
        [label, *(slowed[key][q] for q in ("p50", "p99", "max"))]
        for label, key in (
            ("runs with slow readers", "answer_lateness_ms_runs_with_slow_readers"),
            ("runs without", "answer_lateness_ms_runs_without"),
        )
        if key in slowed
    ]
    return "\n".join(
        [
            f"7. Event streams: one `aeon serve`, {section['readers']:,} readers on "
            f"{section['runs']} runs ({section['llm_delay_ms']:g} ms LLM), then with slow "
            f"readers on half the runs; peak RSS {section['server_peak_rss_kb']:,} KB",
            table(headers, rows),
            "",
            "The other readers' answer lateness in the round with slow readers (ms):",
            table(["", "p50", "p99", "max"], compared),
        ]
    )


def _events(section: Mapping[str, Any]) -> str:
    long = section["long_output"]
    headers = ["run", "passes", "status", "events", "total B", "largest", "largest non-answer"]
    rows = [
        [
            name,
            run["passes"],
            run["status"],
            len(run["hops"]),
            run["total_bytes"],
            _event(run["largest"]),
            _event(run["largest_non_answer"]),
        ]
        for name, run in section["runs"].items()
    ]
    return "\n".join(
        [
            "8. Event sizes: one run of each shape on a fresh worker, scripted LLM "
            f"(long_output: {long['steps']} steps × {long['chars_per_step']:,} chars); "
            "body bytes of each event, in order",
            table(headers, rows),
            *(
                f"{name}: " + " → ".join(_event(hop) for hop in run["hops"])
                for name, run in section["runs"].items()
            ),
            "growth, 1 pass to 3 (each type's largest later size ÷ its first): "
            + ", ".join(
                f"{kind} {_cell(value)}"
                for kind, value in section["growth_by_type_1_to_3_passes"].items()
            ),
            "largest non-answer event, 3 passes ÷ 1 (any types): "
            f"{_cell(section['largest_non_answer_3_passes_vs_1'])}",
        ]
    )


def _event(hop: Mapping[str, Any]) -> str:
    return f"{hop['type']} {hop['body_bytes']:,} B"


def _retention(section: Mapping[str, Any]) -> str:
    kinds = section["at_the_end_by_kind_kib_per_run"]
    held = section["held_by_kind_kib_per_run"]
    return (
        f"Retention: Redis KiB per answered run ({section['runs']} runs, default settings)\n"
        + table(
            ["kind of key", "at the end", "10 min after"],
            [[kind, kinds[kind], held.get(kind, 0.0)] for kind in sorted(kinds)]
            + [
                [
                    "total",
                    section["kib_per_run_at_the_end"],
                    section["kib_per_run_held_after_10_min"],
                ]
            ],
        )
        + f"\nbefore (issue 27's soak): {section['before_kib_per_run_held_after_10_min']} KiB"
        " a run held 10 min after"
    )


def _costs(section: Mapping[str, Any]) -> str:
    keys = ("status", "calls", "prompt_tokens", "completion_tokens", "wall_s", "wall_vs_calls")
    rows = [[n, *(r[key] for key in keys)] for n, r in enumerate(section["runs"], start=1)]
    headers = ["run", "status", "calls", "prompt tok", "completion tok", "wall s", "wall ÷ calls"]
    before = section["before"]
    checks = section["cancel_checks"]
    return (
        f"Costs: the standard request, 1 in flight, {section['llm_delay_ms']} ms a call\n"
        + table(headers, rows)
        + f"\nbefore: wall ÷ calls {before['wall_vs_calls']}, "
        f"{before['prompt_tokens_per_run']:,} prompt tokens a run"
        + f"\ncancel checks: {checks['per_run']} a run (EXISTS), {checks['cpu_us_each']} µs of "
        f"CPU and {checks['wall_us_each']} µs each: {checks['cpu_ms_per_run']} ms of CPU and "
        f"{checks['wall_ms_per_run']} ms of waiting a run"
    )


def _tools(section: Mapping[str, Any]) -> str:
    keys = ("wall_ms", "worker_cpu_ms")
    rows = [[kind, *(section[kind][key] for key in keys)] for kind in ("reasoning", "tool")]
    return (
        f"Tools: one step a tool call or an LLM call (instant, offline), {section['runs']} runs "
        "each, 1 in flight\n"
        + table(["steps", "wall ms (median)", "worker CPU ms a run"], rows)
        + f"\na tool call adds {section['tool_call_adds_ms']} ms to its hop, "
        f"{section['tool_call_adds_cpu_ms']} ms of the worker's CPU"
    )


def _quality(section: Mapping[str, Any]) -> str:
    """Plain calls, best of k and Aeon, the rules as checks and in words: `aeon eval`'s tables."""
    from aeonloop.gateway.quality.report import render

    return render(section)


def _targets(rows: Sequence[Mapping[str, Any]]) -> str:
    """Each target: its goal and verdict, and where a goal is far, issue 39's step toward it
    and its verdict ("-": no step)."""
    verdict = {True: "PASS", False: "MISS", None: "not run"}
    return "Targets\n" + table(
        ["target", "goal", "before", "issue 33", "measured", "verdict", "step", "step verdict"],
        [
            [
                r["target"],
                r["goal"],
                r["before"],
                r["issue_33"],
                r["value"],
                verdict[r["met"]],
                r["step_goal"],
                verdict[r["step_met"]] if r["step_goal"] != "-" else "-",
            ]
            for r in rows
        ],
    )


_SECTIONS = {
    "overhead": _overhead,
    "concurrency": _concurrency,
    "scaleout": _scaleout,
    "memory": _memory,
    "cluster": _cluster,
    "telemetry": _telemetry,
    "sse": _sse,
    "events": _events,
    "retention": _retention,
    "costs": _costs,
    "tools": _tools,
    "quality": _quality,
}
