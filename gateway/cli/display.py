"""How the CLI shows a run's result (docs/requirements.md, FR-043..FR-046): for people, or JSON.

Both take the ExecutionResult as plain data (`model_dump(mode="json")`) or None, and return the
text to print: pure functions, so the CLI only prints and the tests only compare strings. They
read the data defensively (a result fetched from an older or newer worker may lack a key) and
never raise on a missing or partial answer (FR-046); the answer's metadata is read as its
`Outcome` (phases.outcome.outcome_of), never by key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aeonloop.phases import render
from aeonloop.phases.events import WebhookSettled
from aeonloop.phases.models import FinalAnswer
from aeonloop.phases.outcome import Outcome, outcome_of

NO_ANSWER = "No final answer available"
#: FR-044's warning for `ttl_exhausted`, named as the pass budget: not the request's timeout.
TTL_WARNING = "⚠️  Pass budget spent: the loop used all its passes (TTL) before converging"
TIMEOUT_WARNING = "⚠️  Timed out: the request's timeout passed before the loop finished"


def render_human(result: Mapping[str, Any] | None, *, written: bool = False) -> str:
    """FR-044: the answer first, then confidence, the TTL warning, notes and a metadata summary;
    a degraded answer also says why, one line each, as the HTTP API's `degraded_because` does
    (the exit in words, the checks or rules that failed with their messages, the error, the
    notes). An answer that was checked says how many checks held and which candidate it is,
    and names each check that did not hold. `written`: the answer's text was printed as it
    was written (`aeon ask` on a terminal), so the rest follows without it."""
    answer = _final_answer(result)
    if answer is None or not answer.get("answer_text"):
        return NO_ANSWER
    lines = [] if written else [f"Answer: {answer['answer_text']}"]
    confidence = answer.get("confidence")
    if _is_number(confidence):
        lines.append(f"Confidence: {round(confidence, 2)}")
    if answer.get("ttl_exhausted") is True:
        lines.append(TTL_WARNING)
    if (result or {}).get("status") == "deadline_exceeded":
        lines.append(TIMEOUT_WARNING)
    if answer.get("notes"):
        lines.append(f"Note: {answer['notes']}")
    because = degraded_because(result or {}, answer)
    if because:
        lines += ["Degraded because:", *(f"  - {line}" for line in because)]
    outcome = _outcome(answer) or outcome_of({})
    checks = render.checks_line(outcome)
    if checks:  # a degraded answer's lines above name the checks that did not hold already
        lines.append(f"Checks: {checks}")
        lines += [f"  - {render.check_held_line(c)}" for c in outcome.checks_held]
        if not because:
            lines += [f"  - {line}" for line in render.checks_not_held(outcome)]
    summary = metadata_summary(result or {}, answer)
    if summary:
        lines.append(f"Metadata: {summary}")
    return "\n".join(lines)


def render_json(
    result: Mapping[str, Any] | None,
    correlation_id: str,
    webhook: Mapping[str, Any] | None = None,
) -> str:
    """FR-045: the execution result's fields and `final_answer` as a top-level key, all fields;
    `webhook`, the outcome of the run's webhook (a WebhookSettled), when there is one.

    Without an answer, `final_answer` is null and `message` says so (FR-046).
    """
    data: dict[str, Any] = {"correlation_id": correlation_id}
    answer = _final_answer(result)
    if answer is None:
        data.update(final_answer=None, message=NO_ANSWER)
    else:
        data.update({k: v for k, v in (result or {}).items() if k != "final_answer"})
        data["final_answer"] = {name: answer.get(name) for name in FinalAnswer.model_fields}
    if webhook is not None:
        data["webhook"] = dict(webhook)
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def webhook_line(webhook: WebhookSettled) -> str:
    """One line of what became of a run's webhook."""
    tries = f"{webhook.tries} {'try' if webhook.tries == 1 else 'tries'}"
    if webhook.outcome == "delivered":
        return f"webhook delivered after {tries} (webhook-id {webhook.webhook_id})"
    return f"webhook failed after {tries} (webhook-id {webhook.webhook_id}): {webhook.reason}"


def metadata_summary(result: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    """One line of what matters about the run: status, effort, degradation and its reason, tokens.

    The raw upstream artifacts in the answer's metadata stay out of it; `--json` shows them.
    """
    outcome = _outcome(answer)
    usage = outcome.usage if outcome is not None else None
    degraded = _degraded(result, outcome)
    # What the run lacks matters only where it explains a degraded answer: a run answered by
    # its draft by choice (phases.spend) has no plan, and is none the worse for it.
    missing = outcome.missing_fields if outcome is not None and degraded != "no" else []
    parts = [
        _pair("status", _first(result.get("status"), outcome and outcome.stopped)),
        _pair("passes", _first(result.get("total_passes"), outcome and outcome.total_passes)),
        _pair(
            "refinement actions",
            _first(result.get("total_refinements"), outcome and outcome.total_refinements),
        ),
        _pair("degraded", degraded),
        _pair("missing", ", ".join(missing) or None),
        _pair("tokens", _tokens(result.get("usage") or (usage and usage.model_dump()))),
        _pair("elapsed", _seconds(result.get("elapsed_seconds"))),
    ]
    return "; ".join(part for part in parts if part)


def degraded_because(result: Mapping[str, Any], answer: Mapping[str, Any]) -> list[str]:
    """Why the answer is degraded, one plain line each (phases.render); empty when it is not."""
    outcome = _outcome(answer) or outcome_of({})
    degraded = _first(result.get("degraded"), outcome.degraded) is True
    return render.degraded_because(outcome.model_copy(update={"degraded": degraded}))


def _outcome(answer: Mapping[str, Any]) -> Outcome | None:
    """The answer's outcome; None when its metadata records nothing (another version's)."""
    metadata = answer.get("metadata")
    return outcome_of(metadata) if isinstance(metadata, Mapping) and metadata else None


def _final_answer(result: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    answer = result.get("final_answer") if isinstance(result, Mapping) else None
    return answer if isinstance(answer, Mapping) else None


def _degraded(result: Mapping[str, Any], outcome: Outcome | None) -> str | None:
    degraded = _first(result.get("degraded"), outcome and outcome.degraded)
    if degraded is None:
        return None
    if not degraded:
        return "no"
    return f"yes ({outcome.reason})" if outcome is not None else "yes"


def _tokens(usage: Any) -> str | None:
    if not isinstance(usage, Mapping):
        return None
    prompt, completion, calls = (
        usage.get(k) for k in ("prompt_tokens", "completion_tokens", "calls")
    )
    if not (_is_number(prompt) and _is_number(completion)):
        return None
    cached = usage.get("cached_tokens")
    reused = f", {cached} of it cached" if _is_number(cached) else ""
    text = f"{prompt + completion} (prompt {prompt}{reused}, completion {completion})"
    if _is_number(calls):
        text += f" in {calls} call(s)"
    repairs = usage.get("repair_calls")
    if _is_number(repairs) and repairs:
        text += f", {repairs} of them JSON repairs"
    if usage.get("estimated"):  # the offline model, or a server that sent no usage
        text = f"about {text}, estimated from text length (no LLM server counted them)"
    return text


def _seconds(value: Any) -> str | None:
    """Seconds to one decimal; under a second in milliseconds, so a fast run does not read 0.0s."""
    if not _is_number(value):
        return None
    return f"{value:.1f}s" if value >= 1 else f"{value * 1000:.0f} ms"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _pair(key: str, value: Any) -> str:
    return "" if value is None else f"{key}={value}"
