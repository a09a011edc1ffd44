"""A run's history (phases.history): events carry no pass records and no step outputs, each
pass's record is written once by the hop that ran it, and what reads history finds it, or
says plainly that it is gone."""

from __future__ import annotations

import orjson
import pytest

from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.route import RunRecord
from aeonloop.phases import history, phase_c, phase_e, worker
from aeonloop.phases.events import LoopExited, PassCompleted, PassRequested, RunState
from aeonloop.phases.history import HistoryMissing
from aeonloop.phases.models import ExecutionPass
from aeonloop.prompts.registry import PromptId
from aeonloop.testing import DictRunRecords

STEP = PromptId.REASONING_STEP_USER
VALIDATE = PromptId.VALIDATION_SEMANTIC_USER
ASSESS = PromptId.PASS_EVALUATION_USER
REFINE = PromptId.RECURSIVE_REFINEMENT_USER
LONG = "word " * 1_000  # 5,000 characters per step output


def three_flat_passes(replies) -> dict:
    """Three passes that never converge, each adding a step, each step writing LONG."""
    return {
        STEP: lambda call: f"[{call.input.step_id}] {LONG}",
        VALIDATE: replies.validation(),
        ASSESS: [replies.weak(0.5), replies.weak(0.7), replies.weak(0.9)],
        REFINE: [replies.refinement(replies.add(f"x{n}", f"more {n}")) for n in range(3)],
    }


def ran(ready, *statuses: tuple[str, int]) -> None:
    """Mark the plan's steps, in order, as run: (status, pass it ran in) each."""
    steps = ready.run.plan.steps
    for index, (status, number) in enumerate(statuses):
        steps[index] = steps[index].model_copy(
            update={"status": status, "executed_in_pass": number}
        )


def as_decoded(ready, passes: int) -> RunState:
    """`ready`'s run as an event after `passes` passes carries it: no pass, no output."""
    run = RunState.model_validate_json(ready.run.model_dump_json())
    run.pass_count = passes
    return run


async def test_events_carry_no_output_and_do_not_grow_with_the_passes(
    harness, replies, make_plan_ready, drive
) -> None:
    h = harness(three_flat_passes(replies), max_passes=3)
    trail = await drive(make_plan_ready("gather", "answer", ttl=10), h.deps)
    assert [type(e).__name__ for e in trail] == [
        "PassCompleted",
        "PassRequested",
        "PassCompleted",
        "PassRequested",
        "LoopExited",
    ]
    bodies = [e.model_dump_json() for e in trail]
    assert not any(LONG.strip() in body for body in bodies)
    first, second = (len(e.model_dump_json()) for e in trail if isinstance(e, PassCompleted))
    # Pass 2 adds one plan step (a few dozen bytes, in the plan and its refinement) and no
    # output: 5,000 characters per output would show at once.
    assert second - first < 400
    assert len(bodies[-1]) < len(LONG)
    done = trail[-1]
    assert isinstance(done, LoopExited) and done.execution_pass is not None
    assert done.execution_pass.pass_number == 3 == done.run.pass_count


async def test_each_pass_is_recorded_once_with_its_outputs(
    harness, replies, make_plan_ready, drive
) -> None:
    h = harness(three_flat_passes(replies), max_passes=3)
    await drive(make_plan_ready("gather", "answer", ttl=10), h.deps)
    records = h.deps.records.values
    names = [f"{kind}:{n}" for n in (1, 2, 3) for kind in ("outputs", "pass")]
    assert sorted(records) == [("run-1", name) for name in sorted(names)]
    first = ExecutionPass.model_validate_json(records[("run-1", "pass:1")])
    assert first.executed_step_ids == ["s1", "s2"] and first.pass_number == 1
    assert orjson.loads(records[("run-1", "outputs:1")]) == {
        "s1": f"[s1] {LONG}",
        "s2": f"[s2] {LONG}",
    }
    assert list(orjson.loads(records[("run-1", "outputs:2")])) == ["x0"]


async def test_a_later_pass_sees_the_outputs_of_earlier_ones(
    harness, replies, make_plan_ready, drive
) -> None:
    """Pass 2 got its run from the wire, without outputs: its steps were shown pass 1's,
    loaded from the history."""
    h = harness(three_flat_passes(replies), max_passes=2)
    await drive(make_plan_ready("gather", ttl=10), h.deps)
    pass_2 = [c.input for c in h.llm.history if c.prompt_id == STEP][-1]
    assert pass_2.pass_number == 2 and f"[s1] {LONG.strip()}" in pass_2.prior_outputs


async def test_phase_c_without_its_history_fails_the_hop(harness, replies, make_plan_ready) -> None:
    """Retried, then dead-lettered, and E answers the run as failed with this reason."""
    ready = make_plan_ready("gather", "answer")
    ran(ready, ("done", 1))
    run = as_decoded(ready, 1)  # as a PassRequested after pass 1, whose records are gone
    event = ready.child(PassRequested, run=run)
    with pytest.raises(HistoryMissing, match=r"record outputs:1 .*AEON_ANSWER_KEEP_S"):
        await phase_c.handle(event, harness({}).deps)


async def test_phase_e_answers_without_a_lost_history_and_says_so(harness, make_plan_ready) -> None:
    ready = make_plan_ready("gather")
    run = as_decoded(ready, 2)
    exit_event = ready.child(LoopExited, reason="ttl_exhausted", run=run)
    (answer,) = await phase_e.handle(exit_event, harness({}).deps)
    assert answer.result.total_passes == 2
    notes = answer.result.final_answer.metadata["run_notes"]
    assert any("answered without the passes' records" in note for note in notes)


def test_records_only_for_passes_the_history_does_not_hold() -> None:
    run = RunState(request="r")
    for n in (1, 2, 3):
        run.add_pass(ExecutionPass(pass_number=n))
    made = PassCompleted(
        correlation_id="c", deadline="2030-01-01T00:00:00Z", run=run, execution_pass=run.passes[-1]
    )
    assert [r.name for r in history.new_records([made], kept=2)] == ["pass:3", "outputs:3"]
    assert history.new_records([made, made], kept=3) == []


def test_a_run_sent_with_its_passes_inline_counts_them_and_records_them_next() -> None:
    """Events from a version that sent passes inline: nothing of them is in the history, so
    the next hop writes every pass, and the run needs no loading meanwhile."""
    old = '{"request": "r", "passes": [{"pass_number": 1}, {"pass_number": 2}]}'
    run = RunState.model_validate_json(old)
    assert run.pass_count == 2 and run.history_loaded and run.scores == [0.0, 0.0]
    assert history.kept_passes(run) == 0


async def test_loading_fills_passes_and_the_outputs_of_the_pass_each_step_last_ran_in(
    make_plan_ready,
) -> None:
    ready = make_plan_ready("gather", "answer")
    ran(ready, ("done", 1), ("failed", 2))
    store = DictRunRecords()
    for n, outputs in ((1, {"s1": "one", "s2": "stale"}), (2, {"s2": "cut off"})):
        record = ExecutionPass(pass_number=n, score=n / 10).model_dump_json().encode()
        store.write(
            [
                RunRecord("run-1", f"pass:{n}", record),
                RunRecord("run-1", f"outputs:{n}", orjson.dumps(outputs)),
            ]
        )
    run = as_decoded(ready, 2)
    await history.load(store, "run-1", run)
    assert [p.score for p in run.passes] == [0.1, 0.2] and run.history_loaded
    assert [s.output for s in run.plan.steps] == ["one", "cut off"]
    c_view = as_decoded(ready, 2)
    await history.load_outputs(store, "run-1", c_view)
    assert [s.output for s in c_view.plan.steps] == ["one", "cut off"] and c_view.passes == []


def test_phases_c_and_e_name_what_they_will_read(make_plan_ready) -> None:
    """So the consumer reads it with the event's lock (Route.records)."""
    ready = make_plan_ready("gather", "answer")
    ran(ready, ("done", 1))
    run = as_decoded(ready, 2)
    requested = ready.child(PassRequested, run=run)
    assert history.records_for_c(requested) == ["outputs:1"]
    exited = ready.child(LoopExited, reason="converged", run=run)
    assert history.records_for_e(exited) == ["pass:1", "pass:2", "outputs:1"]
    in_hand = ready.child(LoopExited, reason="converged", run=ready.run)  # nothing ran yet
    assert history.records_for_c(ready) == history.records_for_e(in_hand) == []


def _exit_after_one_pass(make_plan_ready) -> LoopExited:
    """A LoopExited as decoded: pass 1 ran s1 (done), its records are in the history."""
    ready = make_plan_ready("gather")
    ran(ready, ("done", 1))
    run = as_decoded(ready, 1)
    return ready.child(LoopExited, reason="ttl_exhausted", run=run)


def test_when_e_gives_up_its_answer_uses_the_history_read_with_the_lock(make_plan_ready) -> None:
    exit_event = _exit_after_one_pass(make_plan_ready)
    read = {
        ("run-1", "pass:1"): ExecutionPass(pass_number=1, score=0.4).model_dump_json().encode(),
        ("run-1", "outputs:1"): orjson.dumps({"s1": "Chlorophyll catches light."}),
    }
    passes = history.prefetched_pass_json(exit_event, read)
    answer = phase_e.fallback_answer(exit_event, "phase-e gave up", passes).result.final_answer
    assert "Chlorophyll catches light." in answer.answer_text
    assert answer.used_step_ids == ["s1"]


def test_without_its_history_the_answer_made_when_e_gives_up_claims_no_results(
    make_plan_ready,
) -> None:
    exit_event = _exit_after_one_pass(make_plan_ready)
    assert history.prefetched_pass_json(exit_event, {}) is None  # nothing was read
    answer = phase_e.fallback_answer(exit_event, "phase-e gave up").result.final_answer
    assert answer.used_step_ids is None
    assert "execution_results" in answer.metadata["missing_fields"]


def test_an_exit_made_by_give_up_writes_the_passes_its_event_carried_inline(
    make_plan_ready,
) -> None:
    """Nothing else would write them, and E reads the history of every pass the run counts."""
    ready = make_plan_ready("gather")
    body = ready.run.model_dump(mode="json") | {"passes": [{"pass_number": 1, "score": 0.3}]}
    inline = ready.child(PassRequested, run=RunState.model_validate(body))
    dead = DeadLetter("passes", "phase-c", "1-0", {}, "handler failed", 3, inline)
    outputs = worker._send_to_phase_e(dead, Delivery())
    assert [getattr(o, "name", type(o).__name__) for o in outputs] == [
        "pass:1",
        "outputs:1",
        "LoopExited",
    ]


def test_the_answer_made_when_e_gives_up_survives_a_record_that_does_not_parse(
    make_plan_ready,
) -> None:
    """The last resort answers whatever the history holds (a corrupt record made E give up)."""
    exit_event = _exit_after_one_pass(make_plan_ready)
    dead = DeadLetter("loop-exited", "phase-e", "1-0", {}, "handler failed", 3, exit_event)
    read = {("run-1", "pass:1"): b"{not json", ("run-1", "outputs:1"): b"{}"}
    (answer,) = worker._answer_without_llm(dead, Delivery(records=read))
    assert answer.correlation_id == "run-1" and answer.result.degraded
