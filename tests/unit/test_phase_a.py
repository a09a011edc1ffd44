"""Phase A: profile inference, the TTL it allocates, and the default profile on LLM trouble;
PREPARE and the plain draft beside it, and the run that ends on its draft."""

from __future__ import annotations

from aeonloop.llm.base import LLMError
from aeonloop.phases import phase_a
from aeonloop.phases.events import TaskProfiled
from aeonloop.phases.models import Rule, RuleCheck, TaskProfile
from aeonloop.prompts.registry import PromptId

INFER = PromptId.TASKPROFILE_INFERENCE_USER
REPAIR = PromptId.SUPERVISOR_REPAIR_JSON_USER
PREPARE = PromptId.CHECKS_PREPARE_USER
DRAFT = PromptId.ANSWER_DRAFT_USER
#: Phase A's other two calls, answered: no checks, and a plain draft.
QUIET = {PREPARE: '{"checks": []}', DRAFT: "A plain draft."}


def profile_calls(calls: list[PromptId]) -> list[PromptId]:
    """The calls of the profile (its inference and repair), apart from PREPARE's and the
    draft's, which run beside them."""
    return [c for c in calls if c in (INFER, REPAIR)]


async def test_inferred_profile_sets_version_1_and_the_ttl(harness, replies, make_request) -> None:
    h = harness({INFER: replies.profile(depth=5, info=1.0, breadth="broad"), **QUIET})
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert isinstance(out, TaskProfiled)
    profile = out.run.profile
    assert profile is not None
    assert (profile.reasoning_depth, profile.profile_version) == (5, 1)
    # 5·1.5·1·1·1.5·1·2 = 22.5, capped by AEON_MAX_PASSES (8): the request set no cap of its own
    assert out.run.ttl_remaining == out.run.max_ttl == 8
    assert not out.run.profile_is_default and out.run.notes == []
    # The profile and the draft, at once: the request states no constraint to PREPARE.
    assert out.run.usage.calls == 2


async def test_ttl_respects_the_request_cap(harness, replies, make_request) -> None:
    h = harness({INFER: replies.profile(depth=5, info=1.0)})
    (out,) = await phase_a.handle(make_request(max_ttl=2), h.deps)
    assert out.run.ttl_remaining == 2


async def test_aeon_max_passes_is_the_cap_of_a_request_without_one(
    harness, replies, make_request
) -> None:
    h = harness({INFER: replies.profile(depth=5, info=1.0)}, max_passes=5)
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert (out.run.max_ttl, out.run.ttl_remaining) == (5, 5)


async def test_a_request_above_aeon_max_passes_is_held_to_it_and_told(
    harness, replies, make_request
) -> None:
    """Gateways refuse such a request; one from another producer still cannot go past the cap,
    and the answer's notes say why it got fewer passes than it asked for."""
    h = harness({INFER: replies.profile(depth=5, info=1.0), **QUIET}, max_passes=5)
    (out,) = await phase_a.handle(make_request(max_ttl=9), h.deps)
    assert (out.run.max_ttl, out.run.ttl_remaining) == (5, 5)
    assert out.run.notes == [
        "phase A: the request allowed 9 passes; AEON_MAX_PASSES holds the run to 5"
    ]


async def test_rules_reach_the_prompt(harness, replies, make_request) -> None:
    rule = Rule(id="has-total", check=RuleCheck(type="content", search="total"))
    h = harness({INFER: replies.profile()})
    # effort high: at medium a request with a rule and nothing to use asks for no profile
    await phase_a.handle(make_request(rules=[rule], effort="high"), h.deps)
    assert "has-total" in h.llm.history[0].input.rules_summary


async def test_llm_error_gives_the_default_profile_with_a_note(harness, make_request) -> None:
    h = harness({INFER: LLMError("endpoint down")})
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert out.run.profile == TaskProfile.default()
    assert out.run.profile_is_default
    assert out.run.ttl_remaining == 4
    assert "endpoint down" in out.run.notes[0] and "default profile" in out.run.notes[0]


async def test_malformed_reply_is_repaired_once(harness, replies, make_request) -> None:
    h = harness({INFER: "depth is 2, I think {", REPAIR: replies.profile(depth=2), **QUIET})
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert profile_calls(h.llm.calls) == [INFER, REPAIR]
    assert out.run.profile.reasoning_depth == 2 and not out.run.profile_is_default


async def test_malformed_twice_falls_back_to_the_default_profile(harness, make_request) -> None:
    """The documented outcome: after one failed repair A degrades, it does not fail the run."""
    h = harness({INFER: "not json", REPAIR: '{"reasoning_depth": 9}', **QUIET})
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert profile_calls(h.llm.calls) == [INFER, REPAIR]
    assert out.run.profile_is_default
    assert "LLMOutputError" in out.run.notes[0]


async def test_same_event_twice_makes_no_second_call(harness, replies, make_request) -> None:
    """The profile and the draft are each memoised under their own scope (and PREPARE, where it
    is asked: tests/unit/test_verification.py)."""
    h = harness({INFER: replies.profile(depth=4), **QUIET})
    event = make_request()
    (first,) = await phase_a.handle(event, h.deps)
    (second,) = await phase_a.handle(event, h.deps)
    assert sorted(h.llm.calls) == sorted([INFER, DRAFT])
    assert first.event_id == second.event_id
    assert first.run.profile == second.run.profile
    assert first.run.ttl_remaining == second.run.ttl_remaining
