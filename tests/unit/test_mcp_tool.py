"""The MCP server's logic without Redis, through the official client's in-memory transport: the
tool's schema, bad arguments and bad input as one-line tool errors (refused before anything
is published: the client is never connected), and the structured content an answer makes.
The runs themselves are proved in tests/e2e/test_mcp_server.py."""

from __future__ import annotations

import pytest
from mcp import Client

from aeonloop.bus.settings import BusSettings
from aeonloop.contracts import Usage
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.mcp_server import AskOutcome, build_server, outcome_of
from aeonloop.limits import LoopSettings
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import FinalAnswer


def server() -> object:
    # Never entered: every refusal below comes before the client would touch Redis.
    return build_server(AeonClient(settings=BusSettings(), loop=LoopSettings(max_passes=8)))


async def test_one_tool_ask_with_its_arguments_and_output_schema() -> None:
    async with Client(server()) as client:
        (tool,) = (await client.list_tools()).tools
    assert tool.name == "ask"
    assert tool.input_schema["required"] == ["request"]
    assert set(tool.input_schema["properties"]) == {"request", "rules", "files", "max_ttl"}
    assert set(tool.output_schema["properties"]) == set(AskOutcome.model_fields)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({}, "request: Field required"),
        ({"request": "x", "max_ttl": "many"}, "max_ttl: Input should be a valid integer"),
        ({"request": "x", "files": [{"path": "a"}]}, "files.0.content: Field required"),
        ({"request": "  "}, "the request is empty: say what you want answered"),
        ({"request": "x", "max_ttl": 9}, "max TTL 9 is above AEON_MAX_PASSES=8"),
        ({"request": "x", "rules": [{"id": "r"}]}, "rules breaks the rule schema"),
        (
            {"request": "x", "files": [{"path": "a", "content": "\x00"}]},
            "file a is not text",
        ),
    ],
)
async def test_bad_arguments_and_bad_input_are_one_line_tool_errors(
    arguments: dict, said: str
) -> None:
    async with Client(server()) as client:
        result = await client.call_tool("ask", arguments)
    assert result.is_error
    (block,) = result.content
    assert block.text.startswith(said), block.text
    assert "\n" not in block.text


def result_with(metadata: dict) -> ExecutionResult:
    return ExecutionResult(
        status="ttl_exhausted",
        degraded=True,
        total_passes=3,
        total_refinements=1,
        ttl_remaining=0,
        usage=Usage(prompt_tokens=10, completion_tokens=5, calls=2),
        elapsed_seconds=1.0,
        final_answer=FinalAnswer(answer_text="an answer", metadata=metadata),
    )


def test_the_structured_content_is_what_the_answers_metadata_says() -> None:
    failed = [{"id": "cites", "severity": "fail", "message": "no citation"}]
    checks = [
        {
            "id": "request.words",
            "origin": "request",
            "severity": "fail",
            "description": "at most 50 words",
            "verdict": "fail",
            "details": "found 70",
        }
    ]
    outcome = outcome_of("c" * 32, result_with({"failed_rules": failed, "checks": checks}))
    assert outcome.model_dump(mode="json") == {
        "correlation_id": "c" * 32,
        "status": "ttl_exhausted",
        "degraded": True,
        "total_passes": 3,
        "failed_rules": failed,
        "checks": checks,
        "usage": Usage(prompt_tokens=10, completion_tokens=5, calls=2).model_dump(mode="json"),
    }
    bare = outcome_of("c" * 32, result_with({}))
    assert (bare.failed_rules, bare.checks) == ([], None)
