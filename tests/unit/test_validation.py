"""Checks of a request's options: the cap on passes against AEON_MAX_PASSES (one cap, refused
in one line above it), the tools a request narrows its run to, and its rules' patterns.

`aeon ask --max-ttl`, the HTTP API's `max_ttl` and `AeonClient.submit(max_ttl=...)` all check
with `check_max_ttl`; the end-to-end refusals (exit 2, 422) are in tests/e2e.
"""

from __future__ import annotations

import argparse

import pytest

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.http.bodies import checked_run, parsed
from aeonloop.gateway.http.errors import ApiError
from aeonloop.gateway.http.models import RunRequest
from aeonloop.gateway.validation import (
    BadInput,
    FileSettings,
    check_max_ttl,
    check_tools,
    parse_rules,
    port_option,
    unknown_tools,
)
from aeonloop.limits import MAX_PATTERN_RULES, MAX_RULES, LoopSettings

LIMITS = FileSettings(max_files=2, max_file_bytes=100, max_files_bytes=150)


def _checked(data: object, client: AeonClient) -> dict:
    """A runs API body read and checked as `POST /v1/runs` does (gateway.http.bodies)."""
    return checked_run(parsed(RunRequest, data), client)


@pytest.mark.parametrize("asked", [1, 5, 8])
def test_a_cap_up_to_aeon_max_passes_is_taken(asked: int) -> None:
    assert check_max_ttl(asked, 8) == asked


def test_no_cap_asked_for_is_aeon_max_passes_itself() -> None:
    assert check_max_ttl(None, 8) is None


@pytest.mark.parametrize("asked", [9, 100, 101])
def test_a_cap_above_aeon_max_passes_is_refused_naming_both_and_what_to_do(asked: int) -> None:
    with pytest.raises(BadInput) as refused:
        check_max_ttl(asked, 8)
    message = str(refused.value)
    assert "\n" not in message
    assert f"max TTL {asked} is above AEON_MAX_PASSES=8" in message
    assert "ask for 8 or fewer, or set AEON_MAX_PASSES higher (at most 100)" in message


@pytest.mark.parametrize("asked", [0, -3])
def test_a_cap_below_one_is_refused(asked: int) -> None:
    with pytest.raises(BadInput, match=rf"max TTL {asked} is not a number of passes from 1 to 8"):
        check_max_ttl(asked, 8)


def _client(max_passes: int) -> AeonClient:
    """A client as the HTTP API holds one (not connected: checking a body needs no Redis)."""
    return AeonClient(
        settings=BusSettings(), loop=LoopSettings(max_passes=max_passes), file_limits=LIMITS
    )


def test_the_http_body_is_checked_against_the_servers_cap() -> None:
    assert _checked({"request": "Explain tides"}, _client(8))["max_ttl"] is None
    assert _checked({"request": "Explain tides", "max_ttl": 20}, _client(20))["max_ttl"] == 20
    with pytest.raises(ApiError) as refused:
        _checked({"request": "Explain tides", "max_ttl": 9}, _client(8))
    assert (refused.value.status, refused.value.field) == (422, "max_ttl")
    assert "above AEON_MAX_PASSES=8" in refused.value.reason


def test_a_requests_tools_are_names_each_once() -> None:
    assert check_tools(None) is None
    assert check_tools([]) == []
    assert check_tools(["add", " lookup ", "add"]) == ["add", "lookup"]
    for bad in (["two words"], [""], ["x" * 129], ["tab\there"]):
        with pytest.raises(BadInput, match="is not a tool name"):
            check_tools(bad)
    with pytest.raises(BadInput, match="a request may name at most 100"):
        check_tools([f"t{n}" for n in range(101)])


def test_a_narrowing_that_names_a_tool_no_server_offers_is_refused_where_known() -> None:
    unknown_tools(["add"], ["add", "lookup"])
    unknown_tools(None, [])
    with pytest.raises(BadInput) as refused:
        unknown_tools(["add", "weather"], ["add", "lookup"])
    assert str(refused.value) == "no tool named weather is configured; the tools: add, lookup"
    with pytest.raises(BadInput, match=r"the tools: none \(AEON_MCP_CONFIG is unset\)"):
        unknown_tools(["add"], [])


def test_the_http_bodys_tools_are_checked() -> None:
    assert _checked({"request": "Explain tides"}, _client(8))["tools"] is None
    body = {"request": "Explain tides", "tools": ["lookup"]}
    assert _checked(body, _client(8))["tools"] == ["lookup"]
    with pytest.raises(ApiError) as refused:  # the schema's pattern says it, so the body's
        _checked({"request": "Explain tides", "tools": ["add", "no such"]}, _client(8))
    assert (refused.value.status, refused.value.field) == (422, "tools.1")


def test_more_tools_than_the_schema_allows_are_refused_even_when_repeated() -> None:
    with pytest.raises(ApiError) as refused:
        _checked({"request": "Explain tides", "tools": ["add"] * 101}, _client(8))
    assert (refused.value.status, refused.value.field) == (422, "tools")
    with pytest.raises(BadInput, match="101 tools named; a request may name at most 100"):
        check_tools(["add"] * 101)


def test_one_port_option_with_its_lowest_port() -> None:
    """`aeon worker --metrics-port` (1 to 65535) and `aeon serve --port` (0: any free one)."""
    metrics, http = port_option(), port_option(lowest=0)
    assert metrics("9100") == 9100 and http("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="0 is not a port number from 1 to 65535"):
        metrics("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"from 0 \(any free one\) to 65535"):
        http("65536")
    with pytest.raises(argparse.ArgumentTypeError, match="'x' is not a port number"):
        http("x")


@pytest.mark.parametrize(
    ("check", "words"),
    [
        ({"type": "content", "search": "(tide"}, "'search' is not a valid regular expression"),
        ({"type": "pattern", "pattern": "(tide"}, "pattern /(tide/ does not compile"),
        ({"type": "json", "json_schema": {"pattern": "(x"}}, "not a sound JSON Schema"),
        # `re` knows no \p{...}; `regex`, which runs every pattern, does: its error is the one.
        ({"type": "pattern", "pattern": r"\p{NoSuchProperty}"}, "unknown property"),
    ],
)
def test_a_rules_pattern_that_does_not_compile_is_refused_in_one_line(
    check: dict[str, object], words: str
) -> None:
    with pytest.raises(BadInput) as refused:
        parse_rules([{"id": "r1", "check": check}])
    message = str(refused.value)
    assert "\n" not in message and words in message and "rule 0.check" in message


def test_rules_in_words_and_vocabulary_checks_are_taken() -> None:
    rules = parse_rules(
        [
            {"id": "short", "check": "the answer is under 100 words"},
            {"id": "bullets", "check": {"type": "count", "unit": "bullets", "min": 3, "max": 3}},
        ]
    )
    assert rules[0].in_words and rules[1].check_text() == "exactly 3 bullet line(s)"


def _slow_rules(count: int) -> list[dict[str, object]]:
    """Rules whose check is a pattern of the request's own, which backtracks (issue 41)."""
    return [
        {"id": f"slow-{i}", "check": {"type": "content", "search": "(a|aa)+#"}}
        for i in range(count)
    ]


def test_more_rules_with_patterns_of_their_own_than_the_cap_are_422() -> None:
    """Issue 41: 100 rules of backtracking patterns passed the gateways (100 is MAX_RULES);
    only MAX_PATTERN_RULES of a request's rules may carry a regular expression of their own."""
    assert len(parse_rules(_slow_rules(MAX_PATTERN_RULES))) == MAX_PATTERN_RULES
    body = {"request": "ok", "rules": _slow_rules(MAX_RULES)}
    with pytest.raises(ApiError) as refused:
        _checked(body, _client(8))
    assert (refused.value.status, refused.value.field) == (422, "rules")
    assert refused.value.reason.startswith(
        f"rules: {MAX_RULES} rules check a regular expression of their own"
    )
    assert f"the limit is {MAX_PATTERN_RULES}" in refused.value.reason


def test_the_pattern_cap_counts_pattern_checks_and_not_literal_words() -> None:
    patterns = [
        {"id": f"p{i}", "check": {"type": "pattern", "pattern": "x+"}}
        for i in range(MAX_PATTERN_RULES + 1)
    ]
    with pytest.raises(BadInput, match=f"{MAX_PATTERN_RULES + 1} rules check a regular"):
        parse_rules(patterns)
    words = [
        {"id": f"w{i}", "check": {"type": "forbidden_words", "words": ["x"]}}
        for i in range(MAX_RULES)
    ]
    assert len(parse_rules(words)) == MAX_RULES


def test_a_json_checks_schema_nested_past_its_bound_is_422() -> None:
    schema: dict[str, object] = {}
    inner = schema
    for _ in range(1000):
        inner["items"] = {}
        inner = inner["items"]  # type: ignore[assignment]
    check = {"type": "json", "json_schema": schema}
    body = {"request": "ok", "rules": [{"id": "a", "check": check}]}
    with pytest.raises(ApiError) as refused:
        _checked(body, _client(8))
    assert (refused.value.status, refused.value.field) == (422, "rules")
    assert "'json_schema' nests 1001 levels deep; at most 32" in refused.value.reason
