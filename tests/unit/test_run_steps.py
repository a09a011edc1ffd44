"""A run as steps (gateway.http.run_steps) and the watched run's merging (gateway.http.run_feed):
what makes the HTTP event stream resumable is that the steps come from the newest event alone, in
an order a reader's event id pins down."""

from __future__ import annotations

import pytest

from aeonloop.contracts import Usage
from aeonloop.gateway.http.run_feed import RunView, WatchedRun, wire_steps
from aeonloop.gateway.http.run_steps import (
    ANSWERED,
    BEFORE_ANY_STEP,
    WEBHOOK_SETTLED,
    EventId,
    Step,
    degraded_because,
    progress_rank,
    request_of,
    run_steps,
)
from aeonloop.phases.events import (
    Event,
    ExecutionResult,
    LoopExited,
    PassCompleted,
    PassRequested,
    PlanAwaitingApproval,
    PlanReady,
    RequestSubmitted,
    TaskProfiled,
    WebhookSettled,
)
from aeonloop.phases.models import (
    ExecutionPass,
    FinalAnswer,
    Plan,
    PlanStep,
    RefinementAction,
    TaskProfile,
    ToolCall,
    apply_refinements,
)


def _journey() -> dict[str, Event]:
    """One run's events, each carrying the run as it was then."""
    request = RequestSubmitted.new("Explain tides", timeout=60)
    run = request.initial_state()
    run.profile, run.ttl_remaining = TaskProfile(), 4
    profiled = request.child(TaskProfiled, run=run.model_copy(deep=True))
    run.plan = Plan(
        goal="explain tides",
        steps=[
            PlanStep(
                step_id="s1", description="say what pulls", tool="lookup", arguments={"q": "tide"}
            ),
            PlanStep(step_id="s2", description="say it simply"),
        ],
    )
    planned = profiled.child(PlanReady, run=run.model_copy(deep=True))
    run.plan.steps[0] = run.plan.steps[0].model_copy(
        update={"status": "done", "output": "The moon pulls the sea.", "executed_in_pass": 1}
    )
    record = ExecutionPass(
        pass_number=1,
        executed_step_ids=["s1"],
        failed_steps={"s2": "the LLM call failed"},
        score=0.5,
        tool_calls=[
            ToolCall(
                step_id="s1",
                tool="lookup",
                arguments={"q": "tide"},
                outcome="ok",
                seconds=0.25,
                excerpt="The moon pulls the sea.",
            )
        ],
    )
    run.add_pass(record)
    completed = planned.child(PassCompleted, run=run.model_copy(deep=True), execution_pass=record)
    requested = completed.child(PassRequested, run=run.model_copy(deep=True))
    exited = requested.child(LoopExited, reason="stagnated", detail="no progress", run=run)
    return {
        "request": request,
        "profiled": profiled,
        "planned": planned,
        "completed": completed,
        "requested": requested,
        "exited": exited,
    }


def _answer(status: str = "converged", **metadata: object) -> ExecutionResult:
    degraded = bool(metadata.get("degraded", False))
    return ExecutionResult(
        status=status,
        degraded=degraded,
        total_passes=1,
        total_refinements=0,
        ttl_remaining=3,
        usage=Usage(),
        elapsed_seconds=1.5,
        final_answer=FinalAnswer(
            answer_text="The moon pulls the sea.",
            confidence=0.8,
            metadata={"degraded": degraded, **metadata},
        ),
    )


def _keys(state: Event | None, answer: ExecutionResult | None = None) -> list[str]:
    return [step.key for step in run_steps(state, answer)]


def test_the_newest_event_alone_gives_every_step_so_far() -> None:
    run = _journey()
    assert _keys(run["request"]) == []
    assert _keys(run["profiled"]) == ["profile"]
    assert _keys(run["planned"]) == ["profile", "plan"]
    assert _keys(run["completed"]) == ["profile", "plan", "pass-1"]
    assert _keys(run["requested"]) == ["profile", "plan", "pass-1"]
    assert _keys(run["exited"]) == ["profile", "plan", "pass-1", "exit"]
    assert _keys(run["exited"], _answer()) == ["profile", "plan", "pass-1", "exit", "answer"]
    orders = [step.order for step in run_steps(run["exited"], _answer())]
    assert orders == sorted(orders) and orders[0] > BEFORE_ANY_STEP and orders[-1] == ANSWERED


def test_a_paused_run_shows_the_plan_to_approve_and_its_plan_step_only_once_approved() -> None:
    run = _journey()
    paused = run["profiled"].child(PlanAwaitingApproval, run=run["planned"].run)
    steps = run_steps(paused, None)
    assert [step.key for step in steps] == ["profile", "awaiting_approval"]
    assert steps[-1].data["plan"] == {
        "goal": "explain tides",
        "steps": [
            {"step_id": "s1", "description": "say what pulls"},
            {"step_id": "s2", "description": "say it simply"},
        ],
    }
    assert steps[-1].order < run_steps(run["planned"], None)[-1].order  # then `plan` is new


def test_a_run_that_named_a_webhook_ends_with_its_outcome() -> None:
    exited = _journey()["exited"]
    settled = exited.child(
        WebhookSettled, outcome="failed", tries=5, webhook_id="e1", reason="answered 500"
    )
    steps = run_steps(exited, _answer(), settled)
    assert [step.key for step in steps][-2:] == ["answer", "webhook"]
    last = steps[-1]
    assert (last.kind, last.order) == ("webhook_failed", WEBHOOK_SETTLED)
    assert last.data["tries"] == 5 and last.data["reason"] == "answered 500"
    assert run_steps(exited, None, settled)[-1].kind == "exit"  # never before the answer


def test_a_pass_shows_each_step_it_ran_with_the_output_kept_or_why_not() -> None:
    (step,) = [s for s in run_steps(_journey()["completed"], None) if s.kind == "pass"]
    assert step.data["pass"] == 1 and step.data["score"] == 0.5 and not step.data["converged"]
    done, failed = step.data["steps"]
    assert done == {
        "step_id": "s1",
        "description": "say what pulls",
        "status": "done",
        "why": None,
        "output": "The moon pulls the sea.",
        "tool_call": {
            "tool": "lookup",
            "arguments": {"q": "tide"},
            "outcome": "ok",
            "seconds": 0.25,
            "excerpt": "The moon pulls the sea.",
            "repaired": None,
        },
    }
    assert failed["status"] == "failed" and failed["why"] == "the LLM call failed"
    assert failed["output"] is None and failed["tool_call"] is None


def test_the_plan_shows_which_steps_call_a_tool() -> None:
    (plan,) = [s for s in run_steps(_journey()["planned"], None) if s.kind == "plan"]
    assert plan.data["files"] == []
    tool_step, reasoning_step = plan.data["steps"]
    assert tool_step == {
        "step_id": "s1",
        "description": "say what pulls",
        "tool": "lookup",
        "arguments": {"q": "tide"},
    }
    assert reasoning_step == {"step_id": "s2", "description": "say it simply"}


def test_the_exit_comes_from_the_loop_or_else_from_the_answer() -> None:
    exited = run_steps(_journey()["exited"], None)[-1]
    assert exited.kind == "exit"
    assert exited.data["reason"] == "stagnated" and exited.data["words"] == "stopped improving"
    assert exited.data["detail"] == "no progress" and exited.data["passes"] == 1
    # Known only from the answer store: the exit and the answer, nothing invented before them.
    steps = run_steps(None, _answer("ttl_exhausted", exit_detail="budget spent"))
    assert [s.key for s in steps] == ["exit", "answer"]
    assert steps[0].data["reason"] == "ttl_exhausted" and steps[0].data["detail"] == "budget spent"
    lost = LoopExited.model_validate(
        {**_journey()["exited"].model_dump(), "run": None, "reason": "failed"}
    )
    assert _keys(lost, _answer("failed")) == ["exit", "answer"]


def test_progress_ranks_order_a_runs_events() -> None:
    run = _journey()
    ranks = [progress_rank(run[name]) for name in ("request", "profiled", "planned", "completed")]
    assert ranks == sorted(ranks) and len(set(ranks)) == 4
    assert progress_rank(run["requested"]) == progress_rank(run["completed"])
    assert progress_rank(run["exited"]) > progress_rank(run["requested"])
    assert request_of(run["request"]) == request_of(run["exited"]) == "Explain tides"


def test_event_ids_parse_back_to_their_place() -> None:
    event_id = EventId.parse("pass-12@1732300000000-3")
    assert event_id.order == Step("pass", 12, {}).order and event_id.entry_id == "1732300000000-3"
    order = [
        "profile",
        "awaiting_approval",
        "plan",
        "pass-1",
        "pass-99",
        "exit",
        "answer",
        "webhook",
    ]
    orders = [EventId.parse(f"{key}@1-0").order for key in order]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert EventId.parse("answer@5-0").order == ANSWERED
    assert EventId.parse("webhook@5-0").order == WEBHOOK_SETTLED
    # 19 digits a part: the pattern the OpenAPI document gives, below Redis's 64-bit limit.
    assert EventId.parse(f"plan@{'9' * 19}-{'9' * 19}").entry_id.startswith("9999")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "pass@1-0",
        "pass-0@1-0",
        "plan",
        "plan@",
        "plan@abc",
        "summary@1-0",
        "x" * 500,
        f"plan@{2**64}-0",  # past what Redis takes: it would refuse the id, not the reader
        f"plan@1-{2**64}",
        f"plan@{2**64 - 1}-0",  # 20 digits: more than an id this API gives out has
    ],
)
def test_ids_this_api_never_gave_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an event id of this API"):
        EventId.parse(text)


def test_degraded_reasons_are_plain_lines_without_repeats() -> None:
    """The exit in words, why, each rule that did not hold (id and message), what is missing,
    then the notes; "not converged" is not said twice."""
    assert degraded_because(_answer()) == []
    stagnated = degraded_because(
        _answer(
            "stagnated",
            degraded=True,
            reason="not_converged",
            exit_detail="pass 2 changed nothing",
            failed_rules=[
                {"id": "no-tbd", "severity": "fail", "message": "no TBD left: /TBD/ found"},
                {"id": "cites", "severity": "warn", "message": "cite a source: not found"},
            ],
            missing_fields=["semantic_validation"],
            run_notes=["the plan was refined once"],
        )
    )
    assert stagnated == [
        "the loop exited early, before converging: stopped improving",
        "why: pass 2 changed nothing",
        "failed rule no-tbd: no TBD left: /TBD/ found",
        "warning from rule cites: cite a source: not found",
        "missing from the run: the last pass's validation",
        "the plan was refined once",
    ]
    failed = degraded_because(_answer("converged", degraded=True, reason="llm_error", error="503"))
    assert failed == ["the language model call failed", "error: 503"]


def test_a_watched_run_keeps_the_newest_state_and_its_answer() -> None:
    run, watched = _journey(), WatchedRun("cid")
    watched.offer(RunView(run["completed"], "5-0", None))
    first = watched.version
    watched.offer(RunView(run["profiled"], "3-0", None))  # older: nothing changes
    assert watched.version == first and watched.view.state is run["completed"]
    answer = _answer()
    watched.offer(RunView(None, None, answer, "9-0"))
    watched.offer(RunView(run["exited"], "8-0", None))
    assert watched.view == RunView(run["exited"], "8-0", answer, "9-0")
    steps = watched.steps()
    assert watched.steps() is steps  # worked out once per change, for every watcher
    assert [s.event_id for s in steps] == [
        "profile@8-0",
        "plan@8-0",
        "pass-1@8-0",
        "exit@8-0",
        "answer@8-0",
    ]
    assert wire_steps(RunView(None, None, answer, "9-0"))[-1].event_id == "answer@9-0"


def test_the_plan_names_the_files_the_request_attached() -> None:
    planned = _journey()["planned"]
    planned.run.file_paths = ["notes/tides.md", "data.csv"]
    (plan,) = [s for s in run_steps(planned, None) if s.kind == "plan"]
    assert plan.data["files"] == ["notes/tides.md", "data.csv"]


def _refined(plan: Plan, number: int, *actions: RefinementAction) -> tuple[Plan, ExecutionPass]:
    """Pass `number`'s refinement applied to `plan` as Phase C applies it, and the pass's record
    of it (all its actions applied)."""
    outcome = apply_refinements(plan, list(actions), max_actions=len(actions))
    assert len(outcome.applied) == len(actions), outcome.rejected
    return outcome.plan, ExecutionPass(pass_number=number, refinement=outcome.record())


def test_the_plan_is_as_phase_b_made_it_with_each_later_change_marked_by_its_pass() -> None:
    """Issue 35: `aeon ask` said `B planned: 2 steps` while the plan step showed 3 (a step a
    later refinement added, shown as planned). The plan step shows B's steps, and each step a
    pass's refinement added, changed or removed says so, with that pass; the count is B's."""
    planned = _journey()["planned"]
    run = planned.run.model_copy(deep=True)
    step = PlanStep(step_id="s3", description="give an example")
    made = Plan(goal="explain tides", steps=[*run.plan.steps, step])
    new = PlanStep(step_id="s4", description="review it")
    plan, first = _refined(
        made,
        1,
        RefinementAction(action_type="ADD", new_step=new),
        RefinementAction(action_type="REMOVE", target_step_id="s3"),
        RefinementAction(
            action_type="MODIFY",
            target_step_id="s2",
            new_step=PlanStep(step_id="s2", description="say it for a child"),
        ),
    )
    plan, second = _refined(
        plan,
        2,
        RefinementAction(
            action_type="REPLACE",
            target_step_id="s4",
            new_step=PlanStep(step_id="s5", description="check it"),
        ),
        RefinementAction(
            action_type="ADD", new_step=PlanStep(step_id="s3", description="a new s3")
        ),
    )
    run.plan = plan
    run.add_pass(first)
    run.add_pass(second)

    (step,) = [s for s in run_steps(planned.child(PlanReady, run=run), None) if s.kind == "plan"]
    marks = [
        (s["step_id"], s["description"], {k: v for k, v in s.items() if k.endswith("_in_pass")})
        for s in step.data["steps"]
    ]
    assert marks == [
        ("s1", "say what pulls", {}),
        ("s2", "say it for a child", {"changed_in_pass": 1}),
        ("s4", None, {"added_in_pass": 1, "removed_in_pass": 2}),
        ("s5", "check it", {"added_in_pass": 2}),
        ("s3", "a new s3", {"added_in_pass": 2}),
        ("s3", None, {"removed_in_pass": 1}),
    ]
    assert step.data["planned_steps"] == len(made.steps) == 3


def test_a_plan_no_refinement_changed_is_shown_unmarked() -> None:
    (plan,) = [s for s in run_steps(_journey()["exited"], None) if s.kind == "plan"]
    assert plan.data["planned_steps"] == 2
    assert not any(k.endswith("_in_pass") for s in plan.data["steps"] for k in s)
