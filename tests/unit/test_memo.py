"""The memo: a memo that cannot be read is a miss (it only saves an LLM call, and a failing
master of a memo's slot, outside the run's shard, must not send the run to dead letters); it is
read only when the delivery says the event may have been handled before; its keys are made in
one place."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import Keys, memo_key, memo_scope, repair_scope
from aeonloop.bus.memo import RedisMemo
from aeonloop.phases import phase_a
from aeonloop.phases.llm_calls import DictMemo
from aeonloop.prompts.registry import PromptId

INFER = PromptId.TASKPROFILE_INFERENCE_USER


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
    h = harness({INFER: replies.profile(depth=2)})
    memo = h.deps.memo = Recording()
    request = make_request()
    (first,) = await phase_a.handle(request, h.deps.delivered(Delivery()))
    assert memo.asked == [] and len(memo.values) == 1
    (again,) = await phase_a.handle(request, h.deps.delivered(Delivery(redelivered=True)))
    assert memo.asked == list(memo.values)
    assert h.llm.calls == [INFER], "the redelivery took the memoised reply"
    assert again.run.profile == first.run.profile
