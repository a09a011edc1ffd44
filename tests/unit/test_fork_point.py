"""A fork's memo (runs.memo.ForkedMemo): which of its calls its parent's replies answer
(phases.events.Fork.replays), and how a memo key names its call (bus.keys.memo_call)."""

from __future__ import annotations

import pytest

from aeonloop.bus.keys import MemoCall, memo_call, memo_key, memo_scope, repair_scope
from aeonloop.phases.events import Fork, RequestSubmitted, fork_id
from aeonloop.phases.models import Rule
from aeonloop.runs.in_process import DictMemo
from aeonloop.runs.memo import ForkedMemo


def test_a_memo_key_names_its_phase_and_pass() -> None:
    step = memo_key("r1", memo_scope("c", "step", pass_number=12, step="s1"), "REASONING")
    assert memo_call(step, "r1") == MemoCall("c", 12, "c/p12/step:s1/REASONING")
    plan = memo_key("r1", memo_scope("b", "plan"), "PLAN")
    assert memo_call(plan, "r1") == MemoCall("b", None, "b/plan/PLAN")
    repair = memo_key("r1", repair_scope(memo_scope("d", "update", pass_number=2), "P"), "R")
    assert memo_call(repair, "r1") == MemoCall("d", 2, "d/p2/update/repair:P/R")
    assert memo_call(memo_key("r1", "a", "PROFILE"), "r1") == MemoCall("a", None, "a/PROFILE")
    assert memo_call(plan, "r11") is None and memo_call(plan, "r") is None


@pytest.mark.parametrize(
    ("fork", "phase", "pass_number", "replays"),
    [
        (Fork(parent="p"), "e", None, True),  # no change: even the answer is the parent's
        (Fork(parent="p", changed=True), "e", None, False),
        (Fork(parent="p", changed=True), "c", 7, True),
        (Fork(parent="p", from_pass=2), "a", None, True),
        (Fork(parent="p", from_pass=2), "b", None, True),
        (Fork(parent="p", from_pass=2), "c", 1, True),
        (Fork(parent="p", from_pass=2), "d", 1, True),
        (Fork(parent="p", from_pass=2), "c", 2, False),
        (Fork(parent="p", from_pass=2), "e", None, False),
    ],
)
def test_the_parent_answers_the_calls_before_the_fork_point(
    fork: Fork, phase: str, pass_number: int | None, replays: bool
) -> None:
    assert fork.replays(phase, pass_number) is replays


async def test_a_forked_memo_reads_its_own_then_its_parents_and_writes_its_own() -> None:
    recorded = DictMemo()
    fork = Fork(parent="parent", from_pass=2)
    for scope in ("a", "c/p1/evaluate", "c/p2/evaluate"):
        await recorded.put(memo_key("parent", scope, "P"), f"parent {scope}")
    memo = ForkedMemo(recorded, recorded, "child", fork.parent, fork.replays)
    assert await memo.get(memo_key("child", "a", "P")) == "parent a"
    assert await memo.get(memo_key("child", "c/p1/evaluate", "P")) == "parent c/p1/evaluate"
    assert await memo.get(memo_key("child", "c/p2/evaluate", "P")) is None  # after the point
    await memo.put(memo_key("child", "c/p2/evaluate", "P"), "own")
    assert await memo.get(memo_key("child", "c/p2/evaluate", "P")) == "own"
    assert await recorded.get(memo_key("parent", "c/p2/evaluate", "P")) == "parent c/p2/evaluate"


def test_a_fork_id_is_the_same_for_the_same_change_and_its_event_id_too() -> None:
    rule = Rule.model_validate({"id": "r", "check": "Be brief."})
    fork = Fork(parent="p", from_pass=2, changed=True)
    assert fork_id(fork, [rule]) == fork_id(Fork(parent="p", from_pass=2, changed=True), [rule])
    assert fork_id(fork, [rule]) != fork_id(fork, [])
    assert fork_id(fork, None) != fork_id(Fork(parent="p", from_pass=3, changed=True), None)
    one, two = (
        RequestSubmitted.new("q", timeout=5, correlation_id="f", fork=fork) for _ in range(2)
    )
    assert one.event_id == two.event_id
    assert RequestSubmitted.new("q", timeout=5).initial_state().fork is None
    assert one.initial_state().fork == fork
