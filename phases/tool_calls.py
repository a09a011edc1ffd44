"""Tool steps: a plan step that names a tool is done by calling it, once (docs/tools.md).

Before the call, the host checks what the model wrote, and gives each kind of mistake one
repair (docs/requirements.md, FR-005):

- a tool this run does not have (none of that name, or narrowed away by the request's `tools`):
  one SUPERVISOR_REPAIR_MISSINGTOOL_USER call rewrites the step's description, and the step is
  done by the model as a reasoning step;
- arguments that break the tool's input schema: one SUPERVISOR_REPAIR_TOOLCALL_USER call
  rewrites the call; arguments still wrong after it fail the step, and nothing is called.

The call is made once per (run, pass, step). Its result is memoised like an LLM reply, under
that triple, before the hop commits; a redelivered event reads the memo and never calls the
tool again. The one window where a tool can run twice is a worker killed between the call and
its memo write; the call's request metadata carries the same triple as an idempotency key, so
a tool that cares can drop the repeat (docs/delivery.md, "Tool calls").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel

from aeonloop.bus.keys import memo_key, memo_scope
from aeonloop.exceptions import JSONExtractionError, LLMFailure, ToolCallFailed
from aeonloop.llm.session import LLMSession, as_json_text
from aeonloop.phases import summaries
from aeonloop.phases.models import Plan, PlanStep, ToolCall, ToolOutcome, ValidationIssue
from aeonloop.prompts.clipping import STORED_MARKER, clip
from aeonloop.prompts.extraction import extract_json
from aeonloop.prompts.registry import (
    PromptId,
    RepairMissingToolInput,
    RepairToolCallInput,
    ToolOffer,
)
from aeonloop.tools.base import Toolbox, ToolResult, ToolSpec

#: Characters of a result (or of why there is none) a ToolCall keeps for display.
EXCERPT_CHARS = 300
#: Errors of a schema check shown to the repair and in the step's reason.
MAX_SCHEMA_ERRORS = 3


def available(toolbox: Toolbox, wanted: Sequence[str] | None) -> list[ToolSpec]:
    """The tools a run may call: the toolbox's, narrowed to `wanted` (the request's `tools`;
    None: all). A request can only narrow: a name no server offers adds nothing."""
    specs = toolbox.specs()
    if wanted is None:
        return specs
    names = set(wanted)
    return [spec for spec in specs if spec.name in names]


def offers(specs: Sequence[ToolSpec]) -> list[ToolOffer]:
    """The tools as plan generation lists them."""
    return [
        ToolOffer(
            name=spec.name,
            description=spec.description,
            input_schema=orjson.dumps(spec.input_schema).decode(),
        )
        for spec in specs
    ]


def invented_tools(plan: Plan, specs: Sequence[ToolSpec]) -> list[ValidationIssue]:
    """One high-severity issue for each step that names a tool this run does not have: the
    host's part of a plan's semantic validation, since no model is needed to see it."""
    names = {spec.name for spec in specs}
    return [
        ValidationIssue(
            kind="unknown_tool",
            severity="high",
            description=f"step {step.step_id} calls the tool {step.tool!r}, which is not "
            f"available; available tools: {', '.join(sorted(names)) or 'none'}",
            step_id=step.step_id,
        )
        for step in plan.steps
        if step.tool is not None and step.tool not in names and not step.executed
    ]


def schema_errors(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """Why `arguments` break the tool's input schema (None: they do not)."""
    # Imported here: jsonschema and its dependencies weigh about 10 MB and 30 ms in every
    # worker, and only a run whose plan calls a tool needs them.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        validator = Draft202012Validator(spec.input_schema)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    except SchemaError:  # the server's own schema is broken: the server judges the call
        return None
    if not errors:
        return None
    said = [
        f"{'/'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}"
        for e in errors[:MAX_SCHEMA_ERRORS]
    ]
    return "; ".join(said)


@dataclass(frozen=True)
class ToolRunner:
    """What Phase C needs to call a run's tools: the toolbox, the tools the run may call, and
    the bound on each call."""

    toolbox: Toolbox
    specs: tuple[ToolSpec, ...]
    timeout: float

    def spec(self, name: str) -> ToolSpec | None:
        return next((spec for spec in self.specs if spec.name == name), None)


@dataclass(frozen=True)
class ToolStepResult:
    """What a tool step came to: the step as it now stands (a missing tool's repair rewrites
    it as a reasoning step), the call's record, and the output or why there is none."""

    step: PlanStep
    call: ToolCall
    output: str | None = None
    failed: str | None = None

    @property
    def needs_model(self) -> bool:
        """The step was rewritten as a reasoning step: the model does it now."""
        return self.step.tool is None


class _Memoised(BaseModel):
    """A tool call as its memo keeps it: enough to record it again without calling."""

    arguments: dict[str, Any]
    outcome: ToolOutcome
    seconds: float
    text: str


async def run_tool_step(
    session: LLMSession,
    runner: ToolRunner,
    step: PlanStep,
    number: int,
    output_chars: int,
) -> ToolStepResult:
    """Check the step's tool and arguments (one repair each), then call the tool once."""
    assert step.tool is not None
    spec = runner.spec(step.tool)
    if spec is None:
        return await _without_tool(session, runner, step, number)
    arguments = step.arguments or {}
    repaired = None
    problem = schema_errors(spec, arguments)
    if problem is not None:
        arguments, problem = await _repaired_arguments(
            session, spec, arguments, problem, step, number
        )
        repaired = "arguments"
    if problem is not None:
        reason = f"the arguments of tool {spec.name} break its schema: {problem}"
        call = ToolCall(
            step_id=step.step_id,
            tool=spec.name,
            arguments=arguments,
            outcome="invalid",
            excerpt=clip(reason, EXCERPT_CHARS),
            repaired=repaired,
        )
        return ToolStepResult(step, call, failed=reason)
    done = await _called_once(session, runner, spec, arguments, step, number)
    call = ToolCall(
        step_id=step.step_id,
        tool=spec.name,
        arguments=arguments,
        outcome=done.outcome,
        seconds=done.seconds,
        excerpt=clip(done.text, EXCERPT_CHARS),
        repaired=repaired,
    )
    step = step.model_copy(update={"arguments": arguments})
    if done.outcome == "ok":
        return ToolStepResult(step, call, output=clip(done.text, output_chars, STORED_MARKER))
    what = {"error": "returned an error", "timeout": "timed out", "failed": "could not be called"}
    said = summaries.first_line(done.text, 200)
    return ToolStepResult(step, call, failed=f"tool {spec.name} {what[done.outcome]}: {said}")


async def _without_tool(
    session: LLMSession, runner: ToolRunner, step: PlanStep, number: int
) -> ToolStepResult:
    """The missing-tool repair: the step rewritten to be done by reasoning (or, if the repair
    fails, its description kept as it was)."""
    data = RepairMissingToolInput(
        tool_name=step.tool or "",
        available_tools=[spec.name for spec in runner.specs],
        step_description=step.description,
    )
    scope = memo_scope("c", "missing-tool", pass_number=number, step=step.step_id)
    try:
        reply = await session.text(PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER, data, scope=scope)
        description = reply.text.strip() or step.description
    except LLMFailure:
        description = step.description
    call = ToolCall(
        step_id=step.step_id,
        tool=step.tool or "",
        arguments=step.arguments or {},
        outcome="unknown",
        excerpt=f"no tool {step.tool!r} here; the step was rewritten for the model",
        repaired="missing_tool",
    )
    rewritten = step.model_copy(
        update={"tool": None, "arguments": None, "description": description}
    )
    return ToolStepResult(rewritten, call)


async def _repaired_arguments(
    session: LLMSession,
    spec: ToolSpec,
    arguments: dict[str, Any],
    problem: str,
    step: PlanStep,
    number: int,
) -> tuple[dict[str, Any], str | None]:
    """The arguments after the one tool-call repair, and what is still wrong with them."""
    data = RepairToolCallInput(
        tool_name=spec.name,
        malformed_call=as_json_text({"tool": spec.name, "arguments": arguments}),
        error=problem,
        argument_schema=orjson.dumps(spec.input_schema).decode(),
    )
    scope = memo_scope("c", "tool-call", pass_number=number, step=step.step_id)
    try:
        reply = await session.text(PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER, data, scope=scope)
        found = extract_json(reply.text)
    except (LLMFailure, JSONExtractionError) as error:
        return arguments, f"{problem} (its repair gave nothing usable: {error})"
    fixed = found.get("arguments", found) if isinstance(found, dict) else None
    if not isinstance(fixed, dict):
        return arguments, f"{problem} (its repair gave no argument object)"
    return fixed, schema_errors(spec, fixed)


async def _called_once(
    session: LLMSession,
    runner: ToolRunner,
    spec: ToolSpec,
    arguments: dict[str, Any],
    step: PlanStep,
    number: int,
) -> _Memoised:
    """The call's outcome: from the memo if this (run, pass, step) called it before, else
    from one call, memoised before it is returned."""
    scope = memo_scope("c", "tool", pass_number=number, step=step.step_id)
    key = memo_key(session.run_key, scope, "tool")
    remembered = await session.memo.get(key)
    if remembered is not None:
        return _Memoised.model_validate_json(remembered)
    if session.check_cancelled is not None:
        await session.check_cancelled()
    started = time.perf_counter()
    try:
        result = await runner.toolbox.call(
            spec.name,
            arguments,
            timeout=_bounded(runner.timeout, session.deadline),
            idempotency_key=f"{session.run_key}/{scope}",
        )
        outcome: ToolOutcome = "error" if result.is_error else "ok"
    except ToolCallFailed as error:
        result = ToolResult(text=str(error), is_error=True)
        outcome = "timeout" if error.timed_out else "failed"
    done = _Memoised(
        arguments=arguments,
        outcome=outcome,
        seconds=round(time.perf_counter() - started, 3),
        text=result.text,
    )
    await session.memo.put(key, done.model_dump_json(), session.deadline)
    return done


def _bounded(timeout: float, deadline: datetime | None) -> float:
    """The call's timeout, never past the run's deadline (and never below a moment)."""
    if deadline is None:
        return timeout
    left = (deadline - datetime.now(UTC)).total_seconds()
    return max(0.001, min(timeout, left))
