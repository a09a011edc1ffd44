"""Conversations at the gateway: chat messages split into a request and its earlier turns, a
stored run's follow-up, and the limits every gateway holds turns to (no Redis: the end-to-end
proofs are in tests/e2e/test_conversation.py)."""

from __future__ import annotations

import pytest

from aeonloop.contracts import Turn
from aeonloop.exceptions import BadInput, TooLarge
from aeonloop.gateway.conversation import split_messages, turns_after
from aeonloop.gateway.validation import TurnSettings, check_turns

LIMITS = TurnSettings(max_turns=3, max_turns_chars=20)


def test_the_last_user_message_is_the_request_and_the_rest_are_turns_in_order() -> None:
    request, turns = split_messages(
        [
            {"role": "user", "content": "name a prime"},
            {"role": "assistant", "content": [{"type": "text", "text": "7"}]},
            {"role": "user", "content": "and the next one?"},
        ]
    )
    assert request == "and the next one?"
    assert turns == [Turn(role="user", content="name a prime"), Turn(role="assistant", content="7")]


def test_text_parts_are_joined_and_instructions_become_user_turns_in_place() -> None:
    request, turns = split_messages(
        [
            {"role": "system", "content": "answer in French"},
            {"role": "user", "content": [{"type": "text", "text": t} for t in ("a ", "b")]},
        ]
    )
    assert request == "a b"
    assert turns == [Turn(role="user", content="answer in French")]


@pytest.mark.parametrize(
    ("messages", "names"),
    [
        ([], "messages is empty"),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "last message"),
        ([{"role": "tool", "content": "x"}, {"role": "user", "content": "q"}], "message 0"),
        ([{"content": "q"}], "no role"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "image_url"),
        ([{"role": "user", "content": None}], "no text content"),
    ],
)
def test_messages_that_make_no_request_are_bad_input_in_one_line(
    messages: list[dict], names: str
) -> None:
    with pytest.raises(BadInput, match=names) as caught:
        split_messages(messages)
    assert "\n" not in str(caught.value)


def test_a_follow_up_continues_the_runs_turns_with_its_request_and_answer() -> None:
    earlier = [Turn(role="user", content="u0"), Turn(role="assistant", content="a0")]
    assert turns_after(earlier, "u1", "a1") == [
        *earlier,
        Turn(role="user", content="u1"),
        Turn(role="assistant", content="a1"),
    ]


def test_turns_are_held_to_their_count_and_characters() -> None:
    ok = [Turn(role="user", content="x" * 10), Turn(role="assistant", content="y" * 10)]
    assert check_turns(ok, LIMITS) == ok
    with pytest.raises(BadInput, match=r"4 earlier turns; the limit is 3 \(AEON_MAX_TURNS\)") as n:
        check_turns([Turn(role="user", content="x")] * 4, LIMITS)
    assert not isinstance(n.value, TooLarge)
    with pytest.raises(TooLarge, match=r"21 characters.* 20 \(AEON_MAX_TURNS_CHARS\)"):
        check_turns([*ok, Turn(role="user", content="z")], LIMITS)
    with pytest.raises(BadInput, match="turn 1 is not text"):
        check_turns([Turn(role="user", content="nul\x00")], LIMITS)


def test_the_turn_limits_are_settings_with_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AEON_MAX_TURNS", "7")
    monkeypatch.setenv("AEON_MAX_TURNS_CHARS", "99")
    assert TurnSettings.from_env() == TurnSettings(max_turns=7, max_turns_chars=99)
    monkeypatch.setenv("AEON_MAX_TURNS", "100000")
    with pytest.raises(Exception, match="AEON_MAX_TURNS"):
        TurnSettings.from_env()
