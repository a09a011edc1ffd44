"""A conversation through the real bus: three runs, each following up the one before with
`AeonClient.follow_up`, where the third question can only be answered from the first turn.

The workers run in this process on a real Redis; the model is scripted, so what matters is what
each run's prompts were given: the first turn's text reaches the third run's profile, plan,
steps and answer, as an earlier turn, numbered from the first."""

from __future__ import annotations

import re

from test_pipeline import pipeline

from aeonloop.bus.settings import BusSettings
from aeonloop.contracts import Turn
from aeonloop.exceptions import BadInput
from aeonloop.llm.scripted import ScriptedLLM
from aeonloop.llm.session import WITH_TURNS
from aeonloop.prompts.registry import PromptId

FIRST = "My locker code is 4817; keep it in mind."
SECOND = "Which floor is the gym on? It is the floor after the third."
# Two parts (phases.spend): the run is profiled and planned, so every prompt that takes the
# turns is sent them.
THIRD = "What was my locker code, the number I told you first, and then which floor?"


def answer(text: str) -> str:
    return f'{{"answer_text": "{text}", "confidence": 0.9, "used_step_ids": [], "notes": null}}'


async def test_the_third_turn_is_given_the_first(settings: BusSettings) -> None:
    replies = [answer("Noted."), answer("The fourth floor."), answer("It is 4817.")]
    llm = ScriptedLLM({PromptId.ANSWER_SYNTHESIS_USER: replies})  # the offline model otherwise
    async with pipeline(settings, llm) as client:
        first = await client.submit(FIRST, timeout=30)
        assert (await client.wait(first, 35)).final_answer.answer_text == "Noted."
        second = await client.submit(SECOND, timeout=30, messages=await client.follow_up(first))
        assert (await client.wait(second, 35)).final_answer.answer_text == "The fourth floor."
        turns = await client.follow_up(second)
        assert turns == [
            Turn(role="user", content=FIRST),
            Turn(role="assistant", content="Noted."),
            Turn(role="user", content=SECOND),
            Turn(role="assistant", content="The fourth floor."),
        ]
        calls_before = len(llm.history)
        third = await client.submit(THIRD, timeout=30, messages=turns)
        result = await client.wait(third, 35)

    assert result.final_answer.answer_text == "It is 4817."
    third_calls = llm.history[calls_before:]
    given = {call.prompt_id for call in third_calls if FIRST in call.prompt.to_xml()}
    assert given == WITH_TURNS, given
    xml = next(c for c in third_calls if c.prompt_id is PromptId.ANSWER_SYNTHESIS_USER)
    names = re.findall(r'<artifact name="(conversation turn [^"]*)">', xml.prompt.to_xml())
    assert names == [
        "conversation turn 1 (user)",
        "conversation turn 2 (assistant)",
        "conversation turn 3 (user)",
        "conversation turn 4 (assistant)",
    ]
    # the first run had no earlier turns: nothing of a conversation in its prompts
    assert not any("conversation turn" in c.prompt.to_xml() for c in llm.history[:3])


async def test_following_up_a_run_without_an_answer_is_bad_input(settings: BusSettings) -> None:
    async with pipeline(settings, ScriptedLLM({})) as client:
        try:
            await client.follow_up("0" * 32)
        except BadInput as error:
            assert "no answer stored for " + "0" * 32 in str(error)
        else:
            raise AssertionError("a follow-up to no run was accepted")
