"""Run control through the real bus: cancel a run, cap its tokens.

The workers run in this process (the SIGKILL proof is in tests/e2e/test_cancel.py); the
Redis is real, and the LLM is scripted and slowed, so a cancel lands while a call is in flight.
"""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis
from test_pipeline import NO_ISSUES, PLAN, add_a_step, assessment, pipeline

from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMCall
from aeonloop.llm.offline import OfflineLLM
from aeonloop.prompts.registry import REPLY_TOKENS, PromptId
from aeonloop.runs.cancels import CancelOutcome, RedisCancels
from aeonloop.testing import ScriptedLLM

#: How long each slowed call takes: long enough that a cancel lands inside one.
SLOW_S = 1.5


def slow_steps(started: list[str]) -> ScriptedLLM:
    """A loop that never converges, whose step calls take SLOW_S each."""

    async def step(call: LLMCall) -> str:
        started.append(call.prompt_id.value)
        await asyncio.sleep(SLOW_S)
        return "a step's output"

    return ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: PLAN,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.REASONING_STEP_USER: step,
            PromptId.PASS_EVALUATION_USER: assessment(0.5),
            PromptId.RECURSIVE_REFINEMENT_USER: add_a_step(),
        }
    )


async def answers_of(settings: BusSettings, cid: str) -> list[bytes]:
    """The answers stream's entries for `cid` (exactly one is what every run must have)."""
    stream = Keys(settings.prefix, settings.shards).stream_of("answers", cid)
    async with Redis.from_url(settings.redis_url) as redis:
        entries = await redis.xrange(stream)
    return [entry_id for entry_id, fields in entries if fields[b"cid"].decode() == cid]


async def test_a_cancel_mid_pass_is_answered_at_once_and_no_call_starts_after_it(
    settings: BusSettings,
) -> None:
    started: list[str] = []
    llm = slow_steps(started)
    async with pipeline(settings, llm) as client:
        cid = await client.submit("Explain tides, then their causes", timeout=60)
        while not started:  # a step's call is in flight
            await asyncio.sleep(0.02)
        calls_before = len(llm.calls)
        cancelled_at = time.monotonic()
        assert await client.cancel(cid) is CancelOutcome.REQUESTED
        result = await client.wait(cid, 10)
        took = time.monotonic() - cancelled_at
        assert await client.cancel(cid) is CancelOutcome.ANSWERED  # after the answer: a no-op
        await asyncio.sleep(0.5)  # anything still running would call now
        calls_after = len(llm.calls) - calls_before

    assert took < 2.0, f"the cancelled run took {took:.2f}s to be answered"
    assert (result.status, result.degraded) == ("cancelled", True)
    assert result.final_answer.metadata["reason"] == "cancelled"
    assert calls_after == 0, f"{calls_after} LLM calls started after the cancel"
    assert len(await answers_of(settings, cid)) == 1


async def test_a_cancel_during_the_answers_synthesis_is_answered_cancelled(
    settings: BusSettings,
) -> None:
    """Issue 35: a cancel that lands after the loop converged, while Phase E writes the answer,
    was answered `status: converged` with `metadata.reason: cancelled`. Both say cancelled
    now (phases.exits.answered_status); how the loop ended stays in `convergence_status`."""
    synthesising = asyncio.Event()

    async def synthesis(call: LLMCall) -> str:
        synthesising.set()
        await asyncio.sleep(SLOW_S * 4)  # the cancel abandons it long before
        return (await OfflineLLM().complete(call)).text

    llm = ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: PLAN,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: assessment(0.99, converged=True),
            PromptId.ANSWER_SYNTHESIS_USER: synthesis,
        }
    )
    async with pipeline(settings, llm) as client:
        cid = await client.submit("Explain tides, then their causes", timeout=60)
        await asyncio.wait_for(synthesising.wait(), 30)
        assert await client.cancel(cid) is CancelOutcome.REQUESTED
        result = await client.wait(cid, 10)
    metadata = result.final_answer.metadata
    assert (result.status, metadata["reason"]) == ("cancelled", "cancelled")
    assert (metadata["convergence_status"], result.total_passes) == ("converged", 1)
    assert len(await answers_of(settings, cid)) == 1


async def test_cancelling_twice_is_the_same_as_once(settings: BusSettings) -> None:
    started: list[str] = []
    async with pipeline(settings, slow_steps(started)) as client:
        cid = await client.submit("Explain tides, then their causes", timeout=60)
        first = await client.cancel(cid)
        second = await client.cancel(cid)
        result = await client.wait(cid, 10)
    assert (first, second) == (CancelOutcome.REQUESTED, CancelOutcome.REQUESTED)
    assert result.status == "cancelled"
    assert len(await answers_of(settings, cid)) == 1


async def test_a_budget_spent_mid_pass_ends_the_loop_and_is_never_overrun(
    settings: BusSettings,
) -> None:
    """The budget pays for A, B, two passes and part of a third: the loop exits
    budget_exhausted with what exists, synthesis is refused for want of budget, and usage
    stays under it (a call starts only if the budget can pay for it at its most)."""
    started: list[str] = []
    llm = slow_steps(started)
    llm.delay = 0  # not slowed: the budget, not the clock, stops this run
    # Where two passes are paid for and the third's evaluation, reserved at its most, is not,
    # nor the synthesis: the same outcome from 4,100 to 4,700 tokens with the prompts as issue
    # 40 cut them (6,200 to 7,100 before). Phase A's draft, beside the profile, takes some of
    # them, and no PREPARE: the request states no constraint, phases.spend; since issue 33 one
    # call judges a pass, and B runs a two-step plan unchecked.
    budget = 4_400
    async with pipeline(settings, llm) as client:
        result = await client.ask(
            "Explain tides, then their causes", timeout=60, token_budget=budget
        )
    assert result.status == "budget_exhausted", result.final_answer.answer_text
    assert result.degraded
    assert result.usage.token_budget == budget
    assert 0 < result.usage.total_tokens <= budget
    # Two passes ran; the third stopped mid-pass, at a call the budget could not pay for.
    assert result.total_passes == 2
    # Its step ran (s1 and s2 in pass 1, extra1 in pass 2, extra2 in pass 3), then the pass's
    # evaluation could not be paid for: the pass is abandoned, its tokens counted.
    assert started.count(PromptId.REASONING_STEP_USER.value) == 4
    text = result.final_answer.answer_text
    assert f"token budget of {budget:,} cannot pay for PASS_EVALUATION_USER" in text
    # What is left cannot pay for synthesis either: Phase E says so, without the model.
    assert result.final_answer.metadata["reason"] == "budget_exhausted"


async def test_the_workers_default_budget_applies_when_a_request_sets_none(
    settings: BusSettings,
) -> None:
    """AEON_RUN_TOKEN_BUDGET: a budget too small for even the profile's reply ends the run
    before any call, and Phase E says the budget could not pay for synthesis."""
    tiny = REPLY_TOKENS[PromptId.TASKPROFILE_INFERENCE_USER]
    llm = ScriptedLLM({})
    async with pipeline(settings, llm, LoopSettings(run_token_budget=tiny)) as client:
        result = await client.ask("Explain tides", timeout=30)
    assert result.status == "budget_exhausted"
    assert result.final_answer.metadata["reason"] == "budget_exhausted"
    assert llm.calls == []
    assert result.usage.total_tokens == 0


async def test_lookups_asked_at_once_are_read_together_and_each_is_right(
    settings: BusSettings,
) -> None:
    """A worker's cancel lookups of one moment go to Redis as one EXISTS naming every run's
    mark; only when it counts some is each read, in one pipeline: each asker still gets its
    own run's mark, read after it asked (a mark set before a lookup is seen)."""
    redis = Redis.from_url(settings.redis_url)
    keys = Keys(settings.prefix)
    cancels = RedisCancels(redis, keys)
    runs = [f"run-{n}" for n in range(60)]

    async def ask_all() -> tuple[list[bool], int, int]:
        """Each run's answer, the EXISTS commands Redis ran, and the pipelines sent."""
        pipelines: list[dict] = []
        pipeline = redis.pipeline
        redis.pipeline = lambda **kw: pipelines.append(kw) or pipeline(**kw)  # counted
        before = (await redis.info("commandstats")).get("cmdstat_exists", {}).get("calls", 0)
        try:
            seen = await asyncio.gather(*(cancels.cancelled(cid) for cid in runs))
        finally:
            redis.pipeline = pipeline
        after = (await redis.info("commandstats"))["cmdstat_exists"]["calls"]
        return list(seen), after - before, len(pipelines)

    try:
        seen, commands, pipelines = await ask_all()
        assert not any(seen) and (commands, pipelines) == (1, 0)  # none marked: one command
        marked = {f"run-{n}" for n in range(0, 60, 3)}
        for cid in marked:
            await redis.set(keys.cancel(cid), "1")
        seen, commands, pipelines = await ask_all()
        assert {cid for cid, mark in zip(runs, seen, strict=True) if mark} == marked
        assert (commands, pipelines) == (61, 1)  # the count, then one EXISTS each, together
        await redis.set(keys.cancel("run-1"), "1")
        assert await cancels.cancelled("run-1")  # asked after the mark: sees it
    finally:
        await redis.aclose()
