"""Plan approval through the real bus: a run paused after Phase B, approved as it is, edited,
rejected (cancelled), left past its deadline, and approved after its worker was replaced.

The workers run in this process on the real Redis, with the offline model.
"""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from test_pipeline import pipeline

from aeonloop.bus.keys import AWAITING_APPROVAL, Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import BadInput
from aeonloop.gateway.client import AeonClient
from aeonloop.llm.offline import OfflineLLM
from aeonloop.phases.approvals import edited_plan
from aeonloop.phases.events import PlanAwaitingApproval

REQUEST = "Explain tides, then summarise them for a child"


async def paused_run(client: AeonClient, cid: str, timeout: float = 10) -> PlanAwaitingApproval:
    for _ in range(int(timeout / 0.05)):
        paused = await client.awaiting(cid)
        if paused is not None:
            return paused
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {cid} did not pause for approval")


async def test_a_paused_run_waits_for_its_approval_then_runs(settings: BusSettings) -> None:
    async with pipeline(settings, OfflineLLM()) as client:
        cid = await client.submit(REQUEST, timeout=60, approve_plan=True)
        paused = await paused_run(client, cid)
        assert paused.run.plan is not None and paused.run.plan.steps
        await asyncio.sleep(1.5)  # a sweep or more: nothing moves while it waits
        assert await client.fetch(cid) is None
        assert await client.awaiting(cid) is not None
        assert await client.approve(cid)
        assert not await client.approve(cid)  # once only
        result = await client.wait(cid, 30)
    assert result.status == "converged"
    assert await client_awaits_nothing(settings, cid)


async def client_awaits_nothing(settings: BusSettings, cid: str) -> bool:
    keys = Keys(settings.prefix, settings.shards)
    async with Redis.from_url(settings.redis_url) as redis:
        entries = await redis.xrange(keys.stream_of(AWAITING_APPROVAL, cid))
    return all(fields[b"cid"].decode() != cid for _, fields in entries)


async def test_an_edited_plan_is_the_one_that_runs(settings: BusSettings) -> None:
    plan = edited_plan(
        {"goal": "a short answer", "steps": [{"step_id": "only", "description": "Explain tides"}]}
    )
    async with pipeline(settings, OfflineLLM()) as client:
        cid = await client.submit(REQUEST, timeout=60, approve_plan=True)
        await paused_run(client, cid)
        assert await client.approve(cid, plan)
        result = await client.wait(cid, 30)
    steps = result.final_answer.metadata["plan_state"]["steps"]
    assert [step["step_id"] for step in steps][:1] == ["only"]
    assert result.final_answer.metadata["plan_state"]["goal"] == "a short answer"


def test_an_edited_plan_is_checked_as_phase_b_checks_one() -> None:
    with pytest.raises(BadInput, match="steps"):
        edited_plan({"goal": "g", "steps": []})
    with pytest.raises(BadInput, match="goal"):
        edited_plan({"steps": [{"step_id": "s", "description": "d"}]})
    repeated = edited_plan({"goal": "g", "steps": [{"step_id": "s", "description": "a"}] * 2})
    assert [step.step_id for step in repeated.steps] == ["s", "s-2"]


async def test_a_cancel_rejects_the_plan(settings: BusSettings) -> None:
    async with pipeline(settings, OfflineLLM()) as client:
        cid = await client.submit(REQUEST, timeout=60, approve_plan=True)
        await paused_run(client, cid)
        await client.cancel(cid)
        result = await client.wait(cid, 10)
        assert not await client.approve(cid)
    assert (result.status, result.total_passes) == ("cancelled", 0)
    assert result.final_answer.metadata["reason"] == "cancelled"


async def test_a_paused_runs_deadline_still_runs(settings: BusSettings) -> None:
    async with pipeline(settings, OfflineLLM()) as client:
        cid = await client.submit(REQUEST, timeout=3, approve_plan=True)
        await paused_run(client, cid)
        result = await client.wait(cid, 10)
    assert result.status == "deadline_exceeded"


async def test_a_paused_run_outlives_its_worker(settings: BusSettings) -> None:
    """The worker that paused the run stops; the run waits in Redis, holding no worker, and a
    worker started later takes it on once approved."""
    async with pipeline(settings, OfflineLLM()) as client:
        cid = await client.submit(REQUEST, timeout=60, approve_plan=True)
        await paused_run(client, cid)
    async with AeonClient(settings=settings) as client:
        assert await client.awaiting(cid) is not None  # no worker runs now
        assert await client.approve(cid)
    async with pipeline(settings, OfflineLLM()) as client:
        result = await client.wait(cid, 30)
    assert result.status == "converged"
