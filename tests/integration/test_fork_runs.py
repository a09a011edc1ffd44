"""Forking a run (docs/forks.md): its recorded replies taken up to the fork point with no LLM
call (counted at a stand-in OpenAI server), the change given from there, its lineage kept, and
the same fork asked twice answered once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from openai_fake import SECRET, FakeOpenAI, serve
from openai_styles import CASES, PipelineModel, read

from aeonloop import AeonClient
from aeonloop.bus.connection import RedisClient as Redis
from aeonloop.bus.keys import ANSWERS, Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import BadInput, ParentGone
from aeonloop.limits import LoopSettings
from aeonloop.llm.openai_adapter import OpenAIAdapter
from aeonloop.phases.events import ExecutionResult, Fork
from aeonloop.phases.models import Plan, PlanStep, Rule
from aeonloop.phases.verification import REPEATS_END_SAMPLES
from aeonloop.prompts.registry import PromptId
from aeonloop.runs.memo import MEMO_MARGIN_S
from aeonloop.testing import AeonTestStack

REQUEST = "Explain why the sea has tides, then summarise it for a child"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with serve() as fake:
        fake.responder = PipelineModel(CASES["plain"])
        yield fake


@pytest.fixture
async def stack(server: FakeOpenAI, settings: BusSettings) -> AsyncIterator[AeonTestStack]:
    llm = OpenAIAdapter(base_url=server.base_url, model="stand-in", api_key=SECRET, timeout=10.0)
    try:
        async with AeonTestStack(llm, settings=settings, loop=LoopSettings(max_passes=3)) as s:
            yield s
    finally:
        await llm.aclose()


def calls(server: FakeOpenAI) -> list[PromptId]:
    """The prompts the stand-in server was sent, in order."""
    return [read(seen)[0] for seen in server.seen if seen.path.endswith("/chat/completions")]


#: What the parent's run calls before its second pass: Phase A's two (the profile and the draft:
#: no PREPARE, the request states no constraint and has no rules in words), B's plan, and pass
#: 1's two steps and its evaluation (the stand-in's plan has two steps), A's side by side.
BEFORE_PASS_2 = [
    PromptId.TASKPROFILE_INFERENCE_USER,
    PromptId.ANSWER_DRAFT_USER,
    PromptId.PLAN_GENERATION_USER,
    PromptId.REASONING_STEP_USER,
    PromptId.REASONING_STEP_USER,
    PromptId.PASS_EVALUATION_USER,
]
NO_MOON = Rule.model_validate(
    {"id": "no-moon", "check": {"type": "forbidden_words", "words": ["Moon"]}}
)


async def answered(stack: AeonTestStack) -> tuple[str, ExecutionResult]:
    parent = await stack.client.submit(REQUEST, timeout=60)
    return parent, await stack.client.wait(parent, 90)


async def answers_of(redis: Redis, settings: BusSettings, correlation_id: str) -> int:
    """How many answers the run was published with (the answers stream's entries for it)."""
    entries = await redis.xrange(Keys(settings.prefix).stream(ANSWERS, 0))
    return sum(fields[b"cid"].decode() == correlation_id for _, fields in entries)


async def test_a_fork_with_no_change_calls_nothing_and_publishes_the_same_answer(
    stack: AeonTestStack, server: FakeOpenAI
) -> None:
    parent, first = await answered(stack)
    made = calls(server)
    assert sorted(made[: len(BEFORE_PASS_2)]) == sorted(BEFORE_PASS_2)  # the parent paid
    fork = await stack.client.fork(parent, timeout=60)
    same = await stack.client.wait(fork, 90)
    assert calls(server) == made  # not one call more
    assert fork != parent
    assert same.final_answer.answer_text == first.final_answer.answer_text
    assert (same.status, same.total_passes) == (first.status, first.total_passes)
    assert await stack.client.lineage(fork) == Fork(parent=parent)
    assert await stack.client.lineage(parent) is None


async def test_a_fork_from_pass_2_with_a_new_rule_takes_what_came_before_and_checks_it(
    stack: AeonTestStack, server: FakeOpenAI
) -> None:
    parent, first = await answered(stack)
    before = len(calls(server))
    fork = await stack.client.fork(parent, from_pass=2, rules=[NO_MOON], timeout=60)
    other = await stack.client.wait(fork, 90)
    made = calls(server)[before:]
    # None of the parent's calls before pass 2 is made again: the fork's calls are those the
    # new rule asked for (a draft sample, critiques, refinements, the answer), none of them
    # a profile, PREPARE, the plan, a step of pass 1 or its evaluation.
    assert made and not set(made) & set(BEFORE_PASS_2) - {PromptId.ANSWER_DRAFT_USER}
    # Samples after the first draft (the stand-in repeats itself: the second repeat ends
    # them), never the first draft again
    assert made.count(PromptId.ANSWER_DRAFT_USER) <= REPEATS_END_SAMPLES
    [verdict] = [check for check in other.outcome.checks if check.id == "no-moon"]
    assert verdict.verdict == "fail"  # every step the stand-in writes names the Moon
    assert not any(check.id == "no-moon" for check in first.outcome.checks)
    assert await stack.client.lineage(fork) == Fork(parent=parent, from_pass=2, changed=True)


async def test_a_fork_keeps_its_parents_effort(stack: AeonTestStack) -> None:
    """A short ask with effort high runs the loop; its fork from pass 2, with a rule its draft
    holds, runs it too: at the workers' default effort the draft would end the fork at Phase A
    (phases.spend), which is not the run it was forked from."""
    parent = await stack.client.submit("What is the capital of France?", effort="high")
    first = await stack.client.wait(parent, 90)
    assert first.total_passes >= 1
    held = Rule.model_validate(
        {"id": "roomy", "check": {"type": "count", "unit": "words", "max": 10_000}}
    )
    fork = await stack.client.fork(parent, from_pass=2, rules=[held], timeout=60)
    other = await stack.client.wait(fork, 90)
    assert other.total_passes >= 1, other.final_answer.metadata


async def test_the_same_fork_asked_twice_is_one_run_answered_once(
    stack: AeonTestStack, server: FakeOpenAI
) -> None:
    parent, _ = await answered(stack)
    fork = await stack.client.fork(parent, rules=[NO_MOON], timeout=60)
    again = await stack.client.fork(parent, rules=[NO_MOON], timeout=60)  # in flight: the same
    assert again == fork
    await stack.client.wait(fork, 90)
    made = len(calls(server))
    assert await stack.client.fork(parent, rules=[NO_MOON], timeout=60) == fork  # answered
    await asyncio.sleep(0.5)
    assert len(calls(server)) == made
    assert await answers_of(stack.client.redis, stack.settings, fork) == 1
    other = await stack.client.fork(parent, rules=[], timeout=60)  # another change: another run
    assert other != fork


async def test_an_unknown_parent_is_refused_and_a_plan_with_a_later_pass_too(
    stack: AeonTestStack,
) -> None:
    with pytest.raises(ParentGone, match="run nosuchrun cannot be forked: no request of it"):
        await stack.client.fork("nosuchrun")
    parent, _ = await answered(stack)
    plan = Plan(goal="g", steps=[PlanStep(step_id="s1", description="d")])
    with pytest.raises(BadInput, match="no from_pass above 1"):
        await stack.client.fork(parent, plan=plan, from_pass=2)


async def test_a_parent_whose_replies_are_gone_is_refused_naming_the_setting(
    server: FakeOpenAI, settings: BusSettings
) -> None:
    kept = settings.model_copy(update={"fork_keep_s": 0})
    llm = OpenAIAdapter(base_url=server.base_url, model="stand-in", api_key=SECRET, timeout=10.0)
    try:
        async with AeonTestStack(llm, settings=kept) as stack:
            parent = await stack.client.submit(REQUEST, timeout=1)
            await stack.client.wait(parent, 30)
            await asyncio.sleep(1 + MEMO_MARGIN_S)
            with pytest.raises(ParentGone, match=r"AEON_FORK_KEEP_S, 0 s past its deadline"):
                await stack.client.fork(parent)
    finally:
        await llm.aclose()


async def test_a_fork_given_a_plan_runs_it_from_the_first_pass_without_writing_one(
    stack: AeonTestStack, server: FakeOpenAI
) -> None:
    parent, _ = await answered(stack)
    before = len(calls(server))
    plan = Plan(goal="Tides, briefly", steps=[PlanStep(step_id="only", description="Say why")])
    fork = await stack.client.fork(parent, plan=plan, timeout=60)
    other = await stack.client.wait(fork, 90)
    made = calls(server)[before:]
    # Phase A's replies are the parent's; no plan is written; the one step given runs anew.
    assert PromptId.PLAN_GENERATION_USER not in made
    assert PromptId.TASKPROFILE_INFERENCE_USER not in made
    assert made.count(PromptId.REASONING_STEP_USER) == other.total_passes
    lineage = await stack.client.lineage(fork)
    assert lineage is not None and lineage.plan is not None
    assert (lineage.parent, lineage.from_pass, lineage.changed) == (parent, 1, True)
    assert [step.step_id for step in lineage.plan.steps] == ["only"]  # as the request had it


async def test_a_run_is_forked_right_after_its_submit_before_a_worker_takes_it(
    server: FakeOpenAI, settings: BusSettings
) -> None:
    """A request's record is written by the commit of Phase A's hop; until then the run's head
    names its request's entry, and the fork is made from that (GatewayClient._request). The
    HTTP fuzzer forked a run the moment POST /v1/runs answered and was told 404."""
    async with AeonClient(settings=settings) as client:  # no worker yet: the request waits
        parent = await client.submit(REQUEST, timeout=60, watch=False)
        fork = await client.fork(parent, rules=[NO_MOON], timeout=60, watch=False)
        lineage = await client.lineage(fork)
        assert lineage is not None and (lineage.parent, lineage.changed) == (parent, True)
        assert await client.fetch(parent) is None
    llm = OpenAIAdapter(base_url=server.base_url, model="stand-in", api_key=SECRET, timeout=10.0)
    try:
        async with AeonTestStack(llm, settings=settings) as stack:
            first = await stack.client.wait(parent, 90)
            other = await stack.client.wait(fork, 90)
            assert await stack.client.lineage(fork) == lineage  # from its record now
            for run in (parent, fork):
                assert await answers_of(stack.client.redis, settings, run) == 1
    finally:
        await llm.aclose()
    assert not any(check.id == "no-moon" for check in first.outcome.checks)
    assert [c.verdict for c in other.outcome.checks if c.id == "no-moon"] == ["fail"]
