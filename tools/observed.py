"""What one tool call records: a span, and the tool metrics (telemetry/), as llm.observed does
for LLM calls. Every call of `McpToolbox` passes through `tool_call`.

The span `execute_tool <name>` (the GenAI conventions' name) is a child of the hop's span and
carries the tool's name, its server and the call's outcome; never its arguments or result,
which may hold what a request's sender would not want in a tracing backend.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from aeonloop.telemetry import metrics, tracing

#: How a call ended: its tool answered (ok, or error with isError), it did not (timeout,
#: failed), or its caller stopped waiting (cancelled: the run was cancelled or stopped).
OUTCOMES = ("ok", "error", "timeout", "failed", "cancelled")

Outcome = Callable[[str], None]


@contextlib.contextmanager
def tool_call(tool: str, server: str) -> Iterator[Outcome]:
    """Record one call of `tool`; the block says its outcome by calling what it is given.
    A block left by an exception without saying one was cancelled."""
    outcome = "cancelled"

    def say(what: str) -> None:
        nonlocal outcome
        outcome = what

    started = time.perf_counter()
    with _span(tool, server) as span:
        try:
            yield say
        finally:
            metrics.tool_call(tool, outcome, time.perf_counter() - started)
            if span is not None:
                span.set_attribute("aeon.tool.outcome", outcome)
                if outcome != "ok":
                    span.set_attribute("error.type", outcome)


@contextlib.contextmanager
def _span(tool: str, server: str) -> Iterator[Any]:
    if not tracing.on():
        yield None
        return
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "aeon.tool.server": server,
    }
    with tracing.tracer().start_as_current_span(
        f"execute_tool {tool}", attributes=attributes, record_exception=False
    ) as span:
        yield span if span.is_recording() else None
