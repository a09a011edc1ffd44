"""A call's answer sink (runs.answer_text.AnswerSink) when Redis does not take a write: the text
is a view of the answer, never a condition of it."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.runs.answer_text import DELTA, RESET, AnswerSink, RedisAnswerText, ResetWhy


class Stream(RedisAnswerText):
    """The writes a sink sends, kept; the ones numbered in `refuse` raise as a Redis away."""

    def __init__(self, refuse: set[int], gather_s: float = 0) -> None:
        self.gather_s = gather_s
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


async def test_a_sink_gathers_the_pieces_that_come_within_its_window() -> None:
    """The first piece is written at once; those that come within GATHER_S of the last write
    are written together with the next one past it (one script call, not one a token); a
    reset drops what was gathered."""
    stream = Stream(refuse=set(), gather_s=60)  # a window no piece here outlasts
    sink = AnswerSink(stream, "run", "answer", provisional=False)
    for piece in ("one ", "two ", "three"):
        await sink.write(piece)
    assert [args[3] for args in stream.sent] == ["one "]
    stream.gather_s = 0  # the window has passed: the next piece goes with those gathered
    await sink.write(" four")
    assert [args[3] for args in stream.sent] == ["one ", "two three four"]
    stream.gather_s = 60
    await sink.write("five")
    await sink.reset()
    await sink.write("again")
    assert [(args[1], args[3]) for args in stream.sent[2:]] == [(RESET, ""), (DELTA, "again")]
