"""The run's outcome (phases.outcome): one typed model, written into the answer's metadata by one
function and read back by one function (docs/run-lifecycle.md, "The outcome: why did it stop,
what did I get")."""

from __future__ import annotations

import re
from pathlib import Path

from aeonloop.contracts import Usage
from aeonloop.phases import phase_e, publish, render, upstream
from aeonloop.phases.events import ExecutionResult, LoopExited, RunState, utcnow
from aeonloop.phases.models import AnswerReason, ExitReason, FinalAnswer
from aeonloop.phases.outcome import SUMMARY, Outcome, as_metadata, outcome_of

PACKAGE = Path(phase_e.__file__).resolve().parents[1]
#: Reading a dict by key: `metadata[...]`, `metadata.get(...)`, in code (not in a docstring).
BY_KEY = re.compile(r"""metadata(\[|\.get\()""")


def budget_spent_before_a_pass() -> LoopExited:
    run = RunState(request="What is the capital of France?")
    return LoopExited(
        event_id="e" * 32,
        correlation_id="c" * 32,
        deadline=utcnow(),
        reason=ExitReason.BUDGET_EXHAUSTED,
        detail="the next call would pass the token budget",
        run=run,
    )


def test_why_it_stopped_and_what_was_got_are_two_fields() -> None:
    """Issue 39: `status: budget_exhausted` beside `reason: no_passes` said both, and nobody
    could tell which answered which question."""
    event = budget_spent_before_a_pass()
    e_input = phase_e.build_phase_e_input(event)
    usage = Usage(prompt_tokens=7)
    context = publish.exit_context(event, usage)
    answer = publish.degraded_answer(e_input, AnswerReason.BUDGET_EXHAUSTED, context)
    result = publish.answer_event(event, e_input, answer, usage).result

    outcome = result.outcome
    assert outcome.stopped is ExitReason.BUDGET_EXHAUSTED == result.status
    assert outcome.published == SUMMARY and not outcome.by_model
    assert outcome.degraded and outcome.reason is AnswerReason.BUDGET_EXHAUSTED
    assert outcome.usage == Usage(prompt_tokens=7)
    codes = [found.code for found in outcome.degraded_because]
    assert codes[0] == "exit:budget_exhausted" and "exit_detail" in codes


def test_the_outcome_round_trips_through_the_metadata() -> None:
    event = budget_spent_before_a_pass()
    e_input = phase_e.build_phase_e_input(event)
    outcome = publish.build_outcome(e_input, AnswerReason.NO_PASSES, error="boom")
    metadata = as_metadata(outcome)
    assert outcome_of(metadata) == outcome
    # FR-027's keys are there, and what is empty is left out.
    assert {"missing_fields", "degraded", "reason"} <= set(metadata)
    assert "checks" not in metadata and "failed_rules" not in metadata


def test_metadata_of_another_version_is_read_as_far_as_it_goes() -> None:
    older = {
        "convergence_status": "stagnated",
        "degraded": True,
        "reason": "a_reason_from_a_newer_version",
        "answered_by": "refinement:2",
        "checks": [{"id": "r1", "verdict": "pass"}, {"claim": "not a check"}],
        "total_passes": "three",
        "stopped": ["not", "a", "reason"],
    }
    outcome = outcome_of(older)
    assert outcome.stopped is ExitReason.STAGNATED
    assert outcome.published == "refinement:2"
    assert outcome.reason is AnswerReason.NOT_CONVERGED and outcome.degraded
    assert [check.id for check in outcome.checks] == ["r1"]
    assert outcome.total_passes == 0
    assert (
        outcome_of(None)
        == outcome_of({})
        == Outcome(
            stopped=ExitReason.FAILED, published="answer", degraded=False, reason="converged"
        )
    )


def test_the_result_states_the_outcome_it_carries() -> None:
    result = ExecutionResult(
        status=ExitReason.CANCELLED,
        degraded=True,
        total_passes=1,
        total_refinements=0,
        ttl_remaining=2,
        usage=Usage(),
        elapsed_seconds=1.0,
        final_answer=FinalAnswer(answer_text="x", metadata={"convergence_status": "converged"}),
    )
    assert result.outcome.stopped is ExitReason.CANCELLED and result.outcome.degraded


def test_nothing_reads_the_answers_metadata_by_key_but_the_outcome() -> None:
    """One reader: the gateways and the phases read the outcome, never the metadata's keys."""
    readers = []
    for path in [
        *PACKAGE.joinpath("phases").rglob("*.py"),
        *PACKAGE.joinpath("gateway").rglob("*"),
    ]:
        if path.suffix not in (".py", ".js") or path.name == "outcome.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if BY_KEY.search(code) and "`" not in code:
                readers.append(f"{path.relative_to(PACKAGE)}:{number}")
    assert readers == []


def test_the_answer_names_what_is_missing_in_words_and_the_outcome_by_field() -> None:
    """Issue 41 (finding 8): the answer listed `plan_state`, `execution_results` and the like;
    a reader gets words, a machine the field names."""
    assert set(render.ARTIFACT_WORDS) == set(upstream.ARTIFACT_FIELDS)
    event = budget_spent_before_a_pass()
    e_input = phase_e.build_phase_e_input(event)
    answer = publish.degraded_answer(e_input, AnswerReason.BUDGET_EXHAUSTED)
    assert "Missing from the run: the plan, the steps' results" in answer.answer_text
    assert not any(name in answer.answer_text for name in upstream.ARTIFACT_FIELDS)
    assert outcome_of(answer.metadata).missing_fields == list(upstream.ARTIFACT_FIELDS)
