"""Nothing is sent twice in one prompt (issue 27): each cut, and that what was cut is still
there once."""

from __future__ import annotations

from aeonloop.phases import phase_c
from aeonloop.phases.upstream import synthesis_input
from aeonloop.prompts.registry import GOAL_AS_REQUEST, PromptId, PromptRegistry, goal_text
from tests.unit.test_phase_e import PLAN_STATE, phase_e_input

STEP = PromptId.REASONING_STEP_USER
ASSESS = PromptId.PASS_EVALUATION_USER


def test_the_synthesis_prompt_gives_each_step_description_once() -> None:
    prompt = PromptRegistry().get_prompt(
        PromptId.ANSWER_SYNTHESIS_USER, synthesis_input(phase_e_input())
    )
    for step in PLAN_STATE["steps"]:
        assert prompt.count(step["description"]) == 1
    assert "[s1]\nA CDN caches pages at the edge." in prompt  # the result, under its id


def test_a_goal_that_restates_the_request_is_not_sent_again() -> None:
    request = "Explain how tides work, then say it simply"
    assert goal_text("Explain how tides work, then say it simply.", request) == GOAL_AS_REQUEST
    assert goal_text("explain  how tides work", request) == GOAL_AS_REQUEST  # a cut of it
    assert goal_text("A two-line account of tides", request) == "A two-line account of tides"


async def test_step_and_assessment_prompts_send_the_request_once(
    harness, replies, make_plan_ready
) -> None:
    h = harness(
        {
            STEP: replies.step_output,
            PromptId.VALIDATION_SEMANTIC_USER: replies.validation(),
            ASSESS: replies.assessment(),
        }
    )
    event = make_plan_ready("gather")
    event.run.plan.goal = event.run.request
    await phase_c.handle(event, h.deps)
    for call in h.llm.history:
        if call.prompt_id in (STEP, ASSESS):
            assert call.prompt.instructions.count(event.run.request) == 1
            assert call.input.goal == GOAL_AS_REQUEST
