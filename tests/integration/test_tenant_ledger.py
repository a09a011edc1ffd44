"""The tenants' quotas and cost ledger on a real Redis (aeonloop.tenants.ledger): a slot is
taken and refused past AEON_TENANT_MAX_RUNS, freed once when the answer is settled (however
many gateways settle it), given back when its lease runs out; the tokens of a day are held to
AEON_TENANT_DAILY_TOKENS; a run's cost is its tokens times the price table, and a tenant's
totals are the sum of its runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from aeonloop.bus.connection import RedisClient, connect
from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.contracts import Usage
from aeonloop.settings import Price, TenantSettings
from aeonloop.tenants.ledger import Ledger, QuotaExceeded, charge, today

MODEL = "m1"
PRICE = Price(input=2.5, cached_input=1.25, output=10.0)


@pytest.fixture(params=["server", "cluster"])
async def redis(
    request: pytest.FixtureRequest, settings: BusSettings
) -> AsyncIterator[RedisClient]:
    """A Redis, and a Redis Cluster: each tenant's keys share its hash tag, so both scripts
    run on one node of a cluster."""
    if request.param == "cluster":
        settings = settings.with_(redis_url=request.getfixturevalue("redis_cluster").url)
    client = await connect(settings)
    yield client
    await client.aclose()


def _ledger(redis: RedisClient, prefix: str, **quotas: int) -> Ledger:
    settings = TenantSettings(prices={MODEL: PRICE}, **quotas)
    return Ledger(redis, Keys(prefix), settings, MODEL)


def _due(seconds: float = 60) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_runs_in_flight_are_held_to_the_quota_per_tenant(
    redis: RedisClient, redis_prefix: str
) -> None:
    ledger = _ledger(redis, redis_prefix, tenant_max_runs=2)
    await ledger.admit("alice", "r1", _due())
    await ledger.admit("alice", "r2", _due())
    with pytest.raises(QuotaExceeded) as refused:
        await ledger.admit("alice", "r3", _due())
    assert refused.value.quota == "AEON_TENANT_MAX_RUNS"
    assert "tenant alice has 2 runs in flight" in refused.value.reason
    await ledger.admit("bob", "r4", _due())  # another tenant is unaffected
    # A second gateway settling the same answer charges nothing more, and frees no other slot.
    other = _ledger(redis, redis_prefix, tenant_max_runs=2)
    usage = Usage(prompt_tokens=100, completion_tokens=20)
    assert await ledger.settle("r1", usage) is not None
    assert await other.settle("r1", usage) is None
    await ledger.admit("alice", "r5", _due())
    with pytest.raises(QuotaExceeded):
        await ledger.admit("alice", "r6", _due())
    totals = await ledger.totals(today())
    assert [(t.tenant, t.models[0].runs) for t in totals.tenants] == [("alice", 1)]


async def test_a_slot_whose_lease_ran_out_comes_back(redis: RedisClient, redis_prefix: str) -> None:
    """A gateway killed with a run in flight never settles it: the slot is free once the run's
    answer was due."""
    ledger = _ledger(redis, redis_prefix, tenant_max_runs=1)
    await ledger.admit("alice", "lost", _due(0.3))
    with pytest.raises(QuotaExceeded):
        await ledger.admit("alice", "next", _due())
    await asyncio.sleep(0.4)
    await ledger.admit("alice", "next", _due())


async def test_a_tenant_past_its_daily_tokens_is_refused_until_midnight(
    redis: RedisClient, redis_prefix: str
) -> None:
    ledger = _ledger(redis, redis_prefix, tenant_daily_tokens=150)
    await ledger.admit("alice", "r1", _due())
    await ledger.admit("bob", "r2", _due())
    await ledger.settle("r1", Usage(prompt_tokens=120, completion_tokens=40))
    with pytest.raises(QuotaExceeded) as refused:
        await ledger.admit("alice", "r3", _due())
    assert refused.value.quota == "AEON_TENANT_DAILY_TOKENS"
    assert "tenant alice has spent 160 tokens today" in refused.value.reason
    assert 0 < refused.value.retry_after_s <= 86_400
    await ledger.admit("bob", "r4", _due())


async def test_the_cost_of_a_run_is_its_tokens_times_the_price_and_totals_add_up(
    redis: RedisClient, redis_prefix: str
) -> None:
    ledger = _ledger(redis, redis_prefix)
    runs = {
        "a1": ("alice", Usage(prompt_tokens=1_000, completion_tokens=200)),
        "a2": ("alice", Usage(prompt_tokens=3_000, completion_tokens=700)),
        "b1": ("bob", Usage(prompt_tokens=500, completion_tokens=50)),
    }
    charged = {}
    for run, (tenant, usage) in runs.items():
        await ledger.admit(tenant, run, _due())
        charged[run] = await ledger.settle(run, usage)
    a1 = charged["a1"]
    assert a1 is not None and a1.cost is not None
    assert a1.total_cost == pytest.approx((1_000 * 2.5 + 200 * 10.0) / 1e6)
    totals = await ledger.totals(today())
    assert [t.tenant for t in totals.tenants] == ["alice", "bob"]
    for tenant in totals.tenants:
        mine = [c for run, c in charged.items() if runs[run][0] == tenant.tenant and c]
        (row,) = tenant.models
        assert (row.model, row.runs) == (MODEL, len(mine))
        assert row.total_tokens == sum(sum(c.tokens.values()) for c in mine)
        assert row.total_cost == pytest.approx(sum(c.total_cost or 0 for c in mine))
    only_bob = await ledger.totals(today(), "bob")
    assert [t.tenant for t in only_bob.tenants] == ["bob"]


def test_cached_prompt_tokens_are_priced_at_the_cached_price() -> None:
    made = charge(Usage(prompt_tokens=1_000, completion_tokens=0, cached_tokens=400), PRICE)
    assert made.tokens == {"input": 600, "cached_input": 400, "output": 0}
    assert made.total_cost == pytest.approx((600 * 2.5 + 400 * 1.25) / 1e6)
    # No server reported its cache: every prompt token at the input price.
    unreported = charge(Usage(prompt_tokens=1_000, completion_tokens=0), PRICE)
    assert unreported.tokens == {"input": 1_000, "cached_input": 0, "output": 0}
    assert charge(Usage(prompt_tokens=10), None).cost is None
