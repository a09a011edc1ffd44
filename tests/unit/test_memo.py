"""The memo: a memo that cannot be read is a miss (it only saves an LLM call, and a failing
master of a memo's slot, outside the run's shard, must not send the run to dead letters); it is
read only when the delivery says the event may have been handled before; its keys are made in
one place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import Keys, memo_key, memo_scope, repair_scope
from aeonloop.phases import phase_a
from aeonloop.prompts.registry import PromptId
from aeonloop.runs.memo import MEMO_MARGIN_S, RedisMemo, memo_ttl
from aeonloop.testing import DictMemo

INFER = PromptId.TASKPROFILE_INFERENCE_USER
DRAFT = PromptId.ANSWER_DRAFT_USER


class FailingRedis:
    """A Redis whose node for the memo's slot refuses connections (a master failing over)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def get(self, key: str) -> bytes:
        self.asked.append(key)
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:19974. Connection refused.")


async def test_a_memo_that_cannot_be_read_is_a_miss() -> None:
    redis = FailingRedis()
    memo = RedisMemo(redis, Keys("aeon"), committer=None)  # type: ignore[arg-type]
    assert await memo.get("run/b/plan") is None
    assert redis.asked == ["aeon:memo:run/b/plan"]


def test_memo_keys_are_made_in_one_place_as_earlier_versions_wrote_them() -> None:
    """A hop redelivered across an upgrade still finds the replies its first delivery kept."""
    assert [
        memo_scope("a"),
        memo_scope("b", "plan"),
        memo_scope("c", "step", pass_number=2, step="s1"),
        memo_scope("c", "assess", pass_number=2),
        memo_scope("d", "update", pass_number=3),
        memo_scope("e", "synthesis"),
    ] == ["a", "b/plan", "c/p2/step:s1", "c/p2/assess", "d/p3/update", "e/synthesis"]
    repair = repair_scope("c/p2/assess", "CONVERGENCE_ASSESSMENT_USER")
    assert repair == "c/p2/assess/repair:CONVERGENCE_ASSESSMENT_USER"
    key = memo_key("run-1", "b/plan", "PLAN_GENERATION_USER")
    assert Keys("aeon").memo(key) == "aeon:memo:run-1/b/plan/PLAN_GENERATION_USER"


class Recording(DictMemo):
    """A memo that records the keys asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    async def get(self, key: str) -> str | None:
        self.asked.append(key)
        return await super().get(key)


async def test_a_first_delivery_asks_the_memo_nothing_and_a_redelivery_finds_its_replies(
    harness, replies, make_request
) -> None:
    """What the bus says of a delivery reaches the handler as its deps (PhaseDeps.delivered):
    a first delivery cannot have memoised replies, so it spends no read on them; the replies
    it makes are kept, and its redelivery takes them instead of calling the LLM again."""
    # The request states no constraint, so no PREPARE is asked (phases.spend).
    script = {INFER: replies.profile(depth=2), DRAFT: "A draft."}
    h = harness(script)
    memo = h.deps.memo = Recording()
    request = make_request()
    (first,) = await phase_a.handle(request, h.deps.delivered(Delivery()))
    assert memo.asked == [] and len(memo.values) == 2  # the profile, the draft
    (again,) = await phase_a.handle(request, h.deps.delivered(Delivery(redelivered=True)))
    assert sorted(memo.asked) == sorted(memo.values)
    assert sorted(h.llm.calls) == sorted(script), "the redelivery took the memoised replies"
    assert again.run.profile == first.run.profile


def test_a_memo_is_kept_until_its_runs_deadline_and_no_longer() -> None:
    """A redelivery after the deadline ends its run without calling the LLM, so a memo is of
    no use then (runs.memo); a run with no deadline keeps it AEON_MEMO_KEEP_S."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert memo_ttl(now + timedelta(seconds=300), 86_400, now) == 300 + MEMO_MARGIN_S
    assert memo_ttl(now + timedelta(days=3), 86_400, now) == 86_400
    assert memo_ttl(now - timedelta(seconds=60), 86_400, now) == 1
    assert memo_ttl(None, 86_400, now) == 86_400


async def test_a_hops_replies_are_kept_until_its_runs_deadline(
    harness, replies, make_request
) -> None:
    """The deadline a request carries is the one its memo writes are kept until."""
    h = harness({INFER: replies.profile(depth=2)})
    kept: list[datetime | None] = []

    class Until(DictMemo):
        async def put(self, key: str, value: str, until: datetime | None = None) -> None:
            kept.append(until)

    h.deps.memo = Until()
    request = make_request()
    assert request.deadline is not None
    await phase_a.handle(request, h.deps.delivered(Delivery()))
    assert kept == [request.deadline]
