"""The answer inside a JSON reply, written as the reply is (llm.answer_field), and the offline
model's chunks (llm.offline): what a sink is given joins to the answer's text."""

from __future__ import annotations

import json

from aeonloop.llm.answer_field import FieldSink
from aeonloop.llm.base import LLMCall
from aeonloop.llm.offline import OfflineLLM, chunks
from aeonloop.prompts.registry import DraftAnswerInput, PromptId
from aeonloop.prompts.unified import UnifiedPrompt


class Collected:
    """A TextSink that keeps what it is given."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.resets = 0

    async def write(self, text: str) -> None:
        self.pieces.append(text)

    async def reset(self) -> None:
        self.resets += 1
        self.pieces = []


ANSWER = 'Line one\n"quoted" \\ back, tab\t, é, 😀 and \u2028 end'
REPLY = json.dumps({"confidence": 0.5, "answer_text": ANSWER, "notes": "n"})
REPLY_RAW = json.dumps({"answer_text": ANSWER, "notes": '"answer_text": "no"'}, ensure_ascii=False)


async def test_every_split_of_the_reply_writes_the_fields_text() -> None:
    """Cut anywhere, an escape or a surrogate pair in two included: the field's text whole,
    nothing of the other fields."""
    for reply in (REPLY, REPLY_RAW):
        for cut in range(len(reply) + 1):
            inner = Collected()
            sink = FieldSink(inner, "answer_text")
            await sink.write(reply[:cut])
            await sink.write(reply[cut:])
            assert "".join(inner.pieces) == ANSWER, (reply, cut)


async def test_written_one_character_at_a_time() -> None:
    inner = Collected()
    sink = FieldSink(inner, "answer_text")
    for char in REPLY_RAW:
        await sink.write(char)
    assert "".join(inner.pieces) == ANSWER
    assert len(inner.pieces) > 10  # as it comes, not at the end


async def test_a_reply_without_the_field_writes_nothing_and_reset_starts_over() -> None:
    inner = Collected()
    sink = FieldSink(inner, "answer_text")
    await sink.write("Sure! Here is the answer: Paris.")
    assert inner.pieces == []
    await sink.reset()
    await sink.write(REPLY)
    assert inner.resets == 1 and "".join(inner.pieces) == ANSWER


def test_chunks_join_to_the_text() -> None:
    for text in ("", "one", "  two  words \n", "a b c d e f g h"):
        assert "".join(chunks(text)) == text
    assert len(chunks("a b c d e f g h")) == 3


async def test_the_offline_model_writes_its_reply_in_chunks() -> None:
    inner = Collected()
    data = DraftAnswerInput(request="What is the capital of France, and why is it the capital?")
    call = LLMCall(PromptId.ANSWER_DRAFT_USER, data, UnifiedPrompt("s", "i"), sink=inner)
    reply = await OfflineLLM().complete(call)
    assert len(inner.pieces) > 1
    assert "".join(inner.pieces) == reply.text
