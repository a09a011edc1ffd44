"""`aeon usage [--day YYYY-MM-DD] [--tenant NAME] [--json]`: the cost ledger's totals of a day
(aeonloop.tenants), per tenant and model, read from the deployment's Redis; reads only."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable
from typing import Any

from aeonloop.bus.connection import connect
from aeonloop.bus.keys import Keys
from aeonloop.exceptions import BadInput
from aeonloop.settings import TENANT_NAME
from aeonloop.tenants.ledger import UsageReport, today, usage_report


def add_commands(commands: argparse._SubParsersAction, command: Callable[..., Any]) -> None:
    p = command(
        commands,
        "usage",
        show_usage,
        "show a day's tokens and cost per tenant and model (the cost ledger)",
        "WARNING",
    )
    p.add_argument("--day", type=_day, default=None, help="YYYY-MM-DD, UTC (default: today)")
    p.add_argument("--tenant", type=_tenant, default=None, help="only this tenant's totals")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _day(value: str) -> str:
    try:
        return datetime.date.fromisoformat(value).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a day: write YYYY-MM-DD") from None


def _tenant(value: str) -> str:
    if not TENANT_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value[:70]!r} is not a tenant's name: letters, digits, _ . - only, at most 64"
        )
    return value


async def show_usage(args: argparse.Namespace) -> int:
    settings = args.settings
    if not settings.redis_url:
        raise BadInput("`aeon usage` needs AEON_REDIS_URL: the Redis of the deployment")
    redis = await connect(settings)
    try:
        report = await usage_report(
            redis, Keys(settings.prefix, settings.shards), args.day or today(), args.tenant
        )
    finally:
        await redis.aclose()
    print(report.model_dump_json(indent=2) if args.json else render(report))
    return 0


_HEADINGS = ("tenant", "model", "runs", "input", "cached", "output", "tokens", "cost")


def render(report: UsageReport) -> str:
    """The report as a table, a row per tenant and model, and the day's total under it; a
    cost the price table does not give is `-`."""
    rows = [
        (
            tenant.tenant,
            row.model,
            str(row.runs),
            str(row.tokens["input"]),
            str(row.tokens["cached_input"]),
            str(row.tokens["output"]),
            str(row.total_tokens),
            _money(row.total_cost),
        )
        for tenant in report.tenants
        for row in tenant.models
    ]
    if not rows:
        return f"usage of {report.day} (UTC): no run answered"
    every = [row for tenant in report.tenants for row in tenant.models]
    costs = [row.total_cost for row in every if row.total_cost is not None]
    total = (
        "total",
        "",
        str(sum(row.runs for row in every)),
        str(sum(row.tokens["input"] for row in every)),
        str(sum(row.tokens["cached_input"] for row in every)),
        str(sum(row.tokens["output"] for row in every)),
        str(sum(row.total_tokens for row in every)),
        _money(sum(costs) if costs else None),
    )
    table = [_HEADINGS, *rows, total]
    widths = [max(len(line[i]) for line in table) for i in range(len(_HEADINGS))]
    lines = [
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in table
    ]
    return "\n".join([f"usage of {report.day} (UTC)", *lines])


def _money(amount: float | None) -> str:
    return "-" if amount is None else f"{amount:.6f}"
