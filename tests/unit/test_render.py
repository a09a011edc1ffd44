"""How the run's models read (phases.render): one wording per model, whoever shows it."""

from __future__ import annotations

from datetime import timedelta

from aeonloop.contracts import Usage
from aeonloop.gateway.cli.display import render_human
from aeonloop.gateway.http.run_steps import degraded_because as http_degraded_because
from aeonloop.gateway.progress import progress_of
from aeonloop.phases import render, upstream
from aeonloop.phases.events import ExecutionResult, PassCompleted, RunState, utcnow
from aeonloop.phases.models import (
    AnswerReason,
    Consistency,
    ConvergenceAssessment,
    ExecutionPass,
    ExitReason,
    FinalAnswer,
    RuleFinding,
    SemanticValidationReport,
    TaskProfile,
    ValidationIssue,
)
from aeonloop.phases.outcome import Outcome, outcome_of


def a_pass() -> ExecutionPass:
    return ExecutionPass(
        pass_number=2,
        executed_step_ids=["s1", "s4"],
        blocked_step_ids=["s2"],
        failed_steps={"s3": "the reply was cut off at the model's length limit"},
        validation=SemanticValidationReport(
            issues=[ValidationIssue(severity="high", description="the total is wrong")]
        ),
        assessment=ConvergenceAssessment(
            converged=False,
            completeness_score=0.6,
            coherence_score=0.8,
            consistency=Consistency(plan_aligned=True, step_aligned=False, answer_aligned=True),
            reason_codes=["incomplete"],
        ),
        score=0.7,
    )


# ---- the profile --------------------------------------------------------------------------------


def test_a_profile_reads_the_same_as_a_model_and_as_phase_e_holds_it() -> None:
    profile = TaskProfile(reasoning_depth=4, output_breadth="broad", profile_version=2)
    text = render.profile_text(profile)
    assert text == (
        "reasoning_depth=4, information_sufficiency=0.5, expected_tool_usage=moderate, "
        "output_breadth=broad, confidence_requirement=medium, profile_version=2"
    )
    assert render.profile_text(profile.model_dump(mode="json")) == text
    # Phase E shows what its artifact has, and invents no default for what it lacks.
    assert render.profile_text({"reasoning_depth": 2, "other": 1}) == "reasoning_depth=2"
    assert render.profile_text(None) == ""


# ---- a pass -------------------------------------------------------------------------------------


def test_each_step_a_pass_ran_is_done_blocked_or_failed_with_why() -> None:
    assert render.pass_steps(a_pass()) == [
        render.StepVerdict("s1", "done"),
        render.StepVerdict("s4", "done"),
        render.StepVerdict("s2", "blocked", render.BLOCKED_WHY),
        render.StepVerdict("s3", "failed", "the reply was cut off at the model's length limit"),
    ]


def test_a_pass_in_one_line() -> None:
    assert render.pass_line(a_pass()) == (
        "pass 2: score 0.70, not converged, 2 step(s) run, blocked: s2, did not complete: s3"
    )
    clean = ExecutionPass(pass_number=1, executed_step_ids=["s1"], score=0.96, converged=True)
    assert render.pass_line(clean) == "pass 1: score 0.96, converged, 1 step(s) run"


def test_what_a_pass_left_to_fix() -> None:
    assert render.pass_issues(a_pass()) == [
        "- [high] the total is wrong",
        "- assessment: completeness 0.6, coherence 0.8; not aligned: step",
        "- assessment: incomplete",
        f"- step s2 is blocked: {render.BLOCKED_WHY}",
        "- step s3 did not complete (the reply was cut off at the model's length limit); "
        "it runs again next pass",
    ]


def test_the_evidence_of_a_pass_is_its_line_then_what_it_left() -> None:
    record = a_pass()
    evidence = render.pass_evidence(record).splitlines()
    assert evidence == [render.pass_line(record), *render.pass_issues(record)]
    unvalidated = ExecutionPass(pass_number=1)
    assert "- validation did not run" in render.pass_evidence(unvalidated)


def test_a_pass_reads_the_same_in_progress_and_in_a_degraded_answer() -> None:
    record = a_pass()
    run = RunState(request="Explain tides")
    completed = PassCompleted(
        correlation_id="c", deadline=utcnow() + timedelta(hours=1), run=run, execution_pass=record
    )
    (progress,) = progress_of(completed)
    assert progress.line == f"C  {render.pass_line(record)}"
    summary = upstream.passes_summary([record.model_dump(mode="json")])
    assert summary == f"- {render.pass_line(record)}"


# ---- how a run ended ----------------------------------------------------------------------------


def test_every_reason_has_words() -> None:
    assert set(render.EXIT_WORDS) == set(ExitReason)
    assert set(render.ANSWER_WORDS) == set(AnswerReason)
    assert render.exit_words("stagnated") == "stopped improving"
    assert render.exit_words("from_a_newer_version") == "from_a_newer_version"
    assert render.answer_words("") == render.UNSAID


def ended(status: str, metadata: dict) -> Outcome:
    """The outcome an answer of a run that ended `status` records in `metadata`."""
    return outcome_of({**metadata, "convergence_status": status})


FAILED = {"id": "no-tbd", "severity": "fail", "message": "leaves no TBD: /TBD/ found: 'TBD'"}
WARNED = {"id": "cites", "severity": "warn", "message": "cites a source: not found"}


def test_the_ending_names_the_exit_in_words_and_each_rule_that_failed() -> None:
    metadata = {
        "reason": "not_converged",
        "exit_detail": "the score stopped moving",
        "failed_rules": [FAILED, {"id": "odd"}, "not a finding", WARNED],
        "missing_fields": [],
    }
    assert render.ending_lines(ended("stagnated", metadata)) == [
        "the loop exited early, before converging: stopped improving",
        "why: the score stopped moving",
        "failed rule no-tbd: leaves no TBD: /TBD/ found: 'TBD'",
        "warning from rule cites: cites a source: not found",
    ]


def test_the_ending_of_a_host_made_answer_says_why_the_model_did_not_write_it() -> None:
    metadata = {"reason": "llm_error", "error": "LLMError: 503", "missing_fields": ["task_profile"]}
    assert render.ending_lines(ended("converged", metadata)) == [
        "the language model call failed",
        "error: LLMError: 503",
        "missing from the run: the task's profile",
    ]
    spent = render.ending_lines(ended("ttl_exhausted", {"reason": "ttl_exhausted"}))
    assert spent == [
        "the loop exited early, before converging: TTL exhausted, every pass of the budget used"
    ]
    # The budget ran out on a pass that ended the loop for another reason: both are said.
    assert render.ending_lines(ended("max_passes", {"reason": "ttl_exhausted"})) == [
        "the loop exited early, before converging: reached AEON_MAX_PASSES",
        render.ANSWER_WORDS[AnswerReason.TTL_EXHAUSTED],
    ]


def test_degraded_because_is_the_ending_and_the_notes_and_nothing_when_not_degraded() -> None:
    metadata = {"reason": "not_converged", "failed_rules": [FAILED], "run_notes": ["a note"]}
    assert render.degraded_because(ended("stagnated", {**metadata, "degraded": False})) == []
    assert render.degraded_because(ended("stagnated", {**metadata, "degraded": True})) == [
        *render.ending_lines(ended("stagnated", metadata)),
        "a note",
    ]
    unsaid = ended("converged", {"degraded": True, "reason": "converged"})
    assert render.degraded_because(unsaid) == [render.UNSAID]


def test_why_an_answer_is_degraded_is_coded_a_line_each() -> None:
    """Each line of why an answer is degraded has a stable code a machine can match."""
    outcome = ended("stagnated", {"reason": "not_converged", "failed_rules": [FAILED, WARNED]})
    assert [(found.code, found.line) for found in render.degradations(outcome)] == [
        ("exit:stagnated", "the loop exited early, before converging: stopped improving"),
        ("rule_failed:no-tbd", "failed rule no-tbd: leaves no TBD: /TBD/ found: 'TBD'"),
        ("rule_warned:cites", "warning from rule cites: cites a source: not found"),
    ]


def test_the_answer_the_cli_and_the_http_api_say_the_same() -> None:
    """One renderer: the answer's text, `aeon ask`'s output and `degraded_because` are made
    from the same status and metadata, so each names the failed rule and the exit in words."""
    metadata = {
        "convergence_status": "stagnated",
        "total_passes": 3,
        "missing_fields": [],
        "degraded": True,
        "reason": "not_converged",
        "failed_rules": [FAILED],
        "run_notes": ["phase C: a note"],
    }
    result = ExecutionResult(
        status="stagnated",
        degraded=True,
        total_passes=3,
        total_refinements=2,
        ttl_remaining=1,
        usage=Usage(),
        elapsed_seconds=2.0,
        final_answer=FinalAnswer(answer_text="TBD", metadata=metadata),
    )
    lines = http_degraded_because(result)
    assert "failed rule no-tbd: leaves no TBD: /TBD/ found: 'TBD'" in lines
    assert "the loop exited early, before converging: stopped improving" in lines
    shown = render_human(result.model_dump(mode="json")).splitlines()
    start = shown.index("Degraded because:")
    assert shown[start + 1 : start + 1 + len(lines)] == [f"  - {line}" for line in lines]


def test_findings_of_an_answer() -> None:
    assert render.findings_of([FAILED, {"id": 1}, None]) == [RuleFinding(**FAILED)]
    assert render.findings_of("not a list") == []


def test_lines_as_sentences() -> None:
    assert render.as_sentences(["the loop ended", "", "why: it did."]) == (
        "The loop ended. Why: it did."
    )
