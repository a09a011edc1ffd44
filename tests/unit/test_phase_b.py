"""Phase B: the plan, its one validation and one refinement, and the failed exit without a plan."""

from __future__ import annotations

from aeonloop.llm.base import LLMError
from aeonloop.phases import phase_b, planning, plans
from aeonloop.phases.events import LoopExited, PlanReady, RunState, TaskProfiled
from aeonloop.phases.models import Plan, PlanStep, RefinementAction, TaskProfile
from aeonloop.prompts.registry import PromptId, RefinementOutput

PLAN = PromptId.PLAN_GENERATION_USER
VALIDATE = PromptId.VALIDATION_SEMANTIC_USER
REFINE = PromptId.RECURSIVE_REFINEMENT_USER
REPAIR = PromptId.SUPERVISOR_REPAIR_JSON_USER
#: A plan long enough for Phase B to have the model check it (planning.needs_check).
CHECKED = ("gather", "weigh", "compare", "answer")
CHECKED_IDS = ["s1", "s2", "s3", "s4"]


def profiled(make_request) -> TaskProfiled:
    request = make_request()
    run = request.initial_state()
    run.profile, run.ttl_remaining = TaskProfile.default(), 4
    return request.child(TaskProfiled, run=run)


def step_ids(run: RunState) -> list[str]:
    assert run.plan is not None
    return [s.step_id for s in run.plan.steps]


async def test_clean_plan_is_not_refined(harness, replies, make_request) -> None:
    h = harness({PLAN: replies.plan(*CHECKED), VALIDATE: replies.validation()})
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, PlanReady)
    assert step_ids(out.run) == CHECKED_IDS
    assert all(s.status == "pending" for s in out.run.plan.steps)
    assert h.llm.calls == [PLAN, VALIDATE]
    assert out.run.total_refinements == 0


async def test_a_short_plan_runs_without_the_models_check(harness, replies, make_request) -> None:
    """Issue 33: a plan of a few steps needs no check call; the first pass's evaluation reviews
    what its steps made, and refines it then."""
    short = ("gather", "weigh", "answer")
    assert len(short) == planning.UNCHECKED_PLAN_STEPS < len(CHECKED)
    h = harness({PLAN: replies.plan(*short), VALIDATE: replies.validation(("high", "bad"))})
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, PlanReady) and step_ids(out.run) == ["s1", "s2", "s3"]
    assert h.llm.calls == [PLAN]
    assert out.run.total_refinements == 0


def test_a_plan_needs_the_check_past_the_unchecked_steps() -> None:
    step = PlanStep(step_id="s1", description="d")
    few = Plan(goal="g", steps=[step.model_copy(update={"step_id": f"s{n}"}) for n in range(3)])
    more = Plan(goal="g", steps=[*few.steps, step.model_copy(update={"step_id": "s9"})])
    assert not planning.needs_check(few) and planning.needs_check(more)


async def test_profile_and_rules_reach_the_plan_prompt(harness, replies, make_request) -> None:
    h = harness({PLAN: replies.plan("one")})
    await phase_b.handle(profiled(make_request), h.deps)
    assert "reasoning_depth=3" in h.llm.history[0].input.profile_summary


async def test_validation_issues_are_refined_once(harness, replies, make_request) -> None:
    h = harness(
        {
            PLAN: replies.plan(*CHECKED),
            VALIDATE: replies.validation(("high", "nothing compares the options")),
            REFINE: replies.refinement(
                replies.modify("s2", "compare, then answer"), replies.add("s5", "review")
            ),
        }
    )
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, PlanReady)
    assert step_ids(out.run) == [*CHECKED_IDS, "s5"]
    assert out.run.plan.steps[1].description == "compare, then answer"
    assert out.run.total_refinements == 2
    assert h.llm.calls == [PLAN, VALIDATE, REFINE]
    sent = h.llm.history[2].input
    assert "nothing compares the options" in sent.issues and sent.executed_step_ids == []
    assert "applied 2 action(s)" in out.run.notes[-1]


async def test_refinement_obeys_the_per_pass_bound(harness, replies, make_request) -> None:
    actions = [replies.add(f"x{n}", "more") for n in range(4)]
    h = harness(
        {
            PLAN: replies.plan(*CHECKED),
            VALIDATE: replies.validation(("low", "thin")),
            REFINE: replies.refinement(*actions),
        },
        max_actions_per_pass=2,
    )
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert step_ids(out.run) == [*CHECKED_IDS, "x0", "x1"]
    assert h.llm.history[2].input.max_actions == 2


async def test_no_refinement_budget_no_refinement_call(harness, replies, make_request) -> None:
    h = harness(
        {PLAN: replies.plan(*CHECKED), VALIDATE: replies.validation(("high", "bad"))},
        max_refinements_per_run=0,
    )
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, PlanReady) and h.llm.calls == [PLAN, VALIDATE]
    assert "no refinement budget" in out.run.notes[-1]


async def test_plan_failure_ends_the_loop_with_zero_passes(harness, make_request) -> None:
    h = harness({PLAN: LLMError("quota exceeded")})
    event = profiled(make_request)
    (out,) = await phase_b.handle(event, h.deps)
    assert isinstance(out, LoopExited)
    assert out.reason == "failed" and "quota exceeded" in out.detail
    assert out.request == event.run.request
    assert out.run is not None and out.run.passes == [] and out.run.plan is None


async def test_empty_plan_ends_the_loop(harness, replies, make_request) -> None:
    """A plan needs a step by its contract (PlanBody.steps, minItems 1): an empty one is an
    unusable reply, repaired once, and ends the loop when the repair is empty too."""
    h = harness({PLAN: replies.plan(), REPAIR: replies.plan()})
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "failed"
    assert "plan generation failed" in out.detail and "steps" in out.detail
    assert h.llm.calls == [PLAN, REPAIR]


async def test_unusable_plan_after_repair_ends_the_loop(harness, make_request) -> None:
    h = harness({PLAN: "step one, step two", REPAIR: '{"steps": "none"}'})
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "failed"
    assert h.llm.calls == [PLAN, REPAIR]


async def test_repeated_step_ids_are_made_unique(harness, replies, make_request) -> None:
    reply = replies.plan("a", "b", "c", ids=["s1", "s1", "s2"])
    h = harness({PLAN: reply, VALIDATE: replies.validation()})
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert step_ids(out.run) == ["s1", "s1-2", "s2"]


def test_unique_step_ids_trims_and_suffixes() -> None:
    long = "x" * 80
    ids = plans.unique_step_ids([long, long, " ", "a", "a", "a-2"])
    assert ids[0] == "x" * 64
    assert ids[1] == "x" * 62 + "-2" and len(ids[1]) == 64
    assert ids[2:] == ["step", "a", "a-2", "a-2-2"]


async def test_validation_failure_keeps_the_plan(harness, replies, make_request) -> None:
    h = harness({PLAN: replies.plan(*CHECKED), VALIDATE: LLMError("timeout")})
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, PlanReady) and step_ids(out.run) == CHECKED_IDS
    assert "plan validation failed" in out.run.notes[-1]


async def test_refinement_failure_keeps_the_unrefined_plan(harness, replies, make_request) -> None:
    h = harness(
        {
            PLAN: replies.plan(*CHECKED),
            VALIDATE: replies.validation(("high", "bad")),
            REFINE: LLMError("timeout"),
        }
    )
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert isinstance(out, PlanReady) and step_ids(out.run) == CHECKED_IDS
    assert out.run.total_refinements == 0
    assert "plan refinement failed" in out.run.notes[-1]


async def test_refinement_that_empties_the_plan_is_refused(harness, replies, make_request) -> None:
    remove = [
        {"action_type": "REMOVE", "target_step_id": step_id, "reason": "scripted"}
        for step_id in CHECKED_IDS
    ]
    h = harness(
        {
            PLAN: replies.plan(*CHECKED),
            VALIDATE: replies.validation(("high", "bad")),
            REFINE: replies.refinement(*remove),
        }
    )
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert step_ids(out.run) == CHECKED_IDS and out.run.total_refinements == 0
    assert "rejected 1" in out.run.notes[-1]


async def test_malformed_actions_are_rejected_not_fatal(harness, replies, make_request) -> None:
    no_target = {"action_type": "MODIFY", "new_step": {"step_id": "s1", "description": "x"}}
    h = harness(
        {
            PLAN: replies.plan(*CHECKED),
            VALIDATE: replies.validation(("medium", "thin")),
            REFINE: replies.refinement(no_target, replies.add("s5", "more")),
        }
    )
    (out,) = await phase_b.handle(profiled(make_request), h.deps)
    assert step_ids(out.run) == [*CHECKED_IDS, "s5"]
    assert "applied 1 action(s) and rejected 1" in out.run.notes[-1]


async def test_same_event_twice_makes_no_second_call(
    harness, delivered, replies, make_request
) -> None:
    h = harness(
        {
            PLAN: replies.plan(*CHECKED),
            VALIDATE: replies.validation(("high", "bad")),
            REFINE: replies.refinement(replies.add("s2", "more")),
        }
    )
    event = profiled(make_request)
    (first,) = await phase_b.handle(delivered(event), h.deps)
    (second,) = await phase_b.handle(delivered(event), h.deps)
    assert h.llm.calls == [PLAN, VALIDATE, REFINE]
    assert first.event_id == second.event_id
    assert first.run.plan == second.run.plan


def test_actions_come_from_the_output_and_malformed_ones_are_named() -> None:
    output = RefinementOutput.model_validate(
        {
            "actions": [
                {"action_type": "ADD", "new_step": {"step_id": "s2", "description": "more"}},
                {"action_type": "REMOVE", "target_step_id": "s1", "reason": "repeats s2"},
                {"action_type": "MODIFY", "new_step": {"step_id": "s1", "description": "x"}},
                {"action_type": "ADD", "new_step": {"step_id": "s" * 65, "description": "y"}},
            ]
        }
    )
    actions, malformed = planning.actions_from_output(output)
    assert actions == [
        RefinementAction(action_type="ADD", new_step=PlanStep(step_id="s2", description="more")),
        RefinementAction(action_type="REMOVE", target_step_id="s1", reason="repeats s2"),
    ]
    assert [m.split()[0] for m in malformed] == ["MODIFY", "ADD"]
    assert "MODIFY needs target_step_id" in malformed[0]
    assert "at most 64 characters" in malformed[1]
