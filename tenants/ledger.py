"""Quotas and the cost ledger of each tenant, kept in Redis so that every `aeon serve` of a
deployment holds a tenant to the same numbers.

A run is admitted (`Ledger.admit`) before it is published, by the correlation id its gateway
chose: one script drops the tenant's slots whose lease has run out, refuses the run past a
quota (runs in flight, tokens spent today, UTC), and else takes a slot, leased until the run's
answer is due (a server killed with slots held gives them back by then); the run's tenant is
noted beside it (bus.keys.Keys.tenant_of) for whoever reads its answer.

The run's slot is settled (`Ledger.settle`) when its answer is seen on the answers stream: one
script frees the slot and, only if it freed it, charges the run's tokens and their cost (the
price table, settings.TenantSettings) to the tenant's day. Every `aeon serve` reads every
answer, and the first to settle a run is the only one that charges it. Each tenant's keys
share its hash tag (bus.keys.Keys.tenant), so both scripts work on a Redis Cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys
from aeonloop.contracts import Usage
from aeonloop.exceptions import QuotaExceeded
from aeonloop.settings import Price, TenantSettings
from aeonloop.telemetry import metrics

#: The kinds of tokens priced apart, as the ledger, `GET /v1/usage` and the metrics name them.
KINDS = ("input", "cached_input", "output")
#: How long a day's totals are kept: long enough to read last month's.
KEEP_DAYS = 40
#: What a client is told to wait when all of its tenant's slots are taken: a slot frees when
#: a run is answered, which cannot be foreseen.
RUNS_RETRY_S = 2
_INFLIGHT = "in-flight"
_SEPARATOR = "|"

_ADMIT = """
local now, lease, member = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local max_runs, daily = tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if daily > 0 then
  local used = tonumber(redis.call('GET', KEYS[2]) or '0')
  if used >= daily then return {'daily_tokens', tostring(used)} end
end
if max_runs > 0 then
  local held = redis.call('ZCARD', KEYS[1])
  if held >= max_runs then return {'runs_in_flight', tostring(held)} end
end
redis.call('ZADD', KEYS[1], lease, member)
if redis.call('PTTL', KEYS[1]) < lease - now then redis.call('PEXPIRE', KEYS[1], lease - now) end
return {'ok', member}
"""

_SETTLE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local keep = tonumber(ARGV[2])
redis.call('INCRBY', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], keep)
for i = 4, #ARGV, 3 do
  if ARGV[i + 1] == 'int' then
    redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 2])
  else
    redis.call('HINCRBYFLOAT', KEYS[3], ARGV[i], ARGV[i + 2])
  end
end
redis.call('EXPIRE', KEYS[3], keep)
return 1
"""


@dataclass(frozen=True)
class Charge:
    """What one run costs: its tokens by kind, and their cost by kind (None: no price)."""

    tokens: dict[str, int]
    cost: dict[str, float] | None

    @property
    def total_cost(self) -> float | None:
        return None if self.cost is None else sum(self.cost.values())


def charge(usage: Usage, price: Price | None) -> Charge:
    """The charge of a run's `usage` at `price` (per million tokens): its prompt tokens the
    server took from its cache (`usage.cached_tokens`, of the prompt's; none where no server
    reported it) at the cached price, when the table has one, else at the input price."""
    cached = min(usage.cached_tokens or 0, usage.prompt_tokens)
    tokens = {
        "input": usage.prompt_tokens - cached,
        "cached_input": cached,
        "output": usage.completion_tokens,
    }
    if price is None:
        return Charge(tokens, None)
    cached_price = price.input if price.cached_input is None else price.cached_input
    per_million = {"input": price.input, "cached_input": cached_price, "output": price.output}
    cost = {kind: tokens[kind] * per_million[kind] / 1_000_000 for kind in KINDS}
    return Charge(tokens, cost)


def today() -> str:
    return datetime.now(UTC).date().isoformat()


def _seconds_to_midnight(now: datetime) -> int:
    tomorrow = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    return max(1, math.ceil((tomorrow - now).total_seconds()))


class Ledger:
    """The tenants' quotas and cost ledger on one Redis, under `keys`' prefix."""

    def __init__(self, redis: RedisClient, keys: Keys, settings: TenantSettings, model: str):
        self.redis = redis
        self.keys = keys
        self.settings = settings
        #: The model the deployment's runs call (AEON_LLM_MODEL), which their tokens are priced by.
        self.model = model
        self.prices = settings.price_table()
        self._admit = redis.register_script(_ADMIT)
        self._settle = redis.register_script(_SETTLE)

    async def admit(self, tenant: str, correlation_id: str, due_by: datetime) -> None:
        """Take a slot of `tenant` for run `correlation_id`, to be published now, whose answer is
        due by `due_by` (the slot's lease); QuotaExceeded past a quota. `release` gives it back
        if the run is not published after all."""
        now = datetime.now(UTC)
        day = now.date().isoformat()
        keys = [self.keys.tenant(tenant, _INFLIGHT), self.keys.tenant(tenant, f"tokens:{day}")]
        args = [
            _ms(now),
            _ms(due_by),
            correlation_id,
            self.settings.tenant_max_runs,
            self.settings.tenant_daily_tokens,
        ]
        verdict, detail = [_text(part) for part in await self._admit(keys, args)]
        if verdict == "ok":
            seconds = max(1, math.ceil((due_by - now).total_seconds()))
            await self.redis.set(self.keys.tenant_of(correlation_id), tenant, ex=seconds)
            return
        if verdict == "daily_tokens":
            quota = TenantSettings.variable("tenant_daily_tokens")
            raise QuotaExceeded(
                quota,
                f"tenant {tenant} has spent {detail} tokens today (UTC), its quota is "
                f"{self.settings.tenant_daily_tokens} ({quota}); it renews at midnight UTC",
                _seconds_to_midnight(now),
            )
        quota = TenantSettings.variable("tenant_max_runs")
        raise QuotaExceeded(
            quota,
            f"tenant {tenant} has {detail} runs in flight, its quota is "
            f"{self.settings.tenant_max_runs} ({quota}); try again once one is answered",
            RUNS_RETRY_S,
        )

    async def release(self, tenant: str, correlation_id: str) -> None:
        """Give back the slot of a run that was not published."""
        await self.redis.zrem(self.keys.tenant(tenant, _INFLIGHT), correlation_id)
        await self.redis.delete(self.keys.tenant_of(correlation_id))

    async def settle(self, correlation_id: str, usage: Usage) -> Charge | None:
        """Free the slot of run `correlation_id` and charge its `usage` to its tenant's day: the
        charge, or None if the run holds no slot (not admitted here, or settled already)."""
        bound = await self.redis.get(self.keys.tenant_of(correlation_id))
        if bound is None:
            return None
        tenant = _text(bound)
        day = today()
        made = charge(usage, self.prices.get(self.model))
        fields: list[Any] = []
        for kind in KINDS:
            fields += [self._field(kind, "tokens"), "int", made.tokens[kind]]
            if made.cost is not None:
                fields += [self._field(kind, "cost"), "float", repr(made.cost[kind])]
        fields += [self._field("runs", "count"), "int", 1]
        keys = [
            self.keys.tenant(tenant, _INFLIGHT),
            self.keys.tenant(tenant, f"tokens:{day}"),
            self.keys.tenant(tenant, f"usage:{day}"),
        ]
        total = sum(made.tokens.values())
        if not await self._settle(keys, [correlation_id, KEEP_DAYS * 86_400, total, *fields]):
            return None
        await self.redis.delete(self.keys.tenant_of(correlation_id))
        await self.redis.sadd(self.keys.usage_tenants(day), tenant)
        await self.redis.expire(self.keys.usage_tenants(day), KEEP_DAYS * 86_400)
        metrics.tenant_charge(self.model, tenant, made.tokens, made.cost)
        return made

    def _field(self, kind: str, what: str) -> str:
        return _SEPARATOR.join((self.model, kind, what))

    async def totals(self, day: str, tenant: str | None = None) -> UsageReport:
        """The totals of `day` (YYYY-MM-DD, UTC): every tenant's, or only `tenant`'s."""
        return await usage_report(self.redis, self.keys, day, tenant)


async def usage_report(
    redis: RedisClient, keys: Keys, day: str, tenant: str | None = None
) -> UsageReport:
    """The ledger's totals of `day` (YYYY-MM-DD, UTC): every tenant's, or only `tenant`'s."""
    if tenant is None:
        names = await redis.smembers(keys.usage_tenants(day))
        tenants = sorted(_text(name) for name in names)
    else:
        tenants = [tenant]
    rows = []
    for name in tenants:
        raw = await redis.hgetall(keys.tenant(name, f"usage:{day}"))
        if raw:
            rows.append(TenantUsage(tenant=name, models=_by_model(raw)))
    return UsageReport(day=day, tenants=rows)


class ModelUsage(BaseModel):
    """One tenant's runs of one model, answered in one day."""

    model: str
    runs: int = 0
    #: Tokens by kind: input (prompt tokens not from the cache), cached_input, output.
    tokens: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    total_tokens: int = 0
    #: Cost by kind, in the price table's currency; None: the model has no price.
    cost: dict[str, float] | None = None
    total_cost: float | None = None


class TenantUsage(BaseModel):
    tenant: str
    models: list[ModelUsage]


class UsageReport(BaseModel):
    """What `GET /v1/usage` and `aeon usage` show: a day's totals, per tenant and model."""

    day: str
    tenants: list[TenantUsage]


def _by_model(raw: dict[Any, Any]) -> list[ModelUsage]:
    models: dict[str, ModelUsage] = {}
    for field, value in raw.items():
        name, kind, what = _text(field).rsplit(_SEPARATOR, 2)
        row = models.setdefault(name, ModelUsage(model=name))
        if what == "count":
            row.runs = int(value)
        elif what == "tokens":
            row.tokens[kind] = int(value)
        else:
            row.cost = row.cost or dict.fromkeys(KINDS, 0.0)
            row.cost[kind] = float(value)
    for row in models.values():
        row.total_tokens = sum(row.tokens.values())
        row.total_cost = None if row.cost is None else sum(row.cost.values())
    return [models[name] for name in sorted(models)]


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
