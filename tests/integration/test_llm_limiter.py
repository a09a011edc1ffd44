"""The LLM rate limit every worker shares (llm.limiter): in Redis, and the same in process."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
from openai_fake import serve
from redis.asyncio import Redis

from aeonloop.bus.keys import Keys
from aeonloop.llm.base import LLMCall
from aeonloop.llm.factory import share_limit
from aeonloop.llm.limiter import Limits, LocalLimit, RateLimiter, RedisLimit, SharedLimit
from aeonloop.llm.openai_adapter import OpenAIAdapter
from aeonloop.prompts.registry import PromptId, ReasoningStepInput
from aeonloop.prompts.unified import UnifiedPrompt


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def shared(redis: Redis, redis_prefix: str) -> Callable[[Limits], SharedLimit]:
    """`shared(limits)`: the limit of one endpoint in Redis, as every worker would see it."""
    keys = Keys(redis_prefix).llm_limit("http://provider/v1", "m")
    return lambda limits: RedisLimit(redis, keys, limits)


@pytest.fixture(params=["redis", "in-process"])
def kept(request: pytest.FixtureRequest, shared) -> Callable[[Limits], SharedLimit]:
    return shared if request.param == "redis" else LocalLimit


async def test_requests_past_the_limit_wait_for_the_window(kept) -> None:
    limit = kept(Limits(requests_per_minute=3, window_s=1.0))

    taken = [await limit.take(f"s{i}", 10) for i in range(3)]
    wait = await limit.take("s3", 10)

    assert taken == [0, 0, 0]
    assert 0.5 < wait <= 1.0
    await asyncio.sleep(wait + 0.05)
    assert await limit.take("s3", 10) == 0


async def test_tokens_are_estimated_then_settled(kept) -> None:
    limit = kept(Limits(tokens_per_minute=100, window_s=5.0))

    assert await limit.take("a", 90) == 0
    assert await limit.take("b", 20) > 0  # 90 + 20 estimated: over
    await limit.settle("a", 30)  # the server counted 30
    assert await limit.take("b", 20) == 0


async def test_a_killed_worker_s_slot_in_flight_comes_back_with_its_lease(kept) -> None:
    limit = kept(Limits(in_flight=1, lease_s=0.4))

    assert await limit.take("held-by-a-killed-worker", 1) == 0  # never released
    assert await limit.take("next", 1) > 0
    await asyncio.sleep(0.45)
    assert await limit.take("next", 1) == 0
    await limit.release("next")
    assert await limit.take("after", 1) == 0


async def test_a_pause_is_set_once(kept) -> None:
    limit = kept(Limits(requests_per_minute=100))

    assert await limit.pause(1.0) is True
    assert await limit.pause(0.5) is False  # reaches no further: not said again
    assert 0.5 < await limit.take("s", 1) <= 1.0


async def test_the_limit_s_keys_share_one_hash_tag() -> None:
    keys = Keys("p").llm_limit("http://provider/v1", "m")
    tags = {key[key.index("{") : key.index("}") + 1] for key in keys}
    assert len(keys) == 4 and len(tags) == 1
    other = Keys("p").llm_limit("http://provider/v1", "other")[0]
    assert other[other.index("{") : other.index("}") + 1] not in tags


async def test_the_limit_runs_on_a_cluster(redis_cluster, redis_prefix: str) -> None:
    """One script on keys of one hash tag: a cluster takes it as one slot's."""
    from aeonloop.bus.connection import connect
    from aeonloop.bus.settings import BusSettings

    client = await connect(BusSettings(redis_url=redis_cluster.url))
    try:
        keys = Keys(redis_prefix).llm_limit("http://provider/v1", "m")
        limit = RedisLimit(client, keys, Limits(requests_per_minute=2, in_flight=5))
        assert [await limit.take(f"s{i}", 1) for i in range(2)] == [0, 0]
        assert await limit.take("s2", 1) > 0
        await limit.release("s0")
        assert await limit.pause(0.5) is True
    finally:
        await client.aclose()


async def test_a_429_pauses_every_worker_once(redis: Redis, redis_prefix: str, caplog) -> None:
    """Two adapters (two workers) on one limit: the 429 one of them gets, asking for 1 s, holds
    the other's next call too, and is said once."""
    data = ReasoningStepInput(
        request="Explain tides", goal="Explain", step_id="s1", step_description="d", pass_number=1
    )
    prompt = UnifiedPrompt(system_prompt="System text.", instructions="Explain tides")
    call = LLMCall(prompt_id=PromptId.REASONING_STEP_USER, input=data, prompt=prompt)
    limits = Limits(requests_per_minute=100)
    caplog.set_level(logging.WARNING, logger="aeon.llm")
    with serve() as fake:
        fake.fail(429, headers={"Retry-After": "1"})
        fake.reply("fine")
        workers = []
        for _ in range(2):
            adapter = OpenAIAdapter(fake.base_url, "fake-model", None, backoff_base=0.01)
            adapter.limiter = RateLimiter(LocalLimit(limits), limits, adapter.where)
            share_limit(adapter, redis, Keys(redis_prefix))
            workers.append(adapter)
        try:
            first = asyncio.create_task(workers[0].complete(call))
            while not fake.seen:
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.1)
            started = time.monotonic()
            second = await workers[1].complete(call)
            await first
        finally:
            for adapter in workers:
                await adapter.aclose()

    assert second.text == "fine"
    assert time.monotonic() - started >= 0.8
    asked_at = fake.seen[0].at
    assert all(seen.at >= asked_at + 1.0 for seen in fake.seen[1:])
    said = [r.getMessage() for r in caplog.records if "Retry-After" in r.getMessage()]
    assert len(said) == 1, said


async def test_a_limit_redis_cannot_read_for_a_while_is_waited_for() -> None:
    """Redis restarting under the limit makes a call wait, not fail (a run is never failed by
    the limit): the slot is taken once Redis answers."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    class Restarting(LocalLimit):
        refusals = 2

        async def take(self, slot: str, tokens: int) -> float:
            if self.refusals:
                self.refusals -= 1
                raise RedisConnectionError("Connection refused")
            return await super().take(slot, tokens)

    limits = Limits(requests_per_minute=10)
    limiter = RateLimiter(Restarting(limits), limits, "http://provider/v1")
    started = time.monotonic()
    async with limiter.slot(10, None) as slot:
        await slot.settle(5)
    assert time.monotonic() - started >= 1.5
