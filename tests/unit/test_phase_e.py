"""Phase E's three scenarios of seed 000 FR-051, and only those (FR-052).

Each calls `execute_phase_e()` directly, with a scripted LLM adapter (no fallback model) and the
real PromptRegistry: no bus, no Redis, no engine. Everything else about Phase E (robustness, the
input mapping, the handler, the dead-letter fallback) is in test_phase_e_handler.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aeonloop.phases.models import FinalAnswer, PhaseEInput
from aeonloop.phases.phase_e import execute_phase_e
from aeonloop.phases.upstream import ARTIFACT_FIELDS
from aeonloop.prompts.registry import PromptId

SYNTHESIS = PromptId.ANSWER_SYNTHESIS_USER
REQUEST = "Compare two ways to cache web pages and recommend one."

PLAN_STATE = {
    "goal": "recommend a caching strategy",
    "steps": [
        {"step_id": "s1", "description": "Describe CDN caching", "status": "done"},
        {"step_id": "s2", "description": "Describe browser caching", "status": "done"},
    ],
}
RESULTS = {"s1": "A CDN caches pages at the edge.", "s2": "Browsers cache with Cache-Control."}
ASSESSMENT = {
    "converged": True,
    "completeness_score": 0.97,
    "coherence_score": 0.95,
    "consistency": {"plan_aligned": True, "step_aligned": True, "answer_aligned": True},
    "reason_codes": [],
    "summary": "complete",
}
VALIDATION = {"issues": [], "summary": "no issues"}
PROFILE = {"reasoning_depth": 3, "information_sufficiency": 0.5, "profile_version": 1}
PASSES = [{"pass_number": 1, "executed_step_ids": ["s1", "s2"], "converged": True, "score": 0.96}]


def phase_e_input(**overrides: Any) -> PhaseEInput:
    """Complete execution state: every PhaseEInput field populated."""
    fields: dict[str, Any] = {
        "request": REQUEST,
        "correlation_id": "run-e",
        "execution_start_timestamp": datetime.now(UTC),
        "convergence_status": "converged",
        "total_passes": 1,
        "total_refinements": 1,
        "ttl_remaining": 3,
        "plan_state": PLAN_STATE,
        "execution_results": RESULTS,
        "convergence_assessment": ASSESSMENT,
        "execution_passes": PASSES,
        "semantic_validation": VALIDATION,
        "task_profile": PROFILE,
    }
    return PhaseEInput(**{**fields, **overrides})


def final_answer_json(text: str, confidence: float, notes: str | None = None) -> str:
    return json.dumps(
        {
            "answer_text": text,
            "confidence": confidence,
            "used_step_ids": ["s1", "s2"],
            "notes": notes,
        }
    )


async def test_successful_synthesis_with_complete_state(harness) -> None:
    """FR-051 (1): complete state, the adapter returns a valid FinalAnswer JSON."""
    text = "Use a CDN for shared pages and Cache-Control headers for the rest."
    h = harness({SYNTHESIS: final_answer_json(text, 0.9)})

    answer = await execute_phase_e(phase_e_input(), h.llm, h.deps.registry)

    assert isinstance(answer, FinalAnswer)
    assert answer.answer_text == text
    assert (answer.confidence, answer.used_step_ids) == (0.9, ["s1", "s2"])
    assert answer.ttl_exhausted is None
    metadata = answer.metadata
    assert (metadata["degraded"], metadata["reason"], metadata["missing_fields"]) == (
        False,
        "converged",
        [],
    )
    assert metadata["convergence_status"] == "converged"
    assert (metadata["total_passes"], metadata["total_refinements"]) == (1, 1)
    assert all(name in metadata for name in ARTIFACT_FIELDS), "FR-028: raw artifacts kept"
    sent = h.llm.history[0].input
    assert "A CDN caches pages at the edge." in sent.results_summary
    assert h.llm.calls == [SYNTHESIS]


async def test_ttl_exhausted(harness) -> None:
    """FR-051 (2): TTL ran out before convergence; the adapter returns a degraded answer."""
    h = harness(
        {SYNTHESIS: final_answer_json("CDN caching, most likely.", 0.4, "not fully checked")}
    )
    data = phase_e_input(convergence_status="ttl_exhausted", ttl_remaining=0, total_passes=3)

    answer = await execute_phase_e(data, h.llm, h.deps.registry)

    assert answer.ttl_exhausted is True
    # FR-027/FR-030 as docs/requirements.md reads them: the answer is the model's, so the early
    # exit is said beside it, in the notes, ahead of the model's own notes.
    assert answer.answer_text == "CDN caching, most likely."
    assert "TTL exhausted" in answer.notes
    assert "before converging" in answer.notes
    assert answer.confidence == 0.4 and answer.notes.endswith("\n\nnot fully checked")
    assert answer.metadata["degraded"] is True
    assert answer.metadata["reason"] == "ttl_exhausted"
    assert answer.metadata["ttl_remaining"] == 0
    assert h.llm.history[0].input.ttl_remaining == 0


async def test_incomplete_state(harness) -> None:
    """FR-051 (3): optional fields missing; the adapter returns a degraded answer, and the
    metadata names the missing fields."""
    h = harness({SYNTHESIS: final_answer_json("Probably a CDN; the results are partial.", 0.3)})
    data = phase_e_input(
        convergence_status="failed",
        execution_results=None,
        convergence_assessment=None,
        semantic_validation=None,
    )

    answer = await execute_phase_e(data, h.llm, h.deps.registry)

    expected_missing = ["execution_results", "convergence_assessment", "semantic_validation"]
    assert answer.metadata["missing_fields"] == expected_missing
    assert answer.metadata["degraded"] is True
    assert answer.metadata["reason"] == "incomplete_state"
    assert "exited early" in answer.notes  # beside the model's answer (FR-030, as read)
    assert answer.answer_text == "Probably a CDN; the results are partial."
    for name in expected_missing:
        assert name not in answer.metadata
    assert answer.metadata["plan_state"] == PLAN_STATE
    assert h.llm.history[0].input.missing_fields == expected_missing
    FinalAnswer.model_validate(answer.model_dump())
