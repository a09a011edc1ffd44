"""CLI display of the FinalAnswer (seed 000 FR-053): human-readable, JSON, and no answer at all.

The renderers take what the CLI has, an ExecutionResult dumped to plain data, so the tests build
real ExecutionResult models and dump them the same way.
"""

from __future__ import annotations

import json
from typing import Any

from aeonloop.contracts import Usage
from aeonloop.gateway.cli.display import NO_ANSWER, render_human, render_json
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import FinalAnswer


def result(**answer_fields: Any) -> dict[str, Any]:
    """A TTL-exhausted run's result, as `model_dump(mode="json")` gives it to the CLI."""
    answer = {
        "answer_text": "Use a CDN.",
        "confidence": 0.42,
        "used_step_ids": ["s1"],
        "notes": "Only one provider was compared.",
        "ttl_exhausted": True,
        "metadata": {
            "convergence_status": "ttl_exhausted",
            "total_passes": 3,
            "total_refinements": 2,
            "ttl_remaining": 0,
            "missing_fields": ["semantic_validation"],
            "degraded": True,
            "reason": "ttl_exhausted",
            "plan_state": {"goal": "a very long raw plan that the summary must leave out"},
        },
        **answer_fields,
    }
    return ExecutionResult(
        status="ttl_exhausted",
        degraded=True,
        total_passes=3,
        total_refinements=2,
        ttl_remaining=0,
        usage=Usage(prompt_tokens=1200, completion_tokens=300, calls=9),
        elapsed_seconds=12.34,
        final_answer=FinalAnswer(**answer),
    ).model_dump(mode="json")


def test_human_readable_format() -> None:
    """FR-053 (1): answer, confidence, TTL warning, notes and a metadata summary."""
    lines = render_human(result()).splitlines()

    assert lines[0] == "Answer: Use a CDN."
    assert "Confidence: 0.42" in lines
    assert any("Pass budget spent" in line for line in lines)
    assert not any("Timed out" in line for line in lines)  # the TTL is not the timeout
    assert "Note: Only one provider was compared." in lines
    (summary,) = [line for line in lines if line.startswith("Metadata: ")]
    for part in (
        "status=ttl_exhausted",
        "passes=3",
        "refinement actions=2",
        "degraded=yes (ttl_exhausted)",
        "missing=semantic_validation",
        "tokens=1500 (prompt 1200, completion 300) in 9 call(s)",
        "elapsed=12.3s",
    ):
        assert part in summary
    assert "raw plan" not in summary, "raw artifacts belong to --json, not the summary"


def test_estimated_usage_says_so_and_reported_usage_does_not() -> None:
    """Counts no LLM server reported (the offline model's, or a server's that sent no usage)
    read as an estimate, never as a count."""
    estimated = result()
    estimated["usage"]["estimated"] = True
    (summary,) = [line for line in render_human(estimated).splitlines() if "Metadata" in line]
    assert "tokens=about 1500 (prompt 1200, completion 300) in 9 call(s), estimated" in summary
    (counted,) = [line for line in render_human(result()).splitlines() if "Metadata" in line]
    assert "about" not in counted and "estimated" not in counted


def test_cached_prompt_tokens_show_where_a_server_reported_them() -> None:
    """Issue 42: the usage line says how much of the prompt the server's cache reused, and
    says nothing (not 0) where no server reported it."""
    cached = result()
    cached["usage"]["cached_tokens"] = 800
    (summary,) = [line for line in render_human(cached).splitlines() if "Metadata" in line]
    assert "tokens=1500 (prompt 1200, 800 of it cached, completion 300)" in summary
    (plain,) = [line for line in render_human(result()).splitlines() if "Metadata" in line]
    assert "cached" not in plain


def test_a_run_under_a_second_shows_milliseconds() -> None:
    fast = result() | {"elapsed_seconds": 0.016}
    (summary,) = [line for line in render_human(fast).splitlines() if line.startswith("Metadata")]
    assert "elapsed=16 ms" in summary


def test_human_readable_format_leaves_out_what_is_absent() -> None:
    text = render_human(result(confidence=None, notes=None, ttl_exhausted=None))
    assert text.startswith("Answer: Use a CDN.")
    assert "Confidence" not in text and "Note:" not in text and "Pass budget" not in text


def test_human_readable_format_of_a_complete_answer() -> None:
    data = result(ttl_exhausted=None)
    data.update(status="converged", degraded=False)
    data["final_answer"]["metadata"].update(degraded=False, reason="converged", missing_fields=[])
    summary = render_human(data).splitlines()[-1]
    assert "status=converged" in summary and "degraded=no" in summary
    assert "missing=" not in summary


def test_a_run_answered_by_its_draft_does_not_list_what_it_never_needed() -> None:
    """A simple ask ends on its draft (phases.spend): no plan, no passes, and not degraded. The
    fields it never made stay in the metadata (FR-038), but the summary does not list them as
    missing; a degraded run's summary does (test_human_readable_format)."""
    data = result(ttl_exhausted=None)
    data.update(status="converged", degraded=False)
    data["final_answer"]["metadata"].update(degraded=False, reason="converged")
    summary = render_human(data).splitlines()[-1]
    assert "degraded=no" in summary and "missing=" not in summary
    assert data["final_answer"]["metadata"]["missing_fields"]


def test_json_format() -> None:
    """FR-053 (2): final_answer as a top-level key with every FinalAnswer field."""
    data = result()
    payload = json.loads(render_json(data, "cid-123"))

    assert payload["correlation_id"] == "cid-123"
    assert set(payload["final_answer"]) == set(FinalAnswer.model_fields)
    assert payload["final_answer"] == data["final_answer"]
    assert (payload["status"], payload["degraded"], payload["total_passes"]) == (
        "ttl_exhausted",
        True,
        3,
    )
    assert payload["usage"] == {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "calls": 9,
        "estimated": False,
        "local_repairs": 0,
        "repair_calls": 0,
        "token_budget": None,
        "cost": None,  # priced by a gateway's table (aeonloop.tenants); `aeon ask` has none
        "cached_tokens": None,  # no server reported its cache
    }


def test_json_format_lists_every_field_even_when_the_stored_answer_omits_some() -> None:
    data = result()
    del data["final_answer"]["notes"]
    payload = json.loads(render_json(data, "cid"))
    assert set(payload["final_answer"]) == set(FinalAnswer.model_fields)
    assert payload["final_answer"]["notes"] is None


def test_missing_final_answer_is_handled() -> None:
    """FR-053 (3): no answer → a message, never a crash, in both formats."""
    assert render_human(None) == NO_ANSWER == "No final answer available"
    assert render_human({"status": "failed"}) == NO_ANSWER
    assert render_human({"final_answer": None}) == NO_ANSWER
    assert render_human({"final_answer": {"answer_text": ""}}) == NO_ANSWER
    payload = json.loads(render_json(None, "cid-9"))
    assert payload == {"correlation_id": "cid-9", "final_answer": None, "message": NO_ANSWER}


def test_partial_data_does_not_crash() -> None:
    """A result from another version of the worker may lack keys or have odd values."""
    data = {"final_answer": {"answer_text": "Hi", "confidence": "high", "metadata": None}}
    assert render_human(data) == "Answer: Hi"
    payload = json.loads(render_json(data, "cid"))
    assert payload["final_answer"]["answer_text"] == "Hi"


def test_a_timed_out_run_says_timeout_not_pass_budget() -> None:
    data = result(ttl_exhausted=None)
    data["status"] = "deadline_exceeded"

    text = render_human(data)

    assert "Timed out: the request's timeout passed" in text
    assert "Pass budget" not in text


def test_a_degraded_answer_says_why_naming_the_failed_rules_and_the_exit_in_words() -> None:
    """Issue: a run whose rule failed said only "stagnated"; the rule id was in --json alone."""
    data = result(ttl_exhausted=None)
    data.update(status="stagnated")
    data["final_answer"]["metadata"].update(
        reason="not_converged",
        convergence_status="stagnated",
        exit_detail="the score moved less than 0.02 on two passes in a row",
        failed_rules=[
            {"id": "no-tbd", "severity": "fail", "message": "leaves no TBD: /TBD/ found: 'TBD'"}
        ],
    )

    lines = render_human(data).splitlines()

    start = lines.index("Degraded because:")
    assert lines[start + 1 : start + 4] == [
        "  - the loop exited early, before converging: stopped improving",
        "  - why: the score moved less than 0.02 on two passes in a row",
        "  - failed rule no-tbd: leaves no TBD: /TBD/ found: 'TBD'",
    ]
    assert lines[-1].startswith("Metadata: "), "the summary stays last"


def test_an_answer_that_is_not_degraded_gives_no_reasons() -> None:
    data = result(ttl_exhausted=None)
    data.update(status="converged", degraded=False)
    data["final_answer"]["metadata"].update(degraded=False, reason="converged", missing_fields=[])
    assert "Degraded because:" not in render_human(data)
