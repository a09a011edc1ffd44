"""Phase E beyond FR-051's three scenarios: it never raises, the input mapping from the run, the
bus handler (memo, usage, deterministic ids, deadline) and the dead-letter fallback.

The LLM is a ScriptedLLM without a fallback model (tests/unit/conftest.py's `harness`), so an
unscripted prompt is an LLMError, and `h.llm.calls` shows exactly which calls were made.
"""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aeonloop.contracts import Usage
from aeonloop.llm.base import LLMError
from aeonloop.llm.offline import OfflineLLM
from aeonloop.phases import phase_e, publish, upstream
from aeonloop.phases.events import FinalAnswerReady, LoopExited, RunState, derived_id, utcnow
from aeonloop.phases.models import (
    AnswerReason,
    Consistency,
    ConvergenceAssessment,
    ExecutionPass,
    FinalAnswer,
    PhaseEInput,
    Plan,
    PlanStep,
    SemanticValidationReport,
    TaskProfile,
    ValidationIssue,
)
from aeonloop.phases.phase_e import LOST_REQUEST, build_phase_e_input, execute_phase_e
from aeonloop.prompts.echo import quoted_instruction
from aeonloop.prompts.errors import PromptNotFoundError
from aeonloop.prompts.registry import PromptId, PromptRegistry

SYNTHESIS = PromptId.ANSWER_SYNTHESIS_USER
REPAIR = PromptId.SUPERVISOR_REPAIR_JSON_USER
REQUIRED_METADATA = {
    "convergence_status",
    "total_passes",
    "total_refinements",
    "ttl_remaining",
    "missing_fields",
    "degraded",
    "reason",
}


def reply(text: str = "The answer.", used: list[str] | None = None, **extra: Any) -> str:
    fields = {"answer_text": text, "confidence": 0.8, "used_step_ids": used or [], **extra}
    return json.dumps(fields)


def a_run(passes: int = 1, converged: bool = True) -> RunState:
    """A run as C leaves it: s1 done, s2 blocked, one pass with validation and assessment."""
    steps = [
        PlanStep(
            step_id="s1", description="Explain", status="done", output="Tides follow the Moon."
        ),
        PlanStep(step_id="s2", description="Simplify", status="failed", executed_in_pass=1),
        PlanStep(step_id="s3", description="Review"),
    ]
    record = ExecutionPass(
        pass_number=1,
        executed_step_ids=["s1"],
        blocked_step_ids=["s2"],
        validation=SemanticValidationReport(
            issues=[ValidationIssue(severity="low", description="no review yet")]
        ),
        assessment=ConvergenceAssessment(
            converged=converged,
            completeness_score=0.9,
            coherence_score=0.9,
            consistency=Consistency(plan_aligned=True, step_aligned=True, answer_aligned=True),
        ),
        converged=converged,
    )
    return RunState(
        request="Explain tides",
        started_at=utcnow() - timedelta(seconds=30),
        profile=TaskProfile.default(),
        ttl_remaining=2,
        plan=Plan(goal="explain tides", steps=steps),
        passes=[record] * passes,
        total_refinements=1,
        usage=Usage(prompt_tokens=100, completion_tokens=50, calls=3),
        notes=["phase C: step s2 is blocked in pass 1: BLOCKED: no data"],
    )


def exited(
    reason: str = "converged",
    run: RunState | None = None,
    request: str = "Explain tides",
    deadline: datetime | None = None,
) -> LoopExited:
    return LoopExited(
        correlation_id="run-9",
        deadline=deadline or utcnow() + timedelta(hours=1),
        reason=reason,
        detail=f"the loop ended: {reason}",
        request=request,
        run=run,
    )


def full_input(**overrides: Any) -> PhaseEInput:
    return build_phase_e_input(exited(run=a_run())).model_copy(update=overrides)


def assert_well_formed(answer: FinalAnswer) -> None:
    """The contract every answer meets, degraded or not (FR-034, FR-038)."""
    FinalAnswer.model_validate(answer.model_dump())
    assert answer.answer_text.strip()
    assert set(answer.metadata) >= REQUIRED_METADATA
    assert isinstance(answer.metadata["missing_fields"], list)
    assert isinstance(answer.metadata["degraded"], bool)
    assert answer.metadata["reason"] in {r.value for r in AnswerReason}


# ---------------------------------------------------------------------------------------------
# execute_phase_e never raises.
# ---------------------------------------------------------------------------------------------


async def test_adapter_llm_error_gives_a_degraded_answer_from_the_step_outputs(harness) -> None:
    h = harness({SYNTHESIS: LLMError("endpoint returned 503")})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert (answer.metadata["degraded"], answer.metadata["reason"]) == (True, "llm_error")
    assert "503" in answer.metadata["error"] and "503" in answer.answer_text
    assert answer.answer_text.startswith("Unable to synthesize a complete answer")
    assert "Tides follow the Moon." in answer.answer_text, "what is available is included"
    assert answer.used_step_ids == ["s1"]
    assert answer.confidence is None


async def test_adapter_raising_anything_gives_a_degraded_answer(harness) -> None:
    h = harness({SYNTHESIS: RuntimeError("adapter bug")})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert answer.metadata["reason"] == "synthesis_error"
    assert "adapter bug" in answer.metadata["error"]


async def test_registry_without_the_synthesis_prompt(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    answer = await execute_phase_e(full_input(), h.llm, PromptRegistry(definitions=[]))
    assert_well_formed(answer)
    assert answer.metadata["reason"] == "prompt_error"
    assert h.llm.calls == []


async def test_registry_whose_get_prompt_raises(harness) -> None:
    class BrokenRegistry(PromptRegistry):
        def get_prompt(self, prompt_id: Any, input_data: Any) -> str:
            raise PromptNotFoundError(prompt_id)

    h = harness({SYNTHESIS: reply()})
    answer = await execute_phase_e(full_input(), h.llm, BrokenRegistry())
    assert_well_formed(answer)
    assert answer.metadata["degraded"] is True
    assert answer.metadata["reason"] == "prompt_error"


async def test_malformed_reply_twice_never_raises(harness) -> None:
    h = harness({SYNTHESIS: "no JSON here", REPAIR: "still none"})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert answer.metadata["degraded"] is True
    assert answer.metadata["reason"] in {"invalid_llm_output", "synthesis_error"}


async def test_malformed_reply_twice_is_repaired_once_then_degraded(harness) -> None:
    h = harness({SYNTHESIS: "no JSON here", REPAIR: "still none"})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert h.llm.calls == [SYNTHESIS, REPAIR]
    assert answer.metadata["reason"] == "invalid_llm_output"


async def test_malformed_reply_repaired_once_is_the_answer(harness) -> None:
    h = harness({SYNTHESIS: "answer_text: hi", REPAIR: reply("Repaired.")})
    answer = await execute_phase_e(
        full_input(convergence_status="converged"), h.llm, PromptRegistry()
    )
    assert answer.answer_text == "Repaired."


async def test_answer_without_confidence_or_steps_is_repaired_not_accepted(harness) -> None:
    """A fragment (a reasoning model's draft) lacks what Phase E reports: it goes to repair."""
    h = harness({SYNTHESIS: json.dumps({"answer_text": "Draft."}), REPAIR: reply("Whole.", ["s1"])})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert (answer.answer_text, answer.confidence, answer.used_step_ids) == ("Whole.", 0.8, ["s1"])
    assert h.llm.calls == [SYNTHESIS, REPAIR]


async def test_an_answer_copying_the_formats_example_is_never_published(harness) -> None:
    """Issue 32: SmolLM2 answered with the answer format's own example. A copy is unusable: it
    gets the repair call, and a copy again is a failed answer, which the host writes instead
    (degraded, saying why), never the copied text."""
    example = PromptRegistry().get_definition(SYNTHESIS).example_output
    copied = json.dumps({**example, "used_step_ids": ["s1"]})
    h = harness({SYNTHESIS: copied, REPAIR: copied})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert h.llm.calls == [SYNTHESIS, REPAIR]
    assert (answer.metadata["degraded"], answer.metadata["reason"]) == (True, "invalid_llm_output")
    assert "answer_text repeats the prompt's own instruction" in answer.metadata["error"]
    assert example["answer_text"] not in answer.answer_text
    assert quoted_instruction(answer.answer_text) is None


async def test_an_answer_copying_the_example_once_is_repaired(harness) -> None:
    example = PromptRegistry().get_definition(SYNTHESIS).example_output
    h = harness({SYNTHESIS: json.dumps(example), REPAIR: reply("Tides follow the Moon.", ["s1"])})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert (answer.answer_text, answer.metadata["degraded"]) == ("Tides follow the Moon.", False)
    assert h.llm.history[1].input.request == full_input().request


async def test_step_ids_the_run_does_not_have_are_dropped(harness) -> None:
    h = harness({SYNTHESIS: reply(used=["s1", "s7", "s3"])})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert answer.used_step_ids == ["s1", "s3"]


async def test_summaries_survive_upstream_data_of_an_unexpected_shape(harness) -> None:
    odd = full_input(
        plan_state={"goal": "g", "steps": ["not a dict"]}, semantic_validation={"x": 1}
    )
    h = harness({SYNTHESIS: LLMError("down")})
    answer = await execute_phase_e(odd, h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert "not a dict" in answer.answer_text


async def test_a_failing_degraded_builder_still_gives_a_minimal_answer(
    harness, monkeypatch
) -> None:
    def broken(_: PhaseEInput) -> str:
        raise ValueError("summary bug")

    monkeypatch.setattr(upstream, "available_data", broken)
    h = harness({SYNTHESIS: LLMError("down")})
    answer = await execute_phase_e(full_input(), h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert answer.metadata["reason"] == "llm_error"
    assert "summary bug" in answer.metadata["error"]


# ---------------------------------------------------------------------------------------------
# Degraded but still written by the model.
# ---------------------------------------------------------------------------------------------


async def test_zero_passes_still_synthesises_from_the_request_and_plan(harness) -> None:
    data = PhaseEInput(
        request="Explain tides",
        correlation_id="run-0",
        execution_start_timestamp=datetime.now(UTC),
        convergence_status="failed",
        total_passes=0,
        total_refinements=0,
        ttl_remaining=0,
        plan_state={"goal": "explain", "steps": [{"step_id": "s1", "description": "Explain"}]},
    )
    h = harness({SYNTHESIS: reply("Tides come from the Moon's pull.")})
    answer = await execute_phase_e(data, h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert answer.metadata["reason"] == "no_passes"
    assert answer.metadata["degraded"] is True
    assert "no execution pass ran" in answer.notes.lower()
    assert answer.answer_text == "Tides come from the Moon's pull."
    assert answer.ttl_exhausted is None, "no pass ran, so no TTL was spent"
    assert "- s1 (unknown): Explain" in h.llm.history[0].input.plan_summary


async def test_not_converged_with_complete_data(harness) -> None:
    h = harness({SYNTHESIS: reply("Best effort.")})
    answer = await execute_phase_e(
        full_input(convergence_status="stagnated"), h.llm, h.deps.registry
    )
    assert answer.metadata["reason"] == "not_converged"
    assert answer.metadata["degraded"] is True
    assert "exited early, before converging: stopped improving" in answer.notes
    assert answer.answer_text == "Best effort."
    assert answer.ttl_exhausted is None


async def test_ttl_remaining_zero_without_convergence_means_ttl_exhausted(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    data = full_input(convergence_status="max_passes", ttl_remaining=0)
    answer = await execute_phase_e(data, h.llm, h.deps.registry)
    assert answer.ttl_exhausted is True
    assert answer.metadata["reason"] == "ttl_exhausted"


async def test_empty_artifacts_count_as_missing(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    data = full_input(execution_results={}, execution_passes=[])
    answer = await execute_phase_e(data, h.llm, h.deps.registry)
    assert answer.metadata["missing_fields"] == ["execution_results", "execution_passes"]
    assert answer.metadata["reason"] == "incomplete_state"


# ---------------------------------------------------------------------------------------------
# build_phase_e_input: FR-028's mapping.
# ---------------------------------------------------------------------------------------------


def test_input_maps_the_run() -> None:
    run = a_run(passes=2)
    data = build_phase_e_input(exited("ttl_exhausted", run))
    assert (data.request, data.correlation_id, data.convergence_status) == (
        "Explain tides",
        "run-9",
        "ttl_exhausted",
    )
    assert (data.total_passes, data.total_refinements, data.ttl_remaining) == (2, 1, 2)
    assert data.execution_start_timestamp == run.started_at
    assert data.plan_state == run.plan.model_dump(mode="json")
    assert data.execution_results == {"s1": "Tides follow the Moon."}, "done steps only"
    assert data.execution_passes == [p.model_dump(mode="json") for p in run.passes]
    assert data.convergence_assessment == run.passes[-1].assessment.model_dump(mode="json")
    assert data.semantic_validation == run.passes[-1].validation.model_dump(mode="json")
    assert data.task_profile == run.profile.model_dump(mode="json")
    json.dumps(data.model_dump(mode="json"))


def test_input_of_a_run_without_passes() -> None:
    data = build_phase_e_input(exited("failed", a_run(passes=0)))
    assert data.total_passes == 0
    assert data.execution_passes is None
    assert data.convergence_assessment is None and data.semantic_validation is None
    assert data.plan_state is not None


# ---------------------------------------------------------------------------------------------
# Confidence: weighed against the run's evidence, the last pass's score.
# ---------------------------------------------------------------------------------------------


def test_the_model_is_shown_the_last_pass_score() -> None:
    data = full_input(execution_passes=[{"score": 0.5}, {"score": 0.875}])
    synthesis = upstream.synthesis_input(data)
    assert synthesis.last_pass_score == 0.875
    prompt = PromptRegistry().get_prompt(SYNTHESIS, synthesis)
    assert "The last pass scored 0.875" in prompt


@pytest.mark.parametrize(
    ("passes", "score"),
    [
        (None, 0.0),  # no pass ran: nothing was measured
        ([{"pass_number": 1}], 0.0),  # a record without a score
        ([{"score": True}], 0.0),  # not a number, whatever Python thinks of bools
        ([{"score": float("nan")}], 0.0),
        (["not a record"], 0.0),
        ([{"score": 1.5}], 1.0),  # kept within 0..1, where a confidence lives
        ([{"score": 0.2}, {"score": 0.9}], 0.9),  # the last pass, not the best
    ],
)
def test_last_pass_score_reads_the_records_defensively(passes: Any, score: float) -> None:
    assert upstream.last_pass_score(full_input(execution_passes=passes)) == score


async def test_offline_confidence_is_the_runs_score_not_a_placeholder() -> None:
    """The offline model cannot judge beyond what the loop measured, so it claims just that."""
    for score in (0.875, 0.96):
        data = full_input(execution_passes=[{"pass_number": 1, "score": score}])
        answer = await execute_phase_e(data, OfflineLLM(), PromptRegistry())
        assert answer.confidence == score


def test_input_of_a_lost_run_keeps_what_the_event_knows() -> None:
    event = exited("failed", run=None, request="Explain tides")
    data = build_phase_e_input(event)
    assert (data.request, data.convergence_status, data.total_passes) == (
        "Explain tides",
        "failed",
        0,
    )
    assert all(getattr(data, name) is None for name in upstream.ARTIFACT_FIELDS)
    assert build_phase_e_input(exited("failed", run=None, request="")).request == LOST_REQUEST


async def test_lost_run_with_its_request_is_still_answered_by_the_model(harness) -> None:
    h = harness({SYNTHESIS: reply("Tides: the Moon.")})
    data = build_phase_e_input(exited("failed", run=None))
    answer = await execute_phase_e(data, h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert answer.metadata["reason"] == "no_passes"
    assert answer.metadata["missing_fields"] == list(upstream.ARTIFACT_FIELDS)
    assert answer.ttl_exhausted is None


async def test_lost_request_is_answered_without_the_model(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    data = build_phase_e_input(exited("failed", run=None, request=""))
    answer = await execute_phase_e(data, h.llm, h.deps.registry)
    assert_well_formed(answer)
    assert answer.metadata["reason"] == "request_lost"
    assert h.llm.calls == []


# ---------------------------------------------------------------------------------------------
# The handler.
# ---------------------------------------------------------------------------------------------


async def test_handler_answers_with_an_execution_result(harness) -> None:
    h = harness({SYNTHESIS: reply("Tides follow the Moon.", used=["s1"])})
    event = exited("converged", a_run())
    (out,) = await phase_e.handle(event, h.deps)
    assert isinstance(out, FinalAnswerReady)
    assert (out.event_id, out.causation_id, out.correlation_id) == (
        derived_id(event.event_id, "FinalAnswerReady"),
        event.event_id,
        event.correlation_id,
    )
    result = out.result
    assert (result.status, result.degraded) == ("converged", False)
    assert (result.total_passes, result.total_refinements, result.ttl_remaining) == (1, 1, 2)
    assert result.elapsed_seconds >= 30
    assert result.final_answer.answer_text == "Tides follow the Moon."
    assert result.final_answer.metadata["exit_detail"] == "the loop ended: converged"
    assert result.final_answer.metadata["run_notes"] == event.run.notes


async def test_handler_adds_the_synthesis_usage_to_the_run(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    event = exited("converged", a_run())
    (out,) = await phase_e.handle(event, h.deps)
    usage = out.result.usage
    assert usage.calls == 4
    assert usage.prompt_tokens > 100 and usage.completion_tokens > 50
    reported = out.result.final_answer.metadata["usage"]
    assert reported == {**usage.model_dump(), "total_tokens": usage.total_tokens}
    assert event.run.usage.calls == 3, "the input event is not modified"


async def test_redelivery_does_not_call_the_llm_twice_and_repeats_the_event_id(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    event = exited("converged", a_run())
    (first,) = await phase_e.handle(event, h.deps)
    (second,) = await phase_e.handle(event, h.deps)
    assert h.llm.calls == [SYNTHESIS]
    assert first.event_id == second.event_id
    assert first.result.final_answer.answer_text == second.result.final_answer.answer_text


async def test_degraded_run_gives_a_degraded_result(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    (out,) = await phase_e.handle(exited("stagnated", a_run(passes=3, converged=False)), h.deps)
    assert (out.result.status, out.result.degraded) == ("stagnated", True)
    assert out.result.final_answer.metadata["reason"] == "not_converged"


async def test_handler_makes_no_llm_call_after_the_deadline(harness) -> None:
    h = harness({SYNTHESIS: reply()})
    past = utcnow() - timedelta(seconds=1)
    (out,) = await phase_e.handle(exited("deadline_exceeded", a_run(), deadline=past), h.deps)
    assert h.llm.calls == []
    assert out.result.degraded
    assert out.result.final_answer.metadata["reason"] == "deadline_exceeded"
    assert "Tides follow the Moon." in out.result.final_answer.answer_text


async def test_handler_answers_a_lost_run(harness) -> None:
    h = harness({SYNTHESIS: LLMError("down")})
    (out,) = await phase_e.handle(exited("failed", run=None), h.deps)
    assert out.result.degraded
    assert out.result.usage == Usage(calls=0)
    assert_well_formed(out.result.final_answer)


# ---------------------------------------------------------------------------------------------
# The dead-letter fallback.
# ---------------------------------------------------------------------------------------------


def test_fallback_answer_makes_no_llm_call(monkeypatch) -> None:
    def no_session(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("fallback_answer must not reach the LLM")

    monkeypatch.setattr(phase_e, "LLMSession", no_session)
    assert not inspect.iscoroutinefunction(phase_e.fallback_answer)
    event = exited("converged", a_run())
    out = phase_e.fallback_answer(event, "handler raised RuntimeError 5 times")
    assert out.event_id == derived_id(event.event_id, "FinalAnswerReady")
    answer = out.result.final_answer
    assert_well_formed(answer)
    assert (answer.metadata["reason"], out.result.degraded) == ("phase_e_failed", True)
    assert answer.metadata["error"] == "handler raised RuntimeError 5 times"
    assert "Tides follow the Moon." in answer.answer_text
    assert out.result.usage == event.run.usage


def test_fallback_answer_for_a_lost_run() -> None:
    out = phase_e.fallback_answer(exited("failed", run=None, request=""), "unparseable")
    assert_well_formed(out.result.final_answer)
    assert out.result.total_passes == 0


async def test_fallback_and_synthesis_failures_share_one_degraded_builder(
    harness, monkeypatch
) -> None:
    built: list[AnswerReason] = []
    real = publish.degraded_answer

    def spy(data: PhaseEInput, reason: AnswerReason, *args: Any) -> FinalAnswer:
        built.append(reason)
        return real(data, reason, *args)

    monkeypatch.setattr(publish, "degraded_answer", spy)
    h = harness({SYNTHESIS: LLMError("down")})
    await execute_phase_e(full_input(), h.llm, h.deps.registry)
    phase_e.fallback_answer(exited(run=a_run()), "gave up")
    assert built == [AnswerReason.LLM_ERROR, AnswerReason.PHASE_E_FAILED]
