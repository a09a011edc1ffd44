"""A rate limit per LLM endpoint and model, shared by every worker of a deployment (issue 42).

A provider allows so many requests and tokens a minute to a key, whatever number of workers
send them. Each call's own retries of its 429s (llm.openai_retry) do not share that: four
workers against 60 requests a minute send as fast as they can, then all back off and come back
at once. So, where a limit is set (AEON_LLM_REQUESTS_PER_MINUTE, AEON_LLM_TOKENS_PER_MINUTE,
AEON_LLM_MAX_IN_FLIGHT), every attempt first takes a slot:

- requests a minute and tokens a minute over a sliding minute: a request's tokens are its
  prompt's estimate plus its reply budget when it starts, settled to what the server counted
  when it ends; a request counts from when it starts until a minute after it ends (the
  provider counted it somewhere between), so the provider's own count stays under the limit
  whatever the delays between a worker and it;
- calls in flight across the deployment, each slot a lease (AEON_LLM_LIMIT_LEASE_S, renewed
  while the call runs), so a killed worker's slots come back when their lease ends;
- a 429's `Retry-After` (or `retry-after-ms`) pauses the endpoint for every worker until then,
  set once: a later 429 asking for less changes nothing.

The state is one Redis script's (`RedisLimit`, atomic, its keys under one hash tag per endpoint
and model: bus.keys.Keys.llm_limit, so it runs on a cluster), or, for what runs without a bus,
the same arithmetic in this process (`LocalLimit`). Time is Redis's own (TIME), so workers'
clocks do not matter.

Waiting for a slot counts against the request's deadline (past it, the call ends as an outage
does: LLMUnreachable, the run `deadline_exceeded`), never fails a run by itself, and is said
once per wait ("waiting for the LLM's rate limit"). With no limit set, no slot is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from aeonloop.bus.redis_errors import FAILURES, retry_later
from aeonloop.exceptions import LLMUnreachable

log = logging.getLogger("aeon.llm")

#: The longest single wait before asking again: a slot freed early (a call in flight ended, a
#: lease ran out) is taken within this.
POLL_MAX_S = 1.0


@dataclass(frozen=True)
class Limits:
    """What one endpoint and model allows a deployment; None: no limit of that kind."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    in_flight: int | None = None
    #: Seconds a slot in flight is held without renewal: a killed worker's come back after it.
    lease_s: float = 60.0
    #: Seconds the requests and tokens limits count over: a minute, as providers publish them.
    window_s: float = 60.0

    @property
    def enabled(self) -> bool:
        return any(
            value is not None
            for value in (self.requests_per_minute, self.tokens_per_minute, self.in_flight)
        )


class SharedLimit(Protocol):
    """The state of one endpoint's limit: in Redis (RedisLimit) or in this process."""

    async def take(self, slot: str, tokens: int) -> float:
        """Take `slot` for a request of `tokens`; 0 when taken, else seconds to wait first."""
        ...

    async def settle(self, slot: str, tokens: int) -> None:
        """The request's tokens, as the server counted them."""
        ...

    async def renew(self, slot: str) -> None:
        """Keep the slot in flight for another lease."""
        ...

    async def release(self, slot: str) -> None:
        """The request ended: its slot in flight is free, and its request and tokens count
        for the window from now (the provider counted it between its start and its end, so
        counting from the end keeps the provider's own count under the limit whatever the
        network's delays)."""
        ...

    async def pause(self, seconds: float) -> bool:
        """Pause the endpoint for `seconds`; True when this set the pause (not one already
        reaching as far)."""
        ...


#: The limit's one script. KEYS: requests (zset slot -> ms), tokens (hash slot -> tokens),
#: in flight (zset slot -> lease end ms), pause (string: ms). ARGV: op, slot, tokens,
#: requests a window, tokens a window, in flight (0: no limit of that kind), lease ms, window ms.
LIMIT_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, slot = ARGV[1], ARGV[2]
local tokens = tonumber(ARGV[3])
local rpm, tpm, most, lease = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
  tonumber(ARGV[7])
local window = tonumber(ARGV[8])
if op == 'settle' then
  if redis.call('HEXISTS', KEYS[2], slot) == 1 then redis.call('HSET', KEYS[2], slot, tokens) end
  return 0
elseif op == 'renew' then
  if redis.call('ZSCORE', KEYS[3], slot) then redis.call('ZADD', KEYS[3], now + lease, slot) end
  redis.call('PEXPIRE', KEYS[3], lease + window)
  return 0
elseif op == 'release' then
  redis.call('ZREM', KEYS[3], slot)
  if redis.call('ZSCORE', KEYS[1], slot) then redis.call('ZADD', KEYS[1], now, slot) end
  return 0
elseif op == 'pause' then
  local until_ms = now + tokens
  local was = tonumber(redis.call('GET', KEYS[4]) or '0')
  if until_ms <= was then return 0 end
  redis.call('SET', KEYS[4], until_ms, 'PX', tokens + 1000)
  return 1
end
local paused = tonumber(redis.call('GET', KEYS[4]) or '0')
if paused > now then return paused - now end
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window)
if #old > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  redis.call('HDEL', KEYS[2], unpack(old))
end
local wait = 0
if rpm > 0 and redis.call('ZCARD', KEYS[1]) >= rpm then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  wait = math.max(wait, tonumber(first[2]) + window - now)
end
if tpm > 0 then
  local used = 0
  for _, n in ipairs(redis.call('HVALS', KEYS[2])) do used = used + tonumber(n) end
  if used > 0 and used + tokens > tpm then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    wait = math.max(wait, tonumber(first[2]) + window - now)
  end
end
if most > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= most then
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    wait = math.max(wait, math.min(tonumber(first[2]) - now, 1000))
  end
end
if wait > 0 then return math.max(wait, 1) end
redis.call('ZADD', KEYS[1], now, slot)
redis.call('HSET', KEYS[2], slot, tokens)
redis.call('PEXPIRE', KEYS[1], window * 2)
redis.call('PEXPIRE', KEYS[2], window * 2)
if most > 0 then
  redis.call('ZADD', KEYS[3], now + lease, slot)
  redis.call('PEXPIRE', KEYS[3], lease + window)
end
return 0
"""


class RedisLimit:
    """The limit of one endpoint and model, shared through Redis by every worker."""

    def __init__(self, redis: Any, keys: list[str], limits: Limits) -> None:
        self._redis = redis
        self._keys = keys
        self._limits = limits

    async def _run(self, op: str, slot: str = "", tokens: int = 0) -> int:
        limits = self._limits
        args = [
            op,
            slot,
            tokens,
            limits.requests_per_minute or 0,
            limits.tokens_per_minute or 0,
            limits.in_flight or 0,
            int(limits.lease_s * 1000),
            int(limits.window_s * 1000),
        ]
        return int(await self._redis.eval(LIMIT_SCRIPT, len(self._keys), *self._keys, *args))

    async def take(self, slot: str, tokens: int) -> float:
        return await self._run("take", slot, tokens) / 1000

    async def settle(self, slot: str, tokens: int) -> None:
        await self._run("settle", slot, tokens)

    async def renew(self, slot: str) -> None:
        await self._run("renew", slot)

    async def release(self, slot: str) -> None:
        await self._run("release", slot)

    async def pause(self, seconds: float) -> bool:
        return bool(await self._run("pause", tokens=int(seconds * 1000)))


@dataclass
class LocalLimit:
    """The same limit kept in this process: for what runs without a bus."""

    limits: Limits
    _requests: dict[str, float] = field(default_factory=dict)
    _tokens: dict[str, int] = field(default_factory=dict)
    _flight: dict[str, float] = field(default_factory=dict)
    _paused_until: float = 0.0

    async def take(self, slot: str, tokens: int) -> float:
        now, limits = time.monotonic(), self.limits
        window = limits.window_s
        if self._paused_until > now:
            return self._paused_until - now
        for old in [s for s, at in self._requests.items() if at <= now - window]:
            del self._requests[old]
            self._tokens.pop(old, None)
        first = min(self._requests.values(), default=now) + window - now
        wait = 0.0
        if limits.requests_per_minute and len(self._requests) >= limits.requests_per_minute:
            wait = max(wait, first)
        used = sum(self._tokens.values())
        if limits.tokens_per_minute and used and used + tokens > limits.tokens_per_minute:
            wait = max(wait, first)
        if limits.in_flight:
            self._flight = {s: end for s, end in self._flight.items() if end > now}
            if len(self._flight) >= limits.in_flight:
                wait = max(wait, min(min(self._flight.values()) - now, POLL_MAX_S))
        if wait > 0:
            return wait
        self._requests[slot], self._tokens[slot] = now, tokens
        if limits.in_flight:
            self._flight[slot] = now + limits.lease_s
        return 0.0

    async def settle(self, slot: str, tokens: int) -> None:
        if slot in self._tokens:
            self._tokens[slot] = tokens

    async def renew(self, slot: str) -> None:
        if slot in self._flight:
            self._flight[slot] = time.monotonic() + self.limits.lease_s

    async def release(self, slot: str) -> None:
        self._flight.pop(slot, None)
        if slot in self._requests:
            self._requests[slot] = time.monotonic()

    async def pause(self, seconds: float) -> bool:
        until = time.monotonic() + seconds
        if until <= self._paused_until:
            return False
        self._paused_until = until
        return True


class Slot:
    """A request's place in the limit: settled with what the server counted."""

    def __init__(self, shared: SharedLimit, name: str) -> None:
        self._shared = shared
        self.name = name

    async def settle(self, tokens: int) -> None:
        """A settle Redis does not take leaves the estimate counted: the limit errs low."""
        with contextlib.suppress(*FAILURES):
            await self._shared.settle(self.name, tokens)


class RateLimiter:
    """Takes a slot of the shared limit before each attempt at the endpoint."""

    def __init__(self, shared: SharedLimit, limits: Limits, where: str) -> None:
        self.shared = shared
        self.limits = limits
        self.where = where

    @contextlib.asynccontextmanager
    async def slot(self, tokens: int, deadline: datetime | None) -> AsyncIterator[Slot]:
        """A slot for a request of about `tokens`, waited for within `deadline`; held (its
        lease renewed) while the block runs, and released at its end."""
        name = uuid.uuid4().hex
        said = False
        while (wait := await self._take(name, tokens)) > 0:
            left = None if deadline is None else (deadline - datetime.now(UTC)).total_seconds()
            if left is not None and left <= 0:
                raise LLMUnreachable(
                    f"the request's deadline passed while waiting for the LLM's rate limit at "
                    f"{self.where}"
                )
            if not said:
                said = True
                log.info("waiting for the LLM's rate limit at %s (%.1f s)", self.where, wait)
            await asyncio.sleep(min(wait, POLL_MAX_S, *(() if left is None else (left,))))
        renewing = (
            asyncio.create_task(self._renew(name), name="llm-limit-lease")
            if self.limits.in_flight
            else None
        )
        try:
            yield Slot(self.shared, name)
        finally:
            if renewing is not None:
                renewing.cancel()
            with contextlib.suppress(*FAILURES):  # a lost release comes back with its lease
                await self.shared.release(name)

    async def _take(self, name: str, tokens: int) -> float:
        """`SharedLimit.take`; while Redis is away (a restart, a failover), a wait: the call
        waits for the limit it cannot read, within its deadline, as for a full one."""
        try:
            return await self.shared.take(name, tokens)
        except FAILURES as error:
            if not retry_later(error):
                raise
            log.debug("the LLM's rate limit could not be read (%s); waiting", type(error).__name__)
            return POLL_MAX_S

    async def _renew(self, name: str) -> None:
        while True:
            await asyncio.sleep(self.limits.lease_s / 3)
            with contextlib.suppress(*FAILURES):
                await self.shared.renew(name)

    async def pause(self, seconds: float) -> None:
        """A 429 asked every caller to wait `seconds`: the endpoint pauses for every worker,
        said by the worker that set it."""
        set_it = False
        with contextlib.suppress(*FAILURES):  # unset, each call still waits what it was asked
            set_it = await self.shared.pause(seconds)
        if set_it:
            log.warning(
                "LLM server %s asked to wait %.1f s (Retry-After): every worker waits",
                self.where,
                seconds,
            )
