"""Runs whose steps call tools of real MCP servers (the SDK's, tests/mcp_servers/tools.py), over
stdio and streamable HTTP, through `aeon ask` and real workers: results reach the answer, the
checks and their one repair, timeouts and errors, a request's narrowing, and worker kills
while tools run (each call made once per (run, pass, step) outside the documented window)."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Bus, Processes, Worker, assert_answered_once, child_env, wait_until
from mcp_fixtures import calls, http_server, stdio_entry
from test_clear_errors import assert_one_line

from aeonloop.tools.mcp import IDEMPOTENCY_META_KEY

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TWO_TOOLS = "Use the tools add with a=2 b=3 and web_lookup with key=tides, then explain the results"


def _config(tmp_path: Path, servers: dict[str, Any]) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return str(path)


def _ask(procs: Processes, env: dict[str, str], *args: str) -> dict[str, Any]:
    ask = procs.run_aeon(env, "ask", "--json", *args, timeout=90)
    assert ask.returncode in (0, 1), ask.tail()
    assert "Traceback" not in ask.stderr
    return json.loads(ask.stdout)


def _tool_calls(result: dict[str, Any]) -> list[dict[str, Any]]:
    return result["final_answer"]["metadata"].get("tool_calls", [])


def test_a_run_uses_two_tools_over_stdio_and_http(procs: Processes, tmp_path: Path) -> None:
    local, web = tmp_path / "local.calls", tmp_path / "web.calls"
    with http_server(MCP_TEST_PREFIX="web_", MCP_TEST_CALLS=str(web)) as url:
        config = _config(
            tmp_path, {"calc": stdio_entry(MCP_TEST_CALLS=str(local)), "facts": {"url": url}}
        )
        result = _ask(procs, child_env(AEON_MCP_CONFIG=config), TWO_TOOLS)
    cid = result["correlation_id"]
    add, lookup = _tool_calls(result)
    assert (add["tool"], add["outcome"], add["excerpt"], add["pass_number"]) == (
        "add",
        "ok",
        "5",
        1,
    )
    assert add["arguments"] == {"a": 2, "b": 3}
    assert (lookup["tool"], lookup["outcome"]) == ("web_lookup", "ok")
    assert lookup["excerpt"] == "the answer to tides is 42"
    answer = result["final_answer"]["answer_text"]
    assert "the answer to tides is 42" in answer and "[t1]\n5" in answer
    # Each server was called once, with the step's idempotency key.
    (to_add,) = calls(local)
    (to_lookup,) = calls(web)
    assert to_add["arguments"] == {"a": 2, "b": 3}
    assert to_add["meta"][IDEMPOTENCY_META_KEY] == f"{cid}/c/p1/tool:t1"
    assert to_lookup["meta"][IDEMPOTENCY_META_KEY] == f"{cid}/c/p1/tool:t2"


def test_invalid_arguments_are_repaired_once_before_the_call(
    procs: Processes, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    config = _config(tmp_path, {"calc": stdio_entry(MCP_TEST_CALLS=str(log))})
    # A quoted value stays a string in the offline model's plan: "2" breaks add's integer a.
    result = _ask(
        procs, child_env(AEON_MCP_CONFIG=config), 'Use the tool add with a="2" b=40, then say it'
    )
    (call,) = _tool_calls(result)
    assert (call["outcome"], call["repaired"], call["excerpt"]) == ("ok", "arguments", "42")
    assert [c["arguments"] for c in calls(log)] == [{"a": 2, "b": 40}]  # one call, repaired


def test_an_unknown_tool_is_rewritten_once_and_nothing_is_called(
    procs: Processes, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    config = _config(tmp_path, {"calc": stdio_entry(MCP_TEST_CALLS=str(log))})
    invented = {
        "plan": {
            "goal": "say the weather",
            "steps": [
                {"step_id": "s1", "description": "Get the weather", "tool": "weather"},
                {"step_id": "s2", "description": "Say it", "depends_on": ["s1"]},
            ],
        }
    }
    script = tmp_path / "llm.json"  # the plan from the script, every other reply offline
    script.write_text(json.dumps({"PLAN_GENERATION_USER": json.dumps(invented)}))
    env = child_env(AEON_MCP_CONFIG=config, AEON_LLM="scripted", AEON_LLM_SCRIPT=str(script))
    result = _ask(procs, env, "What is the weather in Brest?", "--max-ttl", "1")
    (call,) = _tool_calls(result)
    assert (call["tool"], call["outcome"], call["repaired"]) == (
        "weather",
        "unknown",
        "missing_tool",
    )
    plan = result["final_answer"]["metadata"]["plan_state"]
    assert plan["steps"][0]["tool"] is None
    assert "by reasoning alone" not in plan["steps"][0]["description"]  # add was offered
    assert calls(log) == []


@pytest.mark.parametrize(
    ("tool", "outcome", "said"),
    [("hang", "timeout", "timed out"), ("fail", "error", "the tool failed on purpose")],
)
def test_a_tool_that_hangs_or_fails_fails_its_step_and_the_run_is_answered(
    procs: Processes, tmp_path: Path, tool: str, outcome: str, said: str
) -> None:
    log = tmp_path / "calls"
    config = _config(tmp_path, {"calc": stdio_entry(MCP_TEST_CALLS=str(log))})
    env = child_env(AEON_MCP_CONFIG=config, AEON_TOOL_TIMEOUT_S="1", AEON_MAX_PASSES="1")
    result = _ask(procs, env, f"Use the tool {tool}, then report what it said")
    (call,) = _tool_calls(result)
    assert call["outcome"] == outcome and said in call["excerpt"]
    assert result["degraded"] is True  # the step failed: the pass could not converge
    assert [c["tool"] for c in calls(log)] == [tool]


def test_a_request_narrowing_its_tools_calls_only_those(procs: Processes, tmp_path: Path) -> None:
    log = tmp_path / "calls"
    config = _config(tmp_path, {"calc": stdio_entry(MCP_TEST_CALLS=str(log))})
    env = child_env(AEON_MCP_CONFIG=config)
    request = "Use the tools add with a=1 b=2 and lookup with key=moon, then explain"
    result = _ask(procs, env, request, "--tools", "lookup")
    assert [c["tool"] for c in _tool_calls(result)] == ["lookup"]
    assert [c["tool"] for c in calls(log)] == ["lookup"]
    refused = procs.run_aeon(env, "ask", request, "--tools", "lookup,nosuch", timeout=60)
    assert_one_line(refused, 2, "no tool named nosuch is configured; the tools: add, fail, hang")


REQUESTS = 24


@pytest.mark.timeout(180)
def test_workers_killed_while_tools_run(
    procs: Processes, bus: Bus, env: dict[str, str], tmp_path: Path
) -> None:
    """Two workers, each with its own stdio server (0.5 s a call), 24 runs that call `add`; one
    worker is SIGKILLed three times while it holds entries (before any answer, at a quarter
    and at half of them). Every run is answered once; the
    servers' own count is one call per (run, pass, step), and a key called twice (the window
    between a call and its memo write) is one the killed worker was calling."""
    log = tmp_path / "calls"
    config = _config(
        tmp_path, {"calc": stdio_entry(MCP_TEST_CALLS=str(log), MCP_TEST_DELAY_S="0.5")}
    )
    worker_env = {**env, "AEON_MCP_CONFIG": config, "AEON_LLM_DELAY_MS": "40"}

    def start(name: str) -> Worker:
        return procs.worker(worker_env, "--concurrency", "4", name=name)

    start("steady")
    victim = start("victim")
    gateway = procs.gateway(
        env, REQUESTS, timeout=120, request="Use the tool add with a=2 b=3, then explain it"
    )
    wait_until(lambda: len(gateway.submitted()) == REQUESTS, 30, "the burst to be submitted")
    kills = 0
    for threshold in (0, REQUESTS // 4, REQUESTS // 2):
        wait_until(lambda t=threshold: len(bus.answer_cids()) >= t, 90, f"{threshold} answers")
        wait_until(lambda v=victim: bus.pending(v.consumer), 30, "the victim to hold entries")
        victim.kill()
        kills += 1
        victim = start("victim")

    assert gateway.wait(150) == 0, gateway.tail()
    submitted = gateway.submitted()
    assert_answered_once(bus, submitted)
    keys = collections.Counter(c["meta"][IDEMPOTENCY_META_KEY] for c in calls(log))
    runs = {key.split("/", 1)[0] for key in keys}
    assert runs == set(submitted), "a run's tool was never called"
    assert all(key.endswith("/c/p1/tool:t1") for key in keys)  # the step ran in pass 1 only
    twice = [key for key, count in keys.items() if count > 1]
    assert all(keys[key] == 2 for key in twice), keys
    # Only calls in flight at a kill can be repeated: at most the victim's 4 slots per kill.
    assert len(twice) <= 4 * kills, twice
    print(
        f"\n{REQUESTS} runs, {kills} kills: {sum(keys.values())} calls for {len(keys)} steps, "
        f"{len(twice)} repeated inside the window"
    )
