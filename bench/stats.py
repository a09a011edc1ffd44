"""Latency summaries: the percentiles the report quotes, computed the same way everywhere."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) by nearest rank: an observed value, never an interpolation."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean and max in milliseconds, rounded for the report."""
    if not seconds:
        return {"p50": math.nan, "p99": math.nan, "mean": math.nan, "max": math.nan}
    return {
        "p50": round(percentile(seconds, 50) * 1000, 3),
        "p99": round(percentile(seconds, 99) * 1000, 3),
        "mean": round(sum(seconds) / len(seconds) * 1000, 3),
        "max": round(max(seconds) * 1000, 3),
    }


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN rather than an exception when there is nothing to divide by."""
    return numerator / denominator if denominator else math.nan
