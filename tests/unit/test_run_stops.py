"""Where a run stops before its next LLM call (llm.session, phases.cancels): a cancel, and
a token budget that cannot pay for the call; and how phases.exits ends the run then. A scripted
LLM and an in-process cancel store: no network, no Redis."""

from __future__ import annotations

import asyncio
import functools
import json

import pytest

from aeonloop.contracts import Usage
from aeonloop.exceptions import BudgetExhausted, RunCancelled
from aeonloop.llm.scripted import ScriptedLLM
from aeonloop.llm.session import DictMemo, LLMSession, call_cost
from aeonloop.phases import cancels, exits
from aeonloop.phases.events import LoopExited, PlanReady, RunState, utcnow
from aeonloop.phases.models import AnswerReason, ExitReason, Plan, PlanStep
from aeonloop.prompts.registry import (
    REPLY_TOKENS,
    PromptId,
    PromptRegistry,
    TaskProfileInferenceInput,
    TaskProfileOutput,
)

PROFILE = PromptId.TASKPROFILE_INFERENCE_USER
GOOD = json.dumps(
    {
        "reasoning_depth": 4,
        "information_sufficiency": 0.6,
        "expected_tool_usage": "minimal",
        "output_breadth": "broad",
        "confidence_requirement": "high",
        "raw_inference": "deep",
    }
)
DATA = TaskProfileInferenceInput(request="Explain tides")


def session(
    usage: Usage, store: cancels.DictCancels | None = None
) -> tuple[LLMSession, ScriptedLLM]:
    llm = ScriptedLLM({PROFILE: GOOD}, fallback=None)
    check = functools.partial(cancels.check, store, "run-1") if store else None
    made = LLMSession(llm, PromptRegistry(), DictMemo(), "run-1", usage, check_cancelled=check)
    return made, llm


async def profile(s: LLMSession) -> TaskProfileOutput:
    return await s.json(PROFILE, DATA, TaskProfileOutput, scope="a")


# -- the token budget --------------------------------------------------------------------------


async def test_a_call_the_budget_can_pay_for_is_made_and_counted() -> None:
    usage = Usage(token_budget=100_000)
    s, llm = session(usage)
    await profile(s)
    assert llm.calls == [PROFILE]
    assert 0 < usage.total_tokens <= 100_000


async def test_no_call_starts_that_the_budget_cannot_pay_for() -> None:
    """Spent plus the call at its most (prompt estimate and reply budget) over the budget:
    nothing is sent, and the error says what was spent and what the call would take."""
    usage = Usage(token_budget=REPLY_TOKENS[PROFILE] + 10)
    s, llm = session(usage)
    with pytest.raises(BudgetExhausted) as raised:
        await profile(s)
    assert llm.calls == []
    assert raised.value.spent == 0 and raised.value.cost > REPLY_TOKENS[PROFILE]
    assert f"token budget of {usage.token_budget:,} cannot pay for" in str(raised.value)


async def test_the_cost_of_a_call_is_its_prompt_estimate_and_its_reply_budget() -> None:
    s, llm = session(Usage())
    await profile(s)
    call = llm.history[0]
    prompt_tokens = -(-len(call.prompt.to_xml()) // 3)
    assert call_cost(call) == prompt_tokens + REPLY_TOKENS[PROFILE]


async def test_calls_side_by_side_are_paid_for_together() -> None:
    """Two calls that each fit the budget, but not both at their most: while the first is in
    flight the second is refused; once the first's reply counted what it really took, a call
    fits again."""
    gate = asyncio.Event()

    async def held(call: object) -> str:
        await gate.wait()
        return GOOD

    usage = Usage()
    llm = ScriptedLLM({PROFILE: [GOOD, held, GOOD]}, fallback=None)
    s = LLMSession(llm, PromptRegistry(), DictMemo(), "run-1", usage)
    await profile(s)
    cost = call_cost(llm.history[0])
    usage.token_budget = usage.total_tokens + cost + cost // 2  # room for one call, not two
    first = asyncio.create_task(s.json(PROFILE, DATA, TaskProfileOutput, scope="a2"))
    while len(llm.calls) < 2:
        await asyncio.sleep(0)
    with pytest.raises(BudgetExhausted):
        await s.json(PROFILE, DATA, TaskProfileOutput, scope="a3")
    gate.set()
    await first
    await s.json(PROFILE, DATA, TaskProfileOutput, scope="a4")
    assert len(llm.calls) == 3
    assert usage.total_tokens <= usage.token_budget


# -- a cancel ----------------------------------------------------------------------------------


async def test_no_call_starts_once_the_run_is_cancelled() -> None:
    store = cancels.DictCancels()
    s, llm = session(Usage(), store)
    await profile(s)
    store.cancel("run-1")
    with pytest.raises(RunCancelled):
        await s.json(PROFILE, DATA, TaskProfileOutput, scope="again")
    assert llm.calls == [PROFILE]


async def test_work_in_flight_is_abandoned_when_the_run_is_cancelled() -> None:
    store = cancels.DictCancels()
    abandoned = asyncio.Event()

    async def work() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            abandoned.set()
            raise
        return "finished"

    async def cancel_soon() -> None:
        await asyncio.sleep(0.01)
        store.cancel("run-1")

    canceller = asyncio.create_task(cancel_soon())
    with pytest.raises(RunCancelled):
        await asyncio.wait_for(cancels.until_cancelled(store, "run-1", work()), 5)
    await canceller
    assert abandoned.is_set()


async def test_work_that_ends_first_is_kept_and_other_runs_cancels_do_not_touch_it() -> None:
    store = cancels.DictCancels()
    store.cancel("another-run")

    async def work() -> str:
        await asyncio.sleep(0.01)
        return "finished"

    assert await cancels.until_cancelled(store, "run-1", work()) == "finished"


# -- how the run then ends (phases.exits) ------------------------------------------------------


def test_a_stopped_run_ends_with_its_reason() -> None:
    budget = exits.stopped(BudgetExhausted("PLAN_GENERATION_USER", 900, 300, 1_000))
    assert budget.reason is ExitReason.BUDGET_EXHAUSTED and "1,000" in budget.detail
    cancel = exits.stopped(RunCancelled("cid-1"))
    assert cancel.reason is ExitReason.CANCELLED and "cid-1" in cancel.detail


def test_a_stopped_hop_ends_the_run_as_it_was_given() -> None:
    """The run the hop was given, not what its handler changed before it stopped."""
    plan = Plan(goal="g", steps=[PlanStep(step_id="s1", description="d")])
    event = PlanReady(
        correlation_id="cid-1",
        deadline=utcnow().replace(year=utcnow().year + 1),
        run=RunState(request="r", plan=plan),
    )
    given = event.run.snapshot()
    event.run.plan.steps[0] = event.run.plan.steps[0].model_copy(update={"status": "done"})
    event.run.notes.append("changed midway")
    exit_event = exits.loop_exited(event, exits.cancelled("cid-1"), run=given)
    assert exit_event.run.plan.steps[0].status == "pending"
    assert exit_event.run.notes == []
    assert exit_event.run.usage is event.run.usage  # what the hop spent still counts


@pytest.mark.parametrize(
    ("reason", "cancelled", "expected"),
    [
        (ExitReason.CANCELLED, False, AnswerReason.CANCELLED),
        (ExitReason.CONVERGED, True, AnswerReason.CANCELLED),  # cancelled while E was due
        (ExitReason.CONVERGED, False, None),
        (ExitReason.BUDGET_EXHAUSTED, False, None),  # E synthesises if the budget can pay
    ],
)
def test_phase_e_answers_a_cancelled_run_without_the_model(
    reason: ExitReason, cancelled: bool, expected: AnswerReason | None
) -> None:
    event = LoopExited(
        correlation_id="c", deadline=utcnow().replace(year=utcnow().year + 1), reason=reason
    )
    assert exits.answer_without_model(event, cancelled) is expected


def test_synthesis_stopped_says_why() -> None:
    assert exits.synthesis_stopped(RunCancelled("c")) is AnswerReason.CANCELLED
    stopped = BudgetExhausted("ANSWER_SYNTHESIS_USER", 1, 2, 3)
    assert exits.synthesis_stopped(stopped) is AnswerReason.BUDGET_EXHAUSTED
