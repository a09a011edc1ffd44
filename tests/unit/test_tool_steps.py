"""Tool steps in the loop: a step naming a tool is done by calling it, once, after its checks.

The toolbox here is an in-process one (`RecordingToolbox`): these are tests of the loop's
logic. Real MCP servers are called in tests/e2e/test_tools.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aeonloop.exceptions import ToolCallFailed
from aeonloop.llm.offline import _plan_for_request
from aeonloop.phases import phase_b, phase_c
from aeonloop.phases.events import LoopExited, PlanReady, TaskProfiled
from aeonloop.phases.models import Plan, PlanStep
from aeonloop.phases.render import pass_line
from aeonloop.phases.tool_calls import offers
from aeonloop.prompts.registry import PlanGenerationInput, PromptId
from aeonloop.tools.base import ToolResult, ToolSpec
from tests.unit.test_phase_c import EVALUATE, REFINE, STEP

PLAN = PromptId.PLAN_GENERATION_USER
FIX_CALL = PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER
FIX_TOOL = PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    input_schema={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}},
        "required": ["a", "b"],
    },
    server="calc",
)
LOOKUP = ToolSpec(
    name="lookup",
    description="Look a key up.",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}},
    server="facts",
)


class RecordingToolbox:
    """Answers `add` with the sum, `lookup` with a fixed text, and anything else per `fail`."""

    def __init__(self, fail: BaseException | ToolResult | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any], str]] = []
        self.fail = fail

    def specs(self) -> list[ToolSpec]:
        return [ADD, LOOKUP]

    async def call(
        self, name: str, arguments: dict[str, Any], *, timeout: float, idempotency_key: str
    ) -> ToolResult:
        self.calls.append((name, arguments, idempotency_key))
        if isinstance(self.fail, BaseException):
            raise self.fail
        if self.fail is not None:
            return self.fail
        if name == "add":
            return ToolResult(text=str(arguments["a"] + arguments["b"]))
        return ToolResult(text=f"{arguments.get('key')}: the sea rises twice a day")


def script(replies, **more: Any) -> dict:
    return {
        STEP: replies.step_output,
        EVALUATE: replies.assessment(),
        REFINE: replies.refinement(),
        **more,
    }


def with_steps(event: PlanReady, *steps: PlanStep) -> PlanReady:
    event.run.plan = Plan(goal="a goal", steps=list(steps))
    return event


def tool_step(step_id: str, tool: str, arguments: dict[str, Any], **more: Any) -> PlanStep:
    return PlanStep(
        step_id=step_id, description=f"call {tool}", tool=tool, arguments=arguments, **more
    )


async def test_a_tool_steps_result_is_its_output_and_later_steps_see_it(
    harness, replies, make_plan_ready
) -> None:
    h = harness(script(replies))
    h.deps.tools = toolbox = RecordingToolbox()
    event = with_steps(
        make_plan_ready(),
        tool_step("t1", "add", {"a": 2, "b": 3}, depends_on=[]),
        PlanStep(step_id="s1", description="explain the sum", depends_on=["t1"]),
    )
    (out,) = await phase_c.handle(event, h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged"
    t1, _ = out.run.plan.steps
    assert t1.status == "done" and t1.output == "5"
    assert toolbox.calls == [("add", {"a": 2, "b": 3}, "run-1/c/p1/tool:t1")]
    assert h.llm.calls == [STEP, EVALUATE]  # no LLM call for the tool step
    assert "[t1] call add\n5" in h.llm.history[0].input.prior_outputs
    (call,) = out.run.passes[0].tool_calls
    assert (call.step_id, call.tool, call.outcome, call.excerpt) == ("t1", "add", "ok", "5")
    assert call.repaired is None


async def test_a_redelivered_pass_reads_the_memo_and_never_calls_again(
    harness, replies, make_plan_ready, delivered
) -> None:
    h = harness(script(replies))
    h.deps.tools = toolbox = RecordingToolbox()
    event = with_steps(make_plan_ready(), tool_step("t1", "add", {"a": 1, "b": 1}))
    first = await phase_c.handle(delivered(event), h.deps)
    again = await phase_c.handle(delivered(event), h.deps)
    assert len(toolbox.calls) == 1
    assert [e.event_id for e in first] == [e.event_id for e in again]
    assert again[0].run.passes[0].tool_calls == first[0].run.passes[0].tool_calls


async def test_invalid_arguments_get_one_repair_then_the_call(
    harness, replies, make_plan_ready
) -> None:
    fixed = json.dumps({"tool": "add", "arguments": {"a": 2, "b": 40}})
    h = harness(script(replies, **{FIX_CALL: fixed}))
    h.deps.tools = toolbox = RecordingToolbox()
    event = with_steps(make_plan_ready(), tool_step("t1", "add", {"a": "two", "b": 40}))
    (out,) = await phase_c.handle(event, h.deps)
    assert toolbox.calls == [("add", {"a": 2, "b": 40}, "run-1/c/p1/tool:t1")]
    assert h.llm.calls.count(FIX_CALL) == 1
    repair = h.llm.history[h.llm.calls.index(FIX_CALL)].input
    assert repair.error == "a: 'two' is not of type 'integer'"
    assert json.loads(repair.argument_schema) == ADD.input_schema
    assert json.loads(repair.malformed_call) == {"tool": "add", "arguments": {"a": "two", "b": 40}}
    (call,) = out.run.passes[0].tool_calls
    assert call.outcome == "ok" and call.repaired == "arguments" and call.excerpt == "42"
    assert out.run.plan.steps[0].arguments == {"a": 2, "b": 40}


async def test_arguments_still_invalid_after_the_repair_fail_the_step_uncalled(
    harness, replies, make_plan_ready
) -> None:
    still_bad = json.dumps({"tool": "add", "arguments": {"a": "two"}})
    h = harness(script(replies, **{FIX_CALL: still_bad}))
    h.deps.tools = toolbox = RecordingToolbox()
    event = with_steps(make_plan_ready(), tool_step("t1", "add", {"a": "two"}))
    (out,) = await phase_c.handle(event, h.deps)
    assert toolbox.calls == [] and h.llm.calls.count(FIX_CALL) == 1
    record = out.run.passes[0]
    assert "break its schema" in record.failed_steps["t1"]
    assert "'b' is a required property" in record.failed_steps["t1"]
    assert record.tool_calls[0].outcome == "invalid" and not record.converged


async def test_an_unknown_tool_is_rewritten_once_as_a_reasoning_step(
    harness, replies, make_plan_ready
) -> None:
    h = harness(script(replies, **{FIX_TOOL: "Estimate the tide height by reasoning."}))
    h.deps.tools = toolbox = RecordingToolbox()
    event = with_steps(make_plan_ready(), tool_step("t1", "tide_gauge", {"port": "Brest"}))
    (out,) = await phase_c.handle(event, h.deps)
    assert toolbox.calls == []
    assert h.llm.calls[:2] == [FIX_TOOL, STEP]
    repair = h.llm.history[0].input
    assert repair.tool_name == "tide_gauge" and repair.available_tools == ["add", "lookup"]
    (step,) = out.run.plan.steps
    assert step.tool is None and step.description == "Estimate the tide height by reasoning."
    assert step.status == "done"
    assert out.run.passes[0].tool_calls[0].outcome == "unknown"
    assert out.run.passes[0].tool_calls[0].repaired == "missing_tool"


async def test_a_request_narrowing_its_tools_cannot_call_the_others(
    harness, replies, make_plan_ready
) -> None:
    h = harness(script(replies, **{FIX_TOOL: "Say what the key means."}))
    h.deps.tools = toolbox = RecordingToolbox()
    event = with_steps(make_plan_ready(), tool_step("t1", "lookup", {"key": "tides"}))
    event.run.tools = ["add"]
    (out,) = await phase_c.handle(event, h.deps)
    assert toolbox.calls == []
    assert h.llm.history[0].input.available_tools == ["add"]
    assert out.run.passes[0].tool_calls[0].outcome == "unknown"


@pytest.mark.parametrize(
    ("fail", "outcome", "said"),
    [
        (ToolResult(text="division by zero", is_error=True), "error", "returned an error"),
        (ToolCallFailed("no answer within 0.5 s", timed_out=True), "timeout", "timed out"),
        (ToolCallFailed("connection refused"), "failed", "could not be called"),
    ],
)
async def test_a_tool_that_fails_fails_its_step_with_the_reason(
    harness, replies, make_plan_ready, fail, outcome, said
) -> None:
    h = harness(script(replies))
    h.deps.tools = RecordingToolbox(fail=fail)
    event = with_steps(make_plan_ready(), tool_step("t1", "add", {"a": 1, "b": 2}))
    (out,) = await phase_c.handle(event, h.deps)
    record = out.run.passes[0]
    assert record.failed_steps["t1"].startswith(f"tool add {said}")
    assert record.tool_calls[0].outcome == outcome and not record.converged
    assert out.run.plan.steps[0].status == "failed"  # it runs again next pass


async def test_the_plan_prompt_lists_the_runs_tools_and_the_host_flags_invented_ones(
    harness, replies, make_plan_ready
) -> None:
    planned = json.dumps(
        {
            "plan": {
                "goal": "g",
                "steps": [
                    {"step_id": "s1", "description": "d", "tool": "add", "arguments": {"a": 1}},
                    {"step_id": "s2", "description": "e", "tool": "weather", "arguments": {}},
                ],
            }
        }
    )
    h = harness({PLAN: planned, REFINE: replies.refinement()})
    h.deps.tools = RecordingToolbox()
    ready = make_plan_ready("x")
    ready.run.plan = None
    event = TaskProfiled(correlation_id="run-1", deadline=ready.deadline, run=ready.run)
    (out,) = await phase_b.handle(event, h.deps)
    offered = h.llm.history[0].input.tools
    assert [o.name for o in offered] == ["add", "lookup"]
    assert json.loads(offered[0].input_schema) == ADD.input_schema
    assert out.run.plan.steps[0].tool == "add" and out.run.plan.steps[0].arguments == {"a": 1}
    refine_input = h.llm.history[h.llm.calls.index(REFINE)].input
    assert "step s2 calls the tool 'weather', which is not available" in refine_input.issues
    assert "available tools: add, lookup" in refine_input.issues


async def test_a_tool_named_none_is_a_reasoning_step_not_an_unknown_tool(
    harness, replies, make_plan_ready
) -> None:
    """Issue 32: SmolLM2 wrote `"tool": "none"`, and each such step went to the missing-tool
    repair and showed as `none unknown` in the progress line."""
    said_none = ["none", "None", "null", "n/a", ""]
    steps = [
        {"step_id": f"s{i}", "description": f"think {i}", "tool": tool, "arguments": {}}
        for i, tool in enumerate(said_none, 1)
    ]
    planned = json.dumps({"plan": {"goal": "g", "steps": steps}})
    h = harness(script(replies, **{PLAN: planned}))
    h.deps.tools = toolbox = RecordingToolbox()
    ready = make_plan_ready("x")
    ready.run.plan = None
    event = TaskProfiled(correlation_id="run-1", deadline=ready.deadline, run=ready.run)
    (planned_event,) = await phase_b.handle(event, h.deps)
    plan = planned_event.run.plan
    assert [(s.tool, s.arguments) for s in plan.steps] == [(None, None)] * len(said_none)
    assert REFINE not in h.llm.calls  # no step calls a tool this run lacks: nothing to fix

    (out,) = await phase_c.handle(planned_event, h.deps)
    record = out.run.passes[0]
    assert FIX_TOOL not in h.llm.calls and toolbox.calls == []
    assert record.tool_calls == [] and len(record.executed_step_ids) == len(said_none)
    assert "unknown" not in pass_line(record)


def test_the_offline_model_plans_a_call_for_each_tool_the_request_names() -> None:
    request = "Use the tool add with a=2, then explain the result."
    data = PlanGenerationInput(request=request, tools=offers([ADD, LOOKUP]))
    steps = _plan_for_request(data)["plan"]["steps"]
    assert steps[0] == {
        "step_id": "t1",
        "description": 'Call the tool add with {"a": 2, "b": 1}',
        "depends_on": [],
        "tool": "add",
        "arguments": {"a": 2, "b": 1},  # b: the schema's default
    }
    assert [s["step_id"] for s in steps[1:]] == ["s1"]
    assert steps[1]["depends_on"] == ["t1"] and steps[1]["description"] == "Explain the result"


def test_the_offline_model_plans_no_tool_a_request_does_not_name() -> None:
    data = PlanGenerationInput(request="Add up the numbers in my head", tools=offers([ADD]))
    assert all("tool" not in s for s in _plan_for_request(data)["plan"]["steps"])


async def test_the_answers_metadata_lists_every_tool_call_with_its_pass(
    harness, replies, make_plan_ready
) -> None:
    from aeonloop.phases import phase_e, publish
    from aeonloop.phases.models import AnswerReason
    from aeonloop.phases.outcome import as_metadata

    h = harness(script(replies))
    h.deps.tools = RecordingToolbox()
    event = with_steps(make_plan_ready(), tool_step("t1", "add", {"a": 2, "b": 3}))
    (exited,) = await phase_c.handle(event, h.deps)
    e_input = phase_e.build_phase_e_input(exited)
    outcome = publish.build_outcome(e_input, AnswerReason.CONVERGED)
    (call,) = as_metadata(outcome)["tool_calls"]
    assert call["pass_number"] == 1 and call["tool"] == "add" and call["excerpt"] == "5"
    assert call["arguments"] == {"a": 2, "b": 3} and call["outcome"] == "ok"


def test_the_progress_line_of_a_pass_names_its_tool_calls() -> None:
    from aeonloop.phases.models import ExecutionPass, ToolCall
    from aeonloop.phases.render import pass_line

    record = ExecutionPass(
        pass_number=1,
        executed_step_ids=["t1"],
        failed_steps={"t2": "tool lookup timed out"},
        tool_calls=[
            ToolCall(step_id="t1", tool="add", outcome="ok"),
            ToolCall(step_id="t2", tool="lookup", outcome="timeout"),
        ],
    )
    assert "1 step(s) run, tool call(s): add ok, lookup timeout, did not complete: t2" in (
        pass_line(record)
    )


def test_the_offline_model_quotes_what_the_request_quotes_and_its_repair_reads_the_schema() -> None:
    from aeonloop.llm.offline import reply_text
    from aeonloop.prompts.registry import RepairToolCallInput

    data = PlanGenerationInput(request='Use the tool add with a="2" b=3', tools=offers([ADD]))
    (step, *_) = _plan_for_request(data)["plan"]["steps"]
    assert step["arguments"] == {"a": "2", "b": 3}
    repair = RepairToolCallInput(
        tool_name="add",
        malformed_call=json.dumps({"tool": "add", "arguments": step["arguments"]}),
        error="a: '2' is not of type 'integer'",
        argument_schema=json.dumps(ADD.input_schema),
    )
    fixed = json.loads(reply_text(FIX_CALL, repair))
    assert fixed == {"tool": "add", "arguments": {"a": 2, "b": 3}}
