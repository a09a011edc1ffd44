"""phases/models.py: TTL allocation, refinement rules, plan ids, rubric and rule shapes."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from aeonloop.checks.types import CountCheck
from aeonloop.limits import DEFAULT_MAX_PASSES
from aeonloop.phases.models import (
    Consistency,
    ConvergenceAssessment,
    Plan,
    PlanStep,
    RefinementAction,
    Rule,
    RuleCheck,
    TaskProfile,
    apply_refinements,
    pass_cap,
    with_sound_dependencies,
)

# ---- TTL ----------------------------------------------------------------------------------------


def test_default_profile_gets_the_worked_example_ttl_of_4() -> None:
    # 3 · 1.5 · 0.5 · 1 · 1 · 1 · 2.0 = 4.5 → 4
    assert TaskProfile.default().allocate_ttl() == 4


def test_ttl_truncates_the_product() -> None:
    # 2 · 1.5 · 0.8 · 0.75 · 0.75 · 0.75 · 2.0 = 2.025 → 2
    profile = TaskProfile(
        reasoning_depth=2,
        information_sufficiency=0.8,
        expected_tool_usage="minimal",
        output_breadth="narrow",
        confidence_requirement="low",
    )
    assert profile.allocate_ttl() == 2


def test_ttl_is_capped_by_the_default_cap_and_by_the_request_cap() -> None:
    big = TaskProfile(
        reasoning_depth=5,
        information_sufficiency=1.0,
        expected_tool_usage="extensive",
        output_breadth="broad",
        confidence_requirement="high",
    )
    assert big.allocate_ttl() == DEFAULT_MAX_PASSES == 8  # AEON_MAX_PASSES' default
    assert big.allocate_ttl(cap=3) == 3


@pytest.mark.parametrize(
    ("requested", "max_passes", "cap"),
    [(None, 8, 8), (3, 8, 3), (8, 8, 8), (9, 8, 8), (100, 20, 20), (None, 1, 1)],
)
def test_a_runs_cap_is_its_request_within_aeon_max_passes(
    requested: int | None, max_passes: int, cap: int
) -> None:
    """One cap: a request may ask for fewer passes than AEON_MAX_PASSES, never more, and one
    that asks for nothing gets all of it."""
    assert pass_cap(requested, max_passes) == cap


def test_ttl_is_at_least_one() -> None:
    assert TaskProfile(reasoning_depth=1, information_sufficiency=0.0).allocate_ttl() == 1


def test_profile_ranges_are_enforced() -> None:
    with pytest.raises(ValidationError):
        TaskProfile(reasoning_depth=6)
    with pytest.raises(ValidationError):
        TaskProfile(information_sufficiency=1.5)


# ---- plans and refinement -----------------------------------------------------------------------


def _plan(done: int = 1, pending: int = 2) -> Plan:
    steps = [
        PlanStep(step_id=f"s{n}", description=f"step {n}", status="done", output=f"out {n}")
        for n in range(1, done + 1)
    ]
    steps += [
        PlanStep(step_id=f"s{n}", description=f"step {n}")
        for n in range(done + 1, done + pending + 1)
    ]
    return Plan(goal="g", steps=steps)


def _add(step_id: str) -> RefinementAction:
    return RefinementAction(
        action_type="ADD", new_step=PlanStep(step_id=step_id, description="new")
    )


def test_plan_step_ids_must_be_unique() -> None:
    with pytest.raises(ValidationError, match="repeated"):
        Plan(goal="g", steps=[PlanStep(step_id="a", description="x")] * 2)


def _step(step_id: str, *needs: str, legacy: bool = False) -> PlanStep:
    return PlanStep(step_id=step_id, description="x", depends_on=None if legacy else list(needs))


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ([_step("a", "zz")], "unknown steps ['zz']"),
        ([_step("a", "a")], "depends on itself"),
        ([_step("a", "b"), _step("b", "a")], "form a cycle"),
        # a step without depends_on needs every earlier one: naming a later one closes a cycle
        ([_step("a", "b"), _step("b", legacy=True)], "form a cycle"),
    ],
)
def test_a_plans_dependencies_are_validated(steps: list[PlanStep], problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        Plan(goal="g", steps=steps)


def test_a_step_without_dependencies_named_needs_every_earlier_step() -> None:
    plan = Plan(goal="g", steps=[_step("a"), _step("b", legacy=True), _step("c", "a")])
    assert [plan.dependencies(s) for s in plan.steps] == [[], ["a"], ["a"]]


def test_dependencies_a_model_got_wrong_are_dropped_not_fatal() -> None:
    kept = with_sound_dependencies([_step("a", "a", "zz"), _step("b", "a")])
    assert [s.depends_on for s in kept] == [[], ["a"]]
    cycle = with_sound_dependencies([_step("a", "b"), _step("b", "a")])
    assert [s.depends_on for s in cycle] == [None, None], "a cycle falls back to plan order"


def test_removing_a_step_others_depend_on_keeps_the_plan_valid() -> None:
    plan = Plan(goal="g", steps=[_step("a"), _step("b"), _step("c", "a", "b")])
    remove = RefinementAction(action_type="REMOVE", target_step_id="a")
    outcome = apply_refinements(plan, [remove], max_actions=5)
    assert [(s.step_id, s.depends_on) for s in outcome.plan.steps] == [("b", []), ("c", ["b"])]


def test_add_appends_a_pending_step_even_if_the_llm_says_it_is_done() -> None:
    action = RefinementAction(
        action_type="ADD",
        new_step=PlanStep(step_id="s9", description="new", status="done", output="fake"),
    )
    outcome = apply_refinements(_plan(), [action], max_actions=5)
    added = outcome.plan.steps[-1]
    assert (added.step_id, added.status, added.output) == ("s9", "pending", None)
    assert outcome.applied == [action]


def test_add_with_a_used_id_is_rejected() -> None:
    outcome = apply_refinements(_plan(), [_add("s2")], max_actions=5)
    assert outcome.applied == []
    assert "already in the plan" in outcome.rejected[0]


def test_modify_changes_only_the_description_of_a_pending_step() -> None:
    action = RefinementAction(
        action_type="MODIFY",
        target_step_id="s2",
        new_step=PlanStep(step_id="other", description="better"),
    )
    outcome = apply_refinements(_plan(), [action], max_actions=5)
    step = outcome.plan.step("s2")
    assert step is not None and step.description == "better"
    assert outcome.plan.step("other") is None


def test_remove_drops_a_pending_step() -> None:
    action = RefinementAction(action_type="REMOVE", target_step_id="s3")
    outcome = apply_refinements(_plan(), [action], max_actions=5)
    assert [s.step_id for s in outcome.plan.steps] == ["s1", "s2"]


def test_replace_swaps_a_pending_step_in_place() -> None:
    action = RefinementAction(
        action_type="REPLACE",
        target_step_id="s2",
        new_step=PlanStep(step_id="s2b", description="instead"),
    )
    outcome = apply_refinements(_plan(), [action], max_actions=5)
    assert [s.step_id for s in outcome.plan.steps] == ["s1", "s2b", "s3"]


def test_replace_onto_another_existing_id_is_rejected() -> None:
    action = RefinementAction(
        action_type="REPLACE",
        target_step_id="s2",
        new_step=PlanStep(step_id="s3", description="clash"),
    )
    outcome = apply_refinements(_plan(), [action], max_actions=5)
    assert outcome.applied == [] and "already in the plan" in outcome.rejected[0]


@pytest.mark.parametrize("kind", ["MODIFY", "REMOVE", "REPLACE"])
def test_executed_steps_are_immutable(kind: str) -> None:
    new_step = None if kind == "REMOVE" else PlanStep(step_id="s1", description="rewritten")
    action = RefinementAction(action_type=kind, target_step_id="s1", new_step=new_step)
    plan = _plan()
    outcome = apply_refinements(plan, [action], max_actions=5)
    assert outcome.plan.steps[0] == plan.steps[0]
    assert "immutable" in outcome.rejected[0]


def test_unknown_target_is_rejected() -> None:
    action = RefinementAction(action_type="REMOVE", target_step_id="nope")
    assert "no such step" in apply_refinements(_plan(), [action], 5).rejected[0]


def test_max_actions_bounds_what_is_applied() -> None:
    outcome = apply_refinements(_plan(), [_add("a"), _add("b"), _add("c")], max_actions=2)
    assert [a.new_step.step_id for a in outcome.applied if a.new_step] == ["a", "b"]
    assert "over the limit of 2" in outcome.rejected[0]


def test_apply_refinements_leaves_the_input_plan_alone() -> None:
    plan = _plan()
    apply_refinements(
        plan, [_add("x"), RefinementAction(action_type="REMOVE", target_step_id="s2")], 5
    )
    assert [s.step_id for s in plan.steps] == ["s1", "s2", "s3"]


@pytest.mark.parametrize(
    "fields",
    [
        {"action_type": "ADD"},
        {"action_type": "MODIFY", "new_step": {"step_id": "a", "description": "b"}},
        {"action_type": "REMOVE"},
        {"action_type": "REPLACE", "target_step_id": "s1"},
    ],
)
def test_action_shape_is_checked(fields: dict) -> None:
    with pytest.raises(ValidationError):
        RefinementAction.model_validate(fields)


# ---- rubric and rules ---------------------------------------------------------------------------


def _assessment(
    completeness: float, coherence: float, aligned: bool = True
) -> ConvergenceAssessment:
    return ConvergenceAssessment(
        converged=True,
        completeness_score=completeness,
        coherence_score=coherence,
        consistency=Consistency(plan_aligned=True, step_aligned=True, answer_aligned=aligned),
    )


def test_default_rubric_boundaries() -> None:
    assert _assessment(0.95, 0.90).meets_default_rubric()
    assert not _assessment(0.949, 0.99).meets_default_rubric()
    assert not _assessment(0.99, 0.899).meets_default_rubric()
    assert not _assessment(1.0, 1.0, aligned=False).meets_default_rubric()


def test_assessment_score_is_the_mean_of_completeness_and_coherence() -> None:
    assert _assessment(0.8, 0.9).score == 0.85


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "content"},
        {"type": "content", "search": "(unclosed"},
        {"type": "executable"},
    ],
)
def test_rule_check_shape_is_checked(fields: dict) -> None:
    with pytest.raises(ValidationError):
        RuleCheck.model_validate(fields)


# ---- a rule's check: the schema's own, the vocabulary's, or words -------------------------------


def test_a_rules_check_takes_three_forms() -> None:
    own = Rule.model_validate({"id": "a", "check": {"type": "content", "search": "x"}})
    vocabulary = Rule.model_validate(
        {"id": "b", "check": {"type": "count", "unit": "bullets", "min": 3, "max": 3}}
    )
    words = Rule.model_validate({"id": "c", "check": "the answer has three bullet points"})
    assert isinstance(own.check, RuleCheck) and not own.in_words
    assert isinstance(vocabulary.check, CountCheck) and not vocabulary.in_words
    assert words.check == "the answer has three bullet points" and words.in_words
    assert [r.check_text() for r in (own, vocabulary, words)] == [
        "content matches /x/",
        "exactly 3 bullet line(s)",
        "the answer has three bullet points",
    ]
    for rule in (own, vocabulary, words):
        assert Rule.model_validate_json(rule.model_dump_json()) == rule


def test_a_rules_origin_is_its_rules_unless_the_request_implied_it() -> None:
    assert Rule(id="a", check="short").origin == "rules"
    assert Rule(id="a", check="short", origin="request").origin == "request"
    with pytest.raises(ValidationError):
        Rule.model_validate({"id": "a", "check": "short", "origin": "model"})


@pytest.mark.parametrize(
    ("check", "where"),
    [
        ("", "check.words"),
        ("   ", "check"),
        ({"type": "pattern", "pattern": "(x"}, "check.vocabulary.pattern"),
        ({"type": "content", "search": "(x"}, "check.content|executable"),
        ({"type": "count", "unit": "bullets"}, "check.vocabulary.count"),
        ({"type": "nope"}, "check.vocabulary"),
        (3, "check.vocabulary"),
    ],
)
def test_a_bad_check_is_refused_naming_where(check: object, where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Rule.model_validate({"id": "a", "check": check})
    locs = [".".join(str(p) for p in e["loc"]) for e in caught.value.errors()]
    assert locs == [where]


def test_the_rules_summary_shows_each_form_of_check_and_a_rule_the_request_implied() -> None:
    from aeonloop.phases.summaries import rules_summary

    rules = [
        Rule(id="a", description="cites", check=RuleCheck(type="content", search="Source:")),
        Rule(id="b", check=CountCheck(unit="bullets", min=3, max=3), origin="request"),
        Rule(id="c", severity="warn", check="is friendly"),
    ]
    assert rules_summary(rules).splitlines() == [
        "- a [fail, weight 1]: cites (content matches /Source:/)",
        "- b [fail, weight 1, from the request]: exactly 3 bullet line(s)",
        "- c [warn, weight 1]: is friendly",
    ]
