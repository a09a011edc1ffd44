"""A call's answer sink (bus.answer_text.AnswerSink) when Redis does not take a write: the text
is a view of the answer, never a condition of it."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.answer_text import DELTA, RESET, AnswerSink, RedisAnswerText, ResetWhy


class Stream(RedisAnswerText):
    """The writes a sink sends, kept; the ones numbered in `refuse` raise as a Redis away."""

    def __init__(self, refuse: set[int]) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.refused: list[tuple[Any, ...]] = []
        self.refuse = refuse

    async def _write(self, *args: Any) -> int:
        if len(self.sent) + len(self.refused) in self.refuse:
            self.refused.append(args)
            raise RedisConnectionError("gone")
        self.sent.append(args)
        return len(self.sent)


async def test_a_refused_write_ends_the_attempts_text_and_the_call_goes_on() -> None:
    stream = Stream(refuse={1})
    sink = AnswerSink(stream, "run", "answer", provisional=False)
    await sink.write("one ")
    await sink.write("two ")  # refused: logged, not raised
    await sink.write("three")  # not sent: a gap would show a text that is not the answer's
    assert [args[3] for args in stream.sent] == ["one "]
    assert [args[1] for args in stream.sent] == [DELTA]
    await sink.reset()  # a new attempt writes again, from a reset
    await sink.write("again")
    assert [(args[1], args[3], args[2]) for args in stream.sent[1:]] == [
        (RESET, "", False),
        (DELTA, "again", True),
    ]
    assert stream.sent[1][6] == ResetWhy.RETRIED


async def test_a_refused_reset_is_logged_not_raised() -> None:
    stream = Stream(refuse={0})
    await stream.reset("run", ResetWhy.SET_ASIDE)
    assert stream.sent == [] and len(stream.refused) == 1
