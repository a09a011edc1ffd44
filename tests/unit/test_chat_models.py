"""The chat endpoint's shapes (gateway.http.chat_models), without a server: the answer cut into
`content` pieces that join to it exactly, the chunks as OpenAI sends them, `finish_reason` for
each way a run ends, and what a request may and may not ask."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from aeonloop.contracts import Usage
from aeonloop.gateway.http.chat_models import (
    IGNORED_FIELDS,
    ChatRequest,
    Chunks,
    answer_pieces,
    finish_reason,
    unknown_field,
)
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import ExitReason, FinalAnswer

TEXTS = [
    "",
    "one",
    "   leading and trailing spaces   ",
    "Tides rise and fall twice a day.\n\nThe moon pulls the water; the sun helps.\n",
    "x" * 300 + " a word longer than a piece, then short ones",
    "\t\n  \n",
    "émigré naïve coöperate — “quoted” 日本語のテキスト " * 20,
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_answer_pieces_join_to_the_answer_and_split_no_word(text: str) -> None:
    pieces = answer_pieces(text, size=16)
    assert "".join(pieces) == text
    assert all(pieces)
    words = text.split()
    assert [word for piece in pieces for word in piece.split()] == words  # none cut in two
    assert all(len(piece) <= 16 or len(piece.split()) == 1 for piece in pieces)


def test_a_long_answer_is_several_pieces() -> None:
    text = "word " * 100
    pieces = answer_pieces(text)
    assert len(pieces) > 5 and "".join(pieces) == text


def _result(status: ExitReason, text: str = "The answer.") -> ExecutionResult:
    return ExecutionResult(
        status=status,
        degraded=status is not ExitReason.CONVERGED,
        total_passes=1,
        total_refinements=0,
        ttl_remaining=0,
        usage=Usage(prompt_tokens=10, completion_tokens=4, calls=2),
        elapsed_seconds=1.0,
        final_answer=FinalAnswer(answer_text=text, confidence=0.5, metadata={}),
    )


@pytest.mark.parametrize("status", list(ExitReason))
def test_finish_reason_is_length_for_a_spent_budget_and_stop_for_every_other_ending(
    status: ExitReason,
) -> None:
    expected = "length" if status is ExitReason.BUDGET_EXHAUSTED else "stop"
    assert finish_reason(_result(status)) == expected


def test_chunks_are_openais_with_usage_only_where_asked() -> None:
    result = _result(ExitReason.CANCELLED)
    plain = Chunks("cid", 1_700_000_000, include_usage=False)
    line = json.loads(plain.delta(reasoning_content="A  profiled\n"))
    assert line == {
        "id": "cid",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "aeon",
        "choices": [
            {
                "index": 0,
                # Both names clients read reasoning by: vLLM renamed it in January 2026.
                "delta": {"reasoning_content": "A  profiled\n", "reasoning": "A  profiled\n"},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    finish = json.loads(plain.finish(result))
    assert finish["choices"][0]["delta"] == {}
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["aeon"]["status"] == "cancelled" and "usage" not in finish

    asked = Chunks("cid", 1_700_000_000, include_usage=True)
    assert json.loads(asked.delta(content="The "))["usage"] is None
    usage = json.loads(asked.usage(result))
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "total_tokens": 14,
        "prompt_tokens_details": None,  # no server reported its cache: not 0 cached tokens
    }
    result.usage.cached_tokens = 6
    details = json.loads(asked.usage(result))["usage"]["prompt_tokens_details"]
    assert details == {"cached_tokens": 6}


def _request(**fields: Any) -> dict[str, Any]:
    return {"model": "aeon", "messages": [{"role": "user", "content": "hi"}], **fields}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"n": 2}, "n"),
        ({"n": 0}, "n"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "alloy"}}, "audio"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"stream": "yes"}, "stream"),
        ({"messages": []}, "messages"),
    ],
)
def test_what_a_run_cannot_honour_is_refused_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        ChatRequest.model_validate(_request(**fields))
    assert refused.value.errors()[0]["loc"][0] == field


def test_standard_fields_that_tune_one_call_are_taken_and_others_refused() -> None:
    taken = ChatRequest.model_validate(
        _request(
            n=1,
            response_format={"type": "text"},
            logprobs=False,
            modalities=["text"],
            tool_choice="auto",
            tools=["search"],
            **dict.fromkeys(IGNORED_FIELDS, 0.5),
        )
    )
    assert taken.tools == ["search"] and not taken.include_usage()
    assert unknown_field(_request(**dict.fromkeys(IGNORED_FIELDS, 1), rules=[])) is None
    assert unknown_field(_request(temprature=0.2)) == "temprature"
