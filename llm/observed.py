"""What one LLM call records: a span in the GenAI semantic conventions, and the LLM metrics
(telemetry/). Every adapter's calls pass through `complete` (llm.session).

The span `chat <model>` is a child of the hop's span. It carries the model asked for
and the one that answered, the token counts, the finish reason, Aeon's prompt id, and an event
per retry (the adapter's, `aeon.llm.retry`). Prompt and reply text only with
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (telemetry.tracing).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import orjson

from aeonloop.llm.base import LLMAdapter, LLMCall, LLMReply
from aeonloop.telemetry import metrics, tracing


def model_of(llm: LLMAdapter) -> str:
    """The model an adapter asks for, as metrics and spans name it: its configured model,
    else its family (the offline and scripted adapters have no model name)."""
    return str(getattr(llm, "model", None) or llm.family)


async def complete(llm: LLMAdapter, call: LLMCall) -> LLMReply:
    """`llm.complete(call)`, recorded when tracing or metrics are on."""
    if not (tracing.on() or metrics.enabled()):
        return await llm.complete(call)
    model, prompt_id = model_of(llm), call.prompt_id.value
    started = time.perf_counter()
    with _span(llm, call, model) as span:
        try:
            reply = await llm.complete(call)
        except Exception as error:
            metrics.llm_error(prompt_id, model, time.perf_counter() - started)
            if span is not None:
                span.set_attribute("error.type", type(error).__name__)
            raise
        used = reply.usage
        seconds = time.perf_counter() - started
        metrics.llm_call(prompt_id, model, seconds, used.prompt_tokens, used.completion_tokens)
        if span is not None:
            _describe_reply(span, reply)
        return reply


@contextlib.contextmanager
def _span(llm: LLMAdapter, call: LLMCall, model: str) -> Iterator[Any]:
    if not tracing.on():
        yield None
        return
    from opentelemetry.trace import SpanKind

    with tracing.tracer().start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT) as span:
        if span.is_recording():  # sampled: say what the call was
            span.set_attributes(_call_attributes(llm, call, model))
            yield span
        else:
            yield None


def _call_attributes(llm: LLMAdapter, call: LLMCall, model: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": llm.family,
        "gen_ai.request.model": model,
        "aeon.prompt_id": call.prompt_id.value,
        "gen_ai.output.type": "json" if call.response_schema is not None else "text",
    }
    if tracing.capture_content():
        messages = [
            {"role": "system", "parts": [{"type": "text", "content": call.prompt.system_prompt}]},
            {"role": "user", "parts": [{"type": "text", "content": call.message}]},
        ]
        attributes["gen_ai.input.messages"] = orjson.dumps(messages).decode()
    return attributes


def _describe_reply(span: Any, reply: LLMReply) -> None:
    finish = "length" if reply.truncated else "content_filter" if reply.refused else "stop"
    attributes: dict[str, Any] = {
        "gen_ai.response.model": reply.model,
        "gen_ai.response.finish_reasons": [finish],
        "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
    }
    if reply.usage.estimated:
        attributes["aeon.usage_estimated"] = True
    if tracing.capture_content():
        output = [{"role": "assistant", "parts": [{"type": "text", "content": reply.text}]}]
        attributes["gen_ai.output.messages"] = orjson.dumps(output).decode()
    span.set_attributes(attributes)


def retry(model: str, attempt: int, error: Exception) -> None:
    """An adapter is about to try a failed call again: counted, and an event on its span."""
    metrics.llm_retry(model)
    tracing.add_event(
        "aeon.llm.retry",
        **{"aeon.attempt": attempt, "error.type": type(error).__name__, "aeon.error": str(error)},
    )


def memo_hit(prompt_id: str) -> None:
    """A reply taken from the memo: no call made."""
    metrics.llm_memo_hit(prompt_id)
    tracing.add_event("aeon.llm.memo_hit", **{"aeon.prompt_id": prompt_id})
