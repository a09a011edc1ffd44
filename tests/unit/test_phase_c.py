"""Phase C: execution, the host's convergence decision, exits, and refinement between passes."""

from __future__ import annotations

import asyncio

import pytest

from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMCall, LLMError, LLMReply, TokenUsage
from aeonloop.phases import phase_c
from aeonloop.phases.events import LoopExited, PassCompleted, PassRequested
from aeonloop.phases.models import (
    Consistency,
    ConvergenceAssessment,
    Evaluation,
    ExecutionPass,
    Rule,
    RuleCheck,
    RuleFinding,
    RuleResult,
    SemanticValidationReport,
    ValidationIssue,
)
from aeonloop.prompts.registry import PromptId, default_registry

STEP = PromptId.REASONING_STEP_USER
EVALUATE = PromptId.PASS_EVALUATION_USER
REFINE = PromptId.RECURSIVE_REFINEMENT_USER
CRITIQUE = PromptId.RULE_CRITIQUE_USER
REPAIR = PromptId.SUPERVISOR_REPAIR_JSON_USER
UPDATE = PromptId.TASKPROFILE_UPDATE_USER
#: What a model that copies its prompt writes for a step: the step prompt's own instructions.
STEP_INSTRUCTIONS = default_registry().get_definition(STEP).template.split("\n\n")[0]


def content_rule(rule_id: str, search: str, severity: str = "fail") -> Rule:
    check = RuleCheck(type="content", search=search)
    return Rule(id=rule_id, severity=severity, check=check, description=f"needs {search}")


def base_script(replies) -> dict:
    """A pass that converges: every step answers, the evaluation finds no issue and the rubric
    is met."""
    return {
        STEP: replies.step_output,
        EVALUATE: replies.assessment(),
        REFINE: replies.refinement(),
    }


# ---- one pass -----------------------------------------------------------------------------------


async def test_converges_in_pass_1(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies))
    (out,) = await phase_c.handle(make_plan_ready("gather", "answer"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged"
    assert "default rubric" in out.detail
    record = out.run.passes[0]
    assert record.pass_number == 1 and record.converged
    assert record.executed_step_ids == ["s1", "s2"] and record.blocked_step_ids == []
    assert record.score == 0.96
    assert all(s.status == "done" and s.executed_in_pass == 1 for s in out.run.plan.steps)
    assert h.llm.calls == [STEP, STEP, EVALUATE]  # one call judges and validates the pass
    assert record.validation is not None and record.validation.issues == []


async def test_each_step_sees_the_outputs_before_it(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies))
    await phase_c.handle(make_plan_ready("gather", "answer"), h.deps)
    first, second = (c.input for c in h.llm.history[:2])
    assert first.prior_outputs == "" and first.pass_number == 1
    assert "[s1] done: gather" in second.prior_outputs


async def test_the_llm_saying_converged_is_not_enough(harness, replies, make_plan_ready) -> None:
    claimed = replies.assessment(completeness=0.9, converged=True)
    h = harness(base_script(replies) | {EVALUATE: claimed})
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "stagnated"  # nothing left to execute
    assert not out.run.passes[0].converged


async def test_a_high_severity_issue_blocks_convergence(harness, replies, make_plan_ready) -> None:
    script = base_script(replies) | {
        EVALUATE: replies.assessment(issues=(("high", "wrong total"),)),
        REFINE: replies.refinement(replies.add("s2", "fix the total")),
    }
    h = harness(script)
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, PassCompleted)
    assert not out.run.passes[0].converged
    assert "wrong total" in h.llm.history[-1].input.issues


async def test_a_step_whose_llm_call_fails_does_not_complete_and_the_others_run(
    harness, replies, make_plan_ready
) -> None:
    def step(call: LLMCall) -> str:
        if call.input.step_id == "s2":
            raise LLMError("model overloaded")
        return replies.step_output(call)

    script = base_script(replies) | {
        STEP: step,
        REFINE: replies.refinement(replies.add("s4", "redo s2")),
    }
    h = harness(script)
    (out,) = await phase_c.handle(make_plan_ready("a", "b", "c"), h.deps)
    assert isinstance(out, PassCompleted)
    record = out.run.passes[0]
    assert record.executed_step_ids == ["s1", "s3"] and record.blocked_step_ids == []
    assert list(record.failed_steps) == ["s2"]
    assert "model overloaded" in record.failed_steps["s2"]
    assert not record.converged  # even with a perfect assessment
    statuses = [(s.step_id, s.status) for s in out.run.plan.steps]
    assert statuses == [("s1", "done"), ("s2", "failed"), ("s3", "done"), ("s4", "pending")]
    assert any("model overloaded" in note for note in out.run.notes)
    assert "s2 did not complete" in h.llm.history[-1].input.issues


async def test_a_blocked_reply_blocks_the_step(harness, replies, make_plan_ready) -> None:
    script = base_script(replies) | {
        STEP: "BLOCKED: the prices are not given",
        REFINE: replies.refinement(replies.add("s2", "estimate prices")),
    }
    h = harness(script)
    (out,) = await phase_c.handle(make_plan_ready("price it"), h.deps)
    assert out.run.passes[0].blocked_step_ids == ["s1"]
    assert out.run.plan.steps[0].status == "failed"


async def test_evaluation_llm_error_ends_the_loop_with_the_pass(
    harness, replies, make_plan_ready
) -> None:
    h = harness(base_script(replies) | {EVALUATE: LLMError("gateway timeout")})
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "failed"
    assert "gateway timeout" in out.detail
    assert len(out.run.passes) == 1 and out.run.passes[0].executed_step_ids == ["s1"]


async def test_malformed_twice_in_evaluation_ends_the_loop(
    harness, replies, make_plan_ready
) -> None:
    """The documented outcome in C: an unusable evaluation after repair is a failed exit."""
    h = harness(base_script(replies) | {EVALUATE: "looks fine to me", REPAIR: "still not json"})
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "failed"
    assert h.llm.calls[-2:] == [EVALUATE, REPAIR]


async def test_malformed_once_in_evaluation_is_repaired(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies) | {EVALUATE: "sure: {", REPAIR: replies.assessment()})
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged"


# ---- exits --------------------------------------------------------------------------------------


async def test_beyond_max_passes_exits_without_a_call(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies), max_passes=1)
    event = make_plan_ready("one")
    event.run.add_pass(ExecutionPass(pass_number=1, score=0.5))
    (out,) = await phase_c.handle(event, h.deps)
    assert isinstance(out, LoopExited) and out.reason == "max_passes"
    assert h.llm.calls == [] and len(out.run.passes) == 1


async def test_last_allowed_pass_exits_max_passes(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies) | {EVALUATE: replies.weak()}, max_passes=1)
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "max_passes"
    assert len(out.run.passes) == 1 and REFINE not in h.llm.calls


async def test_nothing_left_to_execute_is_stagnation(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies) | {EVALUATE: replies.weak()})
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "stagnated"
    assert "no step is left to execute" in out.detail and "applied 0" in out.detail
    assert out.run.passes[0].refinement is not None


async def test_spent_refinement_budget_is_stagnation(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies) | {EVALUATE: replies.weak()}, max_refinements_per_run=0)
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "stagnated"
    assert "budget" in out.detail and REFINE not in h.llm.calls


async def test_refinement_failure_ends_the_loop_as_failed(
    harness, replies, make_plan_ready
) -> None:
    h = harness(base_script(replies) | {EVALUATE: replies.weak(), REFINE: LLMError("down")})
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "failed"
    assert "refinement after pass 1 failed" in out.detail


# ---- across passes ------------------------------------------------------------------------------


async def test_refined_plan_converges_in_pass_2(harness, replies, make_plan_ready, drive) -> None:
    script = base_script(replies) | {
        EVALUATE: [replies.weak(issues=(("medium", "no comparison"),)), replies.assessment()],
        REFINE: replies.refinement(
            replies.modify("s1", "rewrite history"), replies.add("s3", "compare")
        ),
        UPDATE: replies.profile(depth=3),
    }
    h = harness(script)
    first = make_plan_ready("gather", "answer")
    trail = await drive(first, h.deps)
    assert [type(e).__name__ for e in trail] == ["PassCompleted", "PassRequested", "LoopExited"]
    after_pass_1 = trail[0].run
    refinement = after_pass_1.passes[0].refinement
    assert [a.action_type for a in refinement.applied] == ["ADD"]
    assert "immutable" in refinement.rejected[0]  # the MODIFY of executed s1
    assert after_pass_1.total_refinements == 1

    done = trail[-1]
    assert done.reason == "converged"
    p1, p2 = done.run.passes
    assert (p1.converged, p2.converged) == (False, True)
    assert p2.executed_step_ids == ["s3"]
    s1, s2, s3 = done.run.plan.steps
    assert (s1.description, s1.output, s1.executed_in_pass) == ("gather", "[s1] done: gather", 1)
    assert s2.executed_in_pass == 1 and s3.executed_in_pass == 2
    pass_2_step = [c.input for c in h.llm.history if c.prompt_id == STEP][-1]
    assert pass_2_step.pass_number == 2 and "[s2] done: answer" in pass_2_step.prior_outputs


async def test_stagnation_on_two_flat_passes(harness, replies, make_plan_ready, drive) -> None:
    script = base_script(replies) | {
        EVALUATE: [replies.weak(0.8), replies.weak(0.81), replies.weak(0.8)],
        REFINE: [replies.refinement(replies.add(f"x{n}", f"more {n}")) for n in range(3)],
    }
    h = harness(script)
    trail = await drive(make_plan_ready("one", ttl=10), h.deps)
    done = trail[-1]
    assert done.reason == "stagnated"
    assert [p.score for p in done.run.passes] == [0.85, 0.855, 0.85]
    assert "two passes in a row" in done.detail


async def test_rules_drive_critique_and_convergence(
    harness, replies, make_plan_ready, drive
) -> None:
    rules = [
        content_rule("has-price", r"PRICE: \d+"),
        content_rule("has-summary", "Summary", severity="warn"),
        content_rule("mentions-cache", "cache"),
    ]
    critique = replies.critique(
        "has-price", "unrelated", "has-summary", "has-price", "has-price", "has-price", "has-price"
    )
    script = base_script(replies) | {
        EVALUATE: replies.weak(),  # the rules decide, not the assessment
        CRITIQUE: critique,
        REFINE: replies.refinement(replies.add("s2", "PRICE: 12 and a Summary")),
    }
    h = harness(script)
    trail = await drive(make_plan_ready("look at the cache", rules=rules), h.deps)
    done = trail[-1]
    assert done.reason == "converged" and "rule evaluation passed" in done.detail
    p1, p2 = done.run.passes
    assert p1.evaluation is not None and not p1.evaluation.passed
    assert {f.id for f in p1.evaluation.failed} == {"has-price"}
    assert {w.id for w in p1.evaluation.warnings} == {"has-summary"}
    assert len(p1.critique) == 5
    assert {i.rule_id for i in p1.critique} == {"has-price", "has-summary"}
    refine_input = next(c.input for c in h.llm.history if c.prompt_id == REFINE)
    assert "unrelated" not in refine_input.issues and "[has-price]" in refine_input.issues
    critique_input = next(c.input for c in h.llm.history if c.prompt_id == CRITIQUE)
    assert "mentions-cache" not in critique_input.failed_rules
    assert p2.evaluation.passed and p2.score == 1.0


async def test_critique_without_tied_issues_falls_back_to_the_failed_rules(
    harness, replies, make_plan_ready
) -> None:
    script = base_script(replies) | {
        CRITIQUE: replies.critique("not-a-rule"),
        REFINE: replies.refinement(replies.add("s2", "PRICE: 1")),
    }
    h = harness(script)
    event = make_plan_ready("one", rules=[content_rule("has-price", "PRICE")])
    (out,) = await phase_c.handle(event, h.deps)
    assert isinstance(out, PassCompleted) and out.run.passes[0].critique == []
    assert "[has-price] rule failed" in h.llm.history[-1].input.issues


async def test_only_skipped_rules_leave_it_to_the_rubric(harness, replies, make_plan_ready) -> None:
    rule = Rule(id="exe", check=RuleCheck(type="executable", command="false"))
    h = harness(base_script(replies))
    (out,) = await phase_c.handle(make_plan_ready("one", rules=[rule]), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged"
    assert out.run.passes[0].evaluation.rule_results[0].verdict == "skipped"
    assert "default rubric" in out.detail


async def test_same_event_twice_makes_no_second_call(
    harness, delivered, replies, make_plan_ready
) -> None:
    script = base_script(replies) | {
        EVALUATE: replies.weak(),
        REFINE: replies.refinement(replies.add("s3", "more")),
    }
    h = harness(script)
    event = make_plan_ready("a", "b")
    (first,) = await phase_c.handle(delivered(event), h.deps)
    calls = list(h.llm.calls)
    (second,) = await phase_c.handle(delivered(event), h.deps)
    assert h.llm.calls == calls
    assert first.event_id == second.event_id
    assert first.run.model_dump(exclude={"usage"}) == second.run.model_dump(exclude={"usage"})


async def test_pass_requested_continues_where_the_run_is(harness, replies, make_plan_ready) -> None:
    h = harness(base_script(replies) | {EVALUATE: replies.weak()})
    ready = make_plan_ready("a")
    run = ready.run.model_copy(deep=True)
    run.plan.steps.append(run.plan.steps[0].model_copy(update={"step_id": "s2"}))
    run.plan.steps[0] = run.plan.steps[0].model_copy(
        update={"status": "done", "output": "old", "executed_in_pass": 1}
    )
    run.add_pass(ExecutionPass(pass_number=1, score=0.5))
    (out,) = await phase_c.handle(ready.child(PassRequested, run=run), h.deps)
    record = out.run.passes[-1]
    assert record.pass_number == 2 and record.executed_step_ids == ["s2"]


# ---- pure decisions -----------------------------------------------------------------------------


def _assessment(good: bool) -> ConvergenceAssessment:
    score = 0.97 if good else 0.5
    return ConvergenceAssessment(
        converged=True,
        completeness_score=score,
        coherence_score=score,
        consistency=Consistency(plan_aligned=True, step_aligned=True, answer_aligned=True),
    )


def _validation(*severities: str) -> SemanticValidationReport:
    return SemanticValidationReport(
        issues=[ValidationIssue(severity=s, description="x") for s in severities]
    )


@pytest.mark.parametrize(
    ("by_rules", "passed", "good", "severities", "blocked", "expected"),
    [
        (True, True, False, ("high",), False, True),  # rules decide alone
        (True, False, True, (), False, False),
        (True, True, True, (), True, False),  # blocked steps always block
        (False, True, True, ("low", "medium"), False, True),
        (False, True, True, ("high",), False, False),
        (False, True, False, (), False, False),
        (False, True, True, (), True, False),
    ],
)
def test_is_converged(by_rules, passed, good, severities, blocked, expected) -> None:
    evaluation = Evaluation(score=1.0 if passed else 0.0, passed=passed)
    result = phase_c.is_converged(
        by_rules=by_rules,
        evaluation=evaluation,
        assessment=_assessment(good),
        validation=_validation(*severities),
        blocked=blocked,
    )
    assert result is expected


def test_pass_score_follows_the_deciding_evidence() -> None:
    evaluation = Evaluation(score=0.4, passed=False)
    assert phase_c.pass_score(True, evaluation, _assessment(True)) == 0.4
    assert phase_c.pass_score(False, evaluation, _assessment(True)) == 0.97


# ---- what a step's reply is worth ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (LLMReply("The tides rise and", TokenUsage(1, 1), "m", truncated=True), "length limit"),
        (LLMReply("I can't do that.", TokenUsage(1, 1), "m", refused=True), "refused"),
        ("I'm sorry, but I can't help with that request.", "refused"),
        (STEP_INSTRUCTIONS, "repeats Aeon's own instructions"),
    ],
    ids=["cut-at-length-limit", "refusal-field", "refusal-words", "its-instructions-copied"],
)
async def test_a_cut_or_refused_step_is_not_done(harness, replies, make_plan_ready, reply, why):
    def step(call: LLMCall):
        return reply if call.input.step_id == "s1" else replies.step_output(call)

    h = harness(base_script(replies) | {STEP: step})
    (out,) = await phase_c.handle(make_plan_ready("explain", "simplify"), h.deps)
    record = out.run.passes[0]
    assert record.executed_step_ids == ["s2"] and record.blocked_step_ids == []
    assert why in record.failed_steps["s1"]
    assert not record.converged
    s1 = out.run.plan.steps[0]
    assert s1.status == "failed" and s1.output  # what the model said is kept, for the record
    assert s1.output not in h.llm.history[1].input.prior_outputs  # but not built upon


async def test_a_step_that_did_not_complete_runs_again_next_pass(
    harness, replies, make_plan_ready
) -> None:
    outage = [LLMError("HTTP 503", transient=True), "Tides follow the Moon."]
    h = harness(base_script(replies) | {STEP: outage})
    (first,) = await phase_c.handle(make_plan_ready("explain"), h.deps)
    assert isinstance(first, PassCompleted) and first.run.passes[0].failed_steps
    again = first.child(PassRequested, run=first.run)
    (second,) = await phase_c.handle(again, h.deps)
    assert isinstance(second, LoopExited) and second.reason == "converged"
    assert second.run.plan.steps[0].output == "Tides follow the Moon."
    assert second.run.passes[1].executed_step_ids == ["s1"]


async def test_a_long_step_output_is_stored_cut_with_a_marker(
    harness, replies, make_plan_ready
) -> None:
    h = harness(base_script(replies) | {STEP: "x" * 5_000}, max_step_output_chars=1_000)
    (out,) = await phase_c.handle(make_plan_ready("explain"), h.deps)
    stored = out.run.plan.steps[0].output
    assert stored.startswith("x" * 1_000) and "4000 more characters not kept" in stored
    assert len(stored) < 1_200


# ---- concurrency within a pass ------------------------------------------------------------------


class Overlap:
    """An LLM that holds each call a moment and counts how many are in flight at once, by
    prompt, around the scripted one."""

    def __init__(self, llm) -> None:
        self.llm, self.family, self.outage = llm, llm.family, None
        self.now: dict[PromptId, int] = {}
        self.most: dict[PromptId, int] = {}

    async def complete(self, call: LLMCall) -> LLMReply:
        kind = call.prompt_id
        self.now[kind] = self.now.get(kind, 0) + 1
        self.most[kind] = max(self.most.get(kind, 0), self.now[kind])
        try:
            await asyncio.sleep(0.02)
            return await self.llm.complete(call)
        finally:
            self.now[kind] -= 1


def with_dependencies(event, **needs: list[str]):
    """`event` with the named steps' depends_on set (the others keep the plan's order)."""
    plan = event.run.plan
    plan.steps = [
        s.model_copy(update={"depends_on": needs[s.step_id]}) if s.step_id in needs else s
        for s in plan.steps
    ]
    return event


async def test_independent_steps_run_at_once_within_the_bound(
    harness, replies, make_plan_ready
) -> None:
    h = harness(base_script(replies), max_parallel_steps=3)
    h.deps.llm = overlap = Overlap(h.llm)
    event = with_dependencies(
        make_plan_ready("a", "b", "c", "d", "e"), s1=[], s2=[], s3=[], s4=[], s5=["s1", "s4"]
    )
    (out,) = await phase_c.handle(event, h.deps)
    assert overlap.most[STEP] == 3, "four ready steps, at most three calls at once"
    record = out.run.passes[0]
    assert record.executed_step_ids == ["s1", "s2", "s3", "s4", "s5"], "recorded in plan order"
    last = next(c.input for c in h.llm.history if c.prompt_id is STEP and c.input.step_id == "s5")
    assert "[s1] done" in last.prior_outputs and "[s4] done" in last.prior_outputs
    assert "[s2]" not in last.prior_outputs and "[s3]" not in last.prior_outputs, (
        "a step is shown only the outputs of the steps it depends on"
    )


async def test_a_plan_that_names_no_dependencies_runs_in_its_order(
    harness, replies, make_plan_ready
) -> None:
    """Plans from before `depends_on` (and models that leave it out) run one step at a time,
    each seeing every earlier output, as they always did."""
    h = harness(base_script(replies), max_parallel_steps=4)
    h.deps.llm = overlap = Overlap(h.llm)
    await phase_c.handle(make_plan_ready("a", "b", "c"), h.deps)
    assert overlap.most[STEP] == 1
    third = [c.input for c in h.llm.history if c.prompt_id is STEP][2]
    assert "[s1] done" in third.prior_outputs and "[s2] done" in third.prior_outputs


async def test_one_evaluation_call_judges_and_validates_the_pass(
    harness, replies, make_plan_ready
) -> None:
    """Issue 33: the pass's assessment and its semantic validation come from one call, and the
    host reads that reply as both records it decides from."""
    evaluation = replies.weak(0.7, issues=(("medium", "no comparison"), ("low", "terse")))
    script = base_script(replies) | {
        EVALUATE: evaluation,
        REFINE: replies.refinement(replies.add("s2", "compare")),
    }
    h = harness(script)
    (out,) = await phase_c.handle(make_plan_ready("a"), h.deps)
    record = out.run.passes[0]
    assert h.llm.calls.count(EVALUATE) == 1
    assert PromptId.VALIDATION_SEMANTIC_USER not in h.llm.calls
    assert PromptId.CONVERGENCE_ASSESSMENT_USER not in h.llm.calls
    assert [(i.severity, i.description) for i in record.validation.issues] == [
        ("medium", "no comparison"),
        ("low", "terse"),
    ]
    assert record.assessment.completeness_score == 0.7 and not record.converged
    assert "no comparison" in h.llm.history[-1].input.issues  # the refinement is shown them


def in_flight_at_start(overlap: Overlap, watched: PromptId, others: tuple[PromptId, ...]):
    """Record, as each `watched` call starts, how many of `others` are in flight."""
    seen: list[int] = []
    original = overlap.complete

    async def watching(call: LLMCall) -> LLMReply:
        if call.prompt_id is watched:
            seen.append(sum(overlap.now.get(kind, 0) for kind in others))
        return await original(call)

    overlap.complete = watching  # type: ignore[method-assign]
    return seen


async def test_a_pass_failing_its_rules_is_refined_beside_its_evaluation(
    harness, replies, make_plan_ready
) -> None:
    """Issue 33: failed rules decide that the pass does not converge and what to fix, so the
    critique and the refinement need nothing of the evaluation and run while it is in flight."""

    async def slow_evaluation(call: LLMCall) -> str:
        await asyncio.sleep(0.1)  # still in flight when the refinement starts
        return replies.weak()

    script = base_script(replies) | {
        EVALUATE: slow_evaluation,
        CRITIQUE: replies.critique("has-price"),
        REFINE: replies.refinement(replies.add("s2", "PRICE: 1")),
    }
    h = harness(script)
    h.deps.llm = overlap = Overlap(h.llm)
    seen = in_flight_at_start(overlap, REFINE, (EVALUATE,))
    event = make_plan_ready("one", rules=[content_rule("has-price", "PRICE")])
    (out,) = await phase_c.handle(event, h.deps)
    assert isinstance(out, PassCompleted)
    assert seen == [1], "the refinement waited for the evaluation"
    record = out.run.passes[0]
    assert record.assessment is not None and record.refinement is not None
    assert [i.rule_id for i in record.critique] == ["has-price"]
    assert [s.step_id for s in out.run.plan.steps] == ["s1", "s2"]


async def test_a_redelivered_pass_refined_beside_its_evaluation_makes_no_second_call(
    harness, delivered, replies, make_plan_ready
) -> None:
    script = base_script(replies) | {
        CRITIQUE: replies.critique("has-price"),
        REFINE: replies.refinement(replies.add("s2", "PRICE: 1")),
    }
    h = harness(script)
    h.deps.llm = Overlap(h.llm)
    event = make_plan_ready("one", rules=[content_rule("has-price", "PRICE")])
    (first,) = await phase_c.handle(delivered(event), h.deps)
    calls = list(h.llm.calls)
    (second,) = await phase_c.handle(delivered(event), h.deps)
    assert h.llm.calls == calls and {EVALUATE, CRITIQUE, REFINE} <= set(calls)
    assert first.event_id == second.event_id
    measured = {"usage", "check_cpu_s"}  # what the hop spent, tokens and CPU, as measured
    assert first.run.model_dump(exclude=measured) == second.run.model_dump(exclude=measured)


def with_reprofile_due(event, ttl: int = 3):
    """A pass-2 request whose run Phase D left a re-profile to (pass 1 charged from ttl + 1)."""
    run = event.run.model_copy(deep=True)
    run.plan.steps.append(run.plan.steps[0].model_copy(update={"step_id": "s2"}))
    run.plan.steps[0] = run.plan.steps[0].model_copy(
        update={"status": "done", "output": "old", "executed_in_pass": 1}
    )
    run.add_pass(ExecutionPass(pass_number=1, score=0.5))
    run.ttl_remaining = ttl
    run.reprofile_evidence = "pass 1: score 0.50, not converged\n- [high] the sums are missing"
    return event.child(PassRequested, run=run)


async def test_a_due_reprofile_runs_beside_the_pass_steps(
    harness, replies, make_plan_ready
) -> None:
    """Issue 33: Phase D's re-profile needs only the last pass's evidence, and the pass runs
    whatever it says, so the pass makes it while its steps run; the TTL comes out as D's."""
    h = harness(base_script(replies) | {UPDATE: replies.profile(depth=5)})
    h.deps.llm = overlap = Overlap(h.llm)
    seen = in_flight_at_start(overlap, STEP, (UPDATE,))
    (out,) = await phase_c.handle(with_reprofile_due(make_plan_ready("a"), ttl=3), h.deps)
    assert seen == [1], "the step waited for the re-profile"
    update = next(c.input for c in h.llm.history if c.prompt_id is UPDATE)
    assert "the sums are missing" in update.evidence
    run = out.run
    assert run.reprofile_evidence is None
    assert (run.profile.reasoning_depth, run.profile.profile_version) == (5, 2)
    assert run.ttl_remaining == 4  # D saw 4: 4 × 1.4 = 5.6 → 5, less pass 1's unit
    assert any("beside pass 2's steps" in note for note in run.notes)


async def test_a_failed_reprofile_beside_the_pass_keeps_the_profile(
    harness, replies, make_plan_ready
) -> None:
    h = harness(base_script(replies) | {UPDATE: LLMError("rate limited")})
    (out,) = await phase_c.handle(with_reprofile_due(make_plan_ready("a"), ttl=3), h.deps)
    assert out.run.profile.profile_version == 1 and out.run.reprofile_evidence is None
    assert any("rate limited" in note for note in out.run.notes)
    assert out.run.passes[-1].executed_step_ids == ["s2"]


async def test_a_redelivered_pass_with_a_reprofile_makes_no_second_call(
    harness, replies, make_plan_ready
) -> None:
    h = harness(base_script(replies) | {UPDATE: replies.profile(depth=4)})
    h.deps.llm = Overlap(h.llm)
    event = with_reprofile_due(make_plan_ready("a"))
    (first,) = await phase_c.handle(event.model_copy(deep=True), h.deps)
    calls = list(h.llm.calls)
    (second,) = await phase_c.handle(event.model_copy(deep=True), h.deps)
    assert h.llm.calls == calls and UPDATE in calls
    assert first.event_id == second.event_id
    assert first.run.model_dump(exclude={"usage"}) == second.run.model_dump(exclude={"usage"})


async def test_without_rules_the_refinement_waits_for_the_evaluation(
    harness, replies, make_plan_ready
) -> None:
    """Without rules, the evaluation decides whether the pass converged and names the issues
    to fix, so the refinement comes after it."""
    script = base_script(replies) | {
        EVALUATE: replies.weak(issues=(("medium", "thin"),)),
        REFINE: replies.refinement(replies.add("s2", "more")),
    }
    h = harness(script)
    h.deps.llm = overlap = Overlap(h.llm)
    seen = in_flight_at_start(overlap, REFINE, (EVALUATE,))
    (out,) = await phase_c.handle(make_plan_ready("one"), h.deps)
    assert isinstance(out, PassCompleted) and seen == [0]
    assert "thin" in h.llm.history[-1].input.issues


@pytest.mark.parametrize(
    ("rules", "passed", "blocked", "expected"),
    [
        (True, False, False, True),  # failed rules: the host knows it all
        (True, True, True, True),  # rules hold, a step is blocked, a warning to fix
        (True, True, False, False),  # converges: nothing to refine
        (False, False, False, False),  # no rules: the evaluation decides
    ],
)
def test_refinement_can_start(make_plan_ready, rules, passed, blocked, expected) -> None:
    rule = content_rule("r1", "x", severity="warn")
    run = make_plan_ready("one", rules=[rule] if rules else None).run
    finding = RuleFinding(id="r1", severity="warn", message="m")
    record = ExecutionPass(
        pass_number=1,
        blocked_step_ids=["s1"] if blocked else [],
        evaluation=Evaluation(
            score=0.5,
            passed=passed,
            warnings=[finding],
            rule_results=[RuleResult(id="r1", verdict="warn", details="d")],
        )
        if rules
        else None,
    )
    assert phase_c.refinement_can_start(run, record, LoopSettings()) is expected


async def test_a_redelivered_pass_with_steps_at_once_makes_no_second_call(
    harness, delivered, replies, make_plan_ready
) -> None:
    """Concurrent calls keep their own memo scopes: the same event handled again takes every
    reply from the memo and publishes the same event, whatever order the calls came back in."""
    h = harness(base_script(replies) | {EVALUATE: replies.weak()})
    h.deps.llm = Overlap(h.llm)
    event = with_dependencies(make_plan_ready("a", "b", "c"), s1=[], s2=[], s3=[])
    (first,) = await phase_c.handle(delivered(event), h.deps)
    calls = list(h.llm.calls)
    (second,) = await phase_c.handle(delivered(event), h.deps)
    assert h.llm.calls == calls
    assert first.event_id == second.event_id
    assert first.run.model_dump(exclude={"usage"}) == second.run.model_dump(exclude={"usage"})
