"""Verified answers (docs/verified-answers.md, "Verified answers"): PREPARE from rules in words and
from the request's own constraints, the plain draft that may end a run at Phase A, and the
answer that Phase E checks, critiques and refines, publishing the candidate that holds most."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aeonloop.bus.keys import DRAFT_RECORD
from aeonloop.checks.repairs import repair
from aeonloop.checks.types import (
    CountCheck,
    PatternCheck,
    PhraseCountCheck,
    asks_presence,
    parse_check,
)
from aeonloop.contracts import Usage
from aeonloop.gateway.cli.display import render_human
from aeonloop.gateway.http.run_steps import answer_data
from aeonloop.limits import Effort
from aeonloop.phases import exits, history, phase_a, phase_e, render, verification
from aeonloop.phases.events import (
    ExecutionResult,
    FinalAnswerReady,
    LoopExited,
    RequestSubmitted,
    RunState,
    TaskProfiled,
    utcnow,
)
from aeonloop.phases.models import (
    AnswerReason,
    Evaluation,
    ExitReason,
    FinalAnswer,
    Rule,
    RuleCheck,
    RuleFinding,
    TaskProfile,
)
from aeonloop.phases.outcome import outcome_of
from aeonloop.prompts.baseline import plain_call
from aeonloop.prompts.registry import PromptId
from aeonloop.runs.in_process import DictRunRecords

INFER = PromptId.TASKPROFILE_INFERENCE_USER
PREPARE = PromptId.CHECKS_PREPARE_USER
DRAFT = PromptId.ANSWER_DRAFT_USER
PLAN = PromptId.PLAN_GENERATION_USER
VALIDATE = PromptId.VALIDATION_SEMANTIC_USER
STEP = PromptId.REASONING_STEP_USER
ASSESS = PromptId.PASS_EVALUATION_USER
SYNTH = PromptId.ANSWER_SYNTHESIS_USER
CRITIQUE = PromptId.RULE_CRITIQUE_USER
REWRITE = PromptId.ANSWER_REWRITE_USER

BULLETS = {"type": "count", "unit": "bullets", "min": 3, "max": 3}
THREE = "- green tea\n- black tea\n- oolong"


#: A request that needs steps (two parts) and states a form the host's reader does not read
#: ("in a table"): so the model is asked for its profile and for PREPARE (phases.spend).
FORMATTED = "Compare two ways to cache web pages, then recommend one, in a table."


@pytest.fixture
def make_request() -> Any:
    """The run's request: FORMATTED, with the rules, cap and effort given."""

    def make(
        rules: list[Rule] | None = None, max_ttl: int | None = None, effort: Effort | None = None
    ) -> RequestSubmitted:
        return RequestSubmitted.new(
            FORMATTED, timeout=600, rules=rules, max_ttl=max_ttl, effort=effort
        )

    return make


def prepared(*checks: tuple[str, dict[str, Any]], description: str = "") -> str:
    """PREPARE's reply: each (rule id, check)."""
    return json.dumps(
        {
            "checks": [
                {"rule_id": rule_id, "description": description or rule_id, "check": check}
                for rule_id, check in checks
            ]
        }
    )


def answer(text: str) -> str:
    return json.dumps(
        {"answer_text": text, "confidence": 0.8, "used_step_ids": ["s1"], "notes": None}
    )


def loop_script(replies: Any, **overrides: Any) -> dict[Any, Any]:
    """A run the loop takes (depth 3): one step, converged by the rubric in its first pass."""
    return {
        INFER: replies.profile(depth=3),
        PREPARE: prepared(("request.bullets", BULLETS)),
        DRAFT: "Teas: green, black and oolong.",
        PLAN: replies.plan("List the teas"),
        VALIDATE: replies.validation(),
        STEP: replies.step_output,
        ASSESS: replies.assessment(),
        SYNTH: answer("Green, black and oolong are three teas."),
        CRITIQUE: replies.critique("request.bullets"),
        REWRITE: THREE,
        **overrides,
    }


def no_plan_script(replies: Any, draft: str) -> dict[Any, Any]:
    """A run whose plan cannot be had (its reply unusable even after the repair)."""
    unusable = {PLAN: "not json at all", PromptId.SUPERVISOR_REPAIR_JSON_USER: "still not json"}
    return loop_script(replies, **{DRAFT: draft, **unusable})


async def answered(h: Any, make_request: Any, drive: Any, **request: Any) -> FinalAnswerReady:
    """The run from its request to its answer, through every phase: at effort high unless the
    test says otherwise, since at medium a request with checks and nothing to use ends on its
    draft path at Phase A (phases.exits.draft_suffices)."""
    request.setdefault("effort", "high")
    trail = await drive(make_request(**request), h.deps)
    (out,) = await phase_e.handle(trail[-1], h.deps)
    assert isinstance(out, FinalAnswerReady)
    return out


# ---------------------------------------------------------------------------------------------
# PREPARE.
# ---------------------------------------------------------------------------------------------


async def test_prepare_from_a_rule_in_words(harness, replies, make_request) -> None:
    """A rule in words the host's reader does not read is PREPARE's to turn into a check; one
    it reads is not shown to PREPARE (what the reader read needs no model)."""
    rule = Rule(id="r.city", check="names the capital of Portugal")
    read = Rule(id="r.sea", check="Mention the Atlantic.")
    phrase = {"type": "phrase_count", "phrase": "Lisbon", "min": 1}
    h = harness({INFER: replies.profile(), PREPARE: prepared(("r.city", phrase)), DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(rules=[rule, read]), h.deps)
    (sent,) = [call for call in h.llm.history if call.prompt_id is PREPARE]
    assert sent.input.rules_in_words == "- r.city: names the capital of Portugal"
    assert out.run.rules == [rule, read]  # no rule added: the checks are the rules' own
    assert out.run.prepared["r.city"] == [PhraseCountCheck(phrase="Lisbon", min=1)]
    assert out.run.prepared["r.sea"] == [PhraseCountCheck(phrase="Atlantic", min=1)]


async def test_a_rule_in_words_the_host_reads_asks_no_prepare(harness) -> None:
    rule = Rule(id="r.city", check="mentions Lisbon at least once")
    h = harness({DRAFT: "Lisbon."})
    request = RequestSubmitted.new(
        "Which city is the capital of Portugal?", rules=[rule], timeout=600
    )
    (out,) = await phase_a.handle(request, h.deps)
    assert PREPARE not in h.llm.calls and INFER not in h.llm.calls
    assert out.run.prepared == {"r.city": [PhraseCountCheck(phrase="Lisbon", min=1)]}


async def test_a_prepared_check_named_after_the_formats_example_is_dropped(
    harness, replies, make_request
) -> None:
    """SmolLM2 named a check `request.example-bullets` (the format example's id) for requests
    that state no such thing, with a check every answer failed: dropped, noted; a check named
    for the request is kept."""
    words = {"type": "count", "unit": "words", "min": 4, "max": 10}
    table = {"type": "pattern", "pattern": "\\|"}
    reply = prepared(("request.example-bullets", words), ("request.table", table))
    h = harness({INFER: replies.profile(), PREPARE: reply, DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert [rule.id for rule in out.run.rules] == ["request.table"]
    assert any(
        "request.example-bullets was dropped: its id has the format example's 'example'" in note
        for note in out.run.notes
    )


async def test_prepare_from_the_requests_own_constraints(harness, replies, make_request) -> None:
    """A constraint the request states becomes a rule of its own, named for the request."""
    reply = prepared(("bullets", BULLETS), description="exactly 3 bullet points")
    h = harness({INFER: replies.profile(), PREPARE: reply, DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(), h.deps)
    (rule,) = out.run.rules
    assert (rule.id, rule.origin, rule.severity) == ("request.bullets", "request", "fail")
    assert rule.check == "exactly 3 bullet points"
    assert out.run.prepared == {"request.bullets": [CountCheck(unit="bullets", min=3, max=3)]}


async def test_two_checks_of_one_constraint_make_one_rule(harness, replies, make_request) -> None:
    """A constraint named without the prefix, twice: one rule, request.<name>, both checks."""
    reply = prepared(
        ("length", {"type": "count", "unit": "words", "min": 10}),
        ("length", {"type": "count", "unit": "words", "max": 99}),
    )
    h = harness({INFER: replies.profile(), PREPARE: reply, DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert [rule.id for rule in out.run.rules] == ["request.length"]
    assert len(out.run.prepared["request.length"]) == 2


async def test_prepare_from_both(harness, replies, make_request) -> None:
    rules = [
        Rule(id="r.city", check="mentions Lisbon"),
        Rule(id="r.own", check=RuleCheck(type="content", search="Porto")),
    ]
    reply = prepared(
        ("r.city", {"type": "pattern", "pattern": "Lisbon"}),
        ("request.words", {"type": "count", "unit": "words", "max": 99}),
    )
    h = harness({INFER: replies.profile(), PREPARE: reply, DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(rules=rules), h.deps)
    assert [(r.id, r.origin) for r in out.run.rules] == [
        ("r.city", "rules"),
        ("r.own", "rules"),
        ("request.words", "request"),
    ]
    assert set(out.run.prepared) == {"r.city", "request.words"}
    (sent,) = [call for call in h.llm.history if call.prompt_id is PREPARE]
    assert "r.own" not in sent.input.rules_in_words  # it has its own check: nothing to prepare


async def test_a_malformed_prepared_check_is_dropped_with_a_note(
    harness, replies, make_request
) -> None:
    rules = [Rule(id="r.own", check=RuleCheck(type="content", search="x"))]
    reply = prepared(
        ("request.odd", {"type": "telepathy"}),
        ("request.broken", {"type": "pattern", "pattern": "(unclosed"}),
        ("r.own", {"type": "pattern", "pattern": "y"}),
        ("request.bullets", BULLETS),
    )
    h = harness({INFER: replies.profile(), PREPARE: reply, DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(rules=rules), h.deps)
    assert list(out.run.prepared) == ["request.bullets"]
    dropped = [note for note in out.run.notes if "was dropped" in note]
    assert len(dropped) == 3
    assert "request.odd" in dropped[0] and "unknown check type" in dropped[0]
    assert "request.broken" in dropped[1] and "does not compile" in dropped[1]
    assert "r.own" in dropped[2] and "its own check" in dropped[2]


async def test_a_failed_prepare_leaves_a_note_and_the_run_goes_on(
    harness, replies, make_request
) -> None:
    h = harness({INFER: replies.profile(), PREPARE: "not json", DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert isinstance(out, TaskProfiled) and out.run.prepared == {}
    assert any("PREPARE failed" in note for note in out.run.notes)


async def test_a_redelivered_prepare_hop_makes_no_second_call(
    harness, replies, make_request, delivered
) -> None:
    h = harness(
        {INFER: replies.profile(), PREPARE: prepared(("request.bullets", BULLETS)), DRAFT: "x"}
    )
    event = make_request()
    (first,) = await phase_a.handle(delivered(event), h.deps)
    made = list(h.llm.calls)
    (again,) = await phase_a.handle(delivered(event), h.deps)
    assert h.llm.calls == made, "the redelivered hop made a call"
    # The draft "x" fails the bullets check, so more are sampled; the second repeat of the
    # first ends the sampling.
    assert made.count(PREPARE) == 1 and made.count(DRAFT) == 3
    assert again.run.prepared == first.run.prepared and again.run.rules == first.run.rules
    assert first.event_id == again.event_id
    keys = [key.split("/", 1)[1] for key in h.deps.memo.values]
    assert sorted(keys) == [
        "a/TASKPROFILE_INFERENCE_USER",
        "a/draft/ANSWER_DRAFT_USER",
        "a/draft:2/ANSWER_DRAFT_USER",
        "a/draft:3/ANSWER_DRAFT_USER",
        "a/prepare/CHECKS_PREPARE_USER",
    ]


# ---------------------------------------------------------------------------------------------
# The draft.
# ---------------------------------------------------------------------------------------------


async def test_a_draft_that_holds_ends_the_run_in_three_calls(
    harness, replies, make_request, drive
) -> None:
    """A simple request (depth 1, no tools) whose draft holds every check: A ends the run and
    E publishes the draft as it is, with no synthesis call."""
    script = {
        INFER: replies.profile(depth=1, tool="none"),
        PREPARE: prepared(("request.bullets", BULLETS)),
        DRAFT: THREE,
    }
    h = harness(script)
    trail = await drive(make_request(), h.deps)
    (exit_event,) = trail
    assert isinstance(exit_event, LoopExited) and exit_event.reason is ExitReason.CONVERGED
    assert "plain draft held all 1 fail-severity check(s)" in exit_event.detail
    (out,) = await phase_e.handle(exit_event, h.deps)
    final = out.result.final_answer
    assert final.answer_text == THREE
    assert final.metadata["answered_by"] == "draft"
    assert final.metadata["reason"] == "converged" and not out.result.degraded
    assert [c["verdict"] for c in final.metadata["checks"]] == ["pass"]
    assert len(h.llm.calls) == out.result.usage.calls == 3 <= 5


async def test_a_draft_that_fails_is_sampled_again_until_one_holds(
    harness, replies, make_request, drive
) -> None:
    """A weak model's plain answers differ from one sample to the next: the second draft holds
    the check the first failed, so it is kept, and the run (a simple request) ends on it."""
    script = {
        INFER: replies.profile(depth=1, tool="none"),
        PREPARE: prepared(("request.bullets", BULLETS)),
        DRAFT: ["Teas: green, black and oolong.", THREE, "never asked"],
    }
    h = harness(script)
    (exit_event,) = await drive(make_request(), h.deps)
    assert isinstance(exit_event, LoopExited) and exit_event.reason is ExitReason.CONVERGED
    (out,) = await phase_e.handle(exit_event, h.deps)
    assert out.result.final_answer.answer_text == THREE
    assert h.llm.calls.count(DRAFT) == 2 and out.result.usage.calls == 4


OOLONG = {"type": "phrase_count", "phrase": "oolong", "min": 1}
REFUSAL = "I'm sorry, but I can't help with that."


@pytest.mark.parametrize(
    ("samples", "drafts", "made", "kept"),
    [
        (3, ["none", "oolong", THREE], 3, THREE),  # the best of three: it holds both checks
        (4, ["none", THREE, "never asked"], 2, THREE),  # the first that holds ends them
        (2, ["none", "oolong", THREE], 2, "oolong"),  # AEON_DRAFT_SAMPLES bounds them
        (1, ["none", THREE], 1, "none"),  # 1: the first draft only
        (5, ["none", "none", "none", THREE], 3, "none"),  # a second repeat ends them
        (4, ["none", "none", THREE], 3, THREE),  # one repeat alone does not: chance
        (3, ["none", REFUSAL, "oolong"], 3, "oolong"),  # a refusal is passed over
        (3, ["oolong", "oolong tea", "green oolong"], 3, "oolong"),  # ties keep the earlier
    ],
)
async def test_draft_samples(
    harness, replies, make_request, samples: int, drafts: list[str], made: int, kept: str
) -> None:
    checks = prepared(("request.bullets", BULLETS), ("request.oolong", OOLONG))
    h = harness({INFER: replies.profile(), PREPARE: checks, DRAFT: drafts}, draft_samples=samples)
    (out,) = await phase_a.handle(make_request(), h.deps)
    # The request has checks and nothing to use: it ends on its draft path, the best draft
    # kept whatever it holds (phases.exits.draft_suffices), Phase E to rewrite it.
    assert isinstance(out, LoopExited)
    assert h.llm.calls.count(DRAFT) == made and out.run.draft == kept


@pytest.mark.parametrize(
    ("checks", "draft", "effort", "why"),
    [
        ([], THREE, "medium", "it needs steps, and no check says the draft is enough"),
        ([("request.bullets", BULLETS)], "no bullets at all", "high", "effort high: the loop"),
        ([("request.bullets", BULLETS)], THREE, "high", "effort high, though the draft holds"),
    ],
)
async def test_the_loop_runs_when_the_draft_path_cannot_settle_the_run(
    harness, replies, make_request, checks, draft, effort, why
) -> None:
    h = harness(
        {
            INFER: replies.profile(depth=3, tool="none"),
            PREPARE: prepared(*checks),
            DRAFT: draft,
        }
    )
    (out,) = await phase_a.handle(make_request(effort=effort), h.deps)
    assert isinstance(out, TaskProfiled), why
    assert out.run.has_draft and out.run.draft == draft


@pytest.mark.parametrize("draft", [THREE, "no bullets at all"])
async def test_a_request_that_needs_steps_with_checks_and_nothing_to_use_ends_on_its_draft(
    harness, replies, make_request, draft
) -> None:
    """The profile asks for more (depth 3, with reasons), but the request has a check and
    no tools or files: at medium the run ends at Phase A on its draft whether the draft holds
    the check or not (Phase E rewrites one that fails): on SmolLM2 the loop after such a draft
    held no more rules than best of 8 plain samples, at 7.9 times their tokens."""
    h = harness(
        {
            INFER: replies.profile(depth=3, tool="none"),
            PREPARE: prepared(("request.bullets", BULLETS)),
            DRAFT: draft,
        },
        draft_samples=1,
    )
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert isinstance(out, LoopExited) and out.reason is ExitReason.CONVERGED
    assert "checks to hold its draft to and nothing to use but its words" in out.detail
    assert ("Phase E rewrites it" in out.detail) is (draft != THREE)
    assert out.run.draft == draft and h.llm.calls.count(DRAFT) == 1


async def test_a_plan_to_approve_is_never_skipped_for_the_draft(
    harness, replies, make_request
) -> None:
    h = harness({INFER: replies.profile(depth=1, tool="none"), PREPARE: prepared(), DRAFT: "x"})
    request = make_request()
    request.approve_plan = True
    (out,) = await phase_a.handle(request, h.deps)
    assert isinstance(out, TaskProfiled)


# ---------------------------------------------------------------------------------------------
# The answer: checked, critiqued, refined; the best candidate published.
# ---------------------------------------------------------------------------------------------


async def test_the_answer_is_checked_and_rewritten(harness, replies, make_request, drive) -> None:
    """One call rewrites the answer that fails a check: its instructions are the failed check in
    words, the whole answer is given, and no critique is asked for."""
    h = harness(loop_script(replies))
    out = await answered(h, make_request, drive)
    final = out.result.final_answer
    assert final.answer_text == THREE
    assert final.metadata["answered_by"] == "refinement:1"
    assert final.metadata["checks"] == [
        {
            "id": "request.bullets",
            "origin": "request",
            "severity": "fail",
            "description": "request.bullets",
            "verdict": "pass",
            "details": final.metadata["checks"][0]["details"],
        }
    ]
    assert [c["held"] for c in final.metadata["candidates"]] == [0, 0, 1]
    assert not out.result.degraded
    (rewrite,) = [call for call in h.llm.history if call.prompt_id is REWRITE]
    assert rewrite.input.answer == "Green, black and oolong are three teas."  # the whole answer
    assert rewrite.input.failed_checks.startswith("- request.bullets")
    assert "exactly 3 bullet line(s): 0 bullet line(s)" in rewrite.input.failed_checks
    assert CRITIQUE not in h.llm.calls


async def test_only_the_failed_checks_are_asked_for_and_the_text_that_held_is_kept(
    harness, replies, make_request, drive
) -> None:
    """The answer holds its word limit and fails the bullets: the rewrite is asked for the
    bullets only, and is given the whole answer, to keep."""
    words = {"type": "count", "unit": "words", "max": 40}
    checks = prepared(("request.bullets", BULLETS), ("request.words", words))
    h = harness(loop_script(replies, **{PREPARE: checks}))
    out = await answered(h, make_request, drive)
    (rewrite,) = [call for call in h.llm.history if call.prompt_id is REWRITE]
    assert rewrite.input.failed_checks.count("\n- ") == 0  # one failed check, one line
    assert "bullet" in rewrite.input.failed_checks and "word" not in rewrite.input.failed_checks
    assert rewrite.input.answer == "Green, black and oolong are three teas."
    assert out.result.final_answer.answer_text == THREE


async def test_a_rewrite_that_breaks_a_check_that_held_is_not_published(
    harness, replies, make_request, drive
) -> None:
    """The rewrite meets the bullets but breaks the word limit the answer held: it is not
    published, and the note says which check it broke."""
    words = {"type": "count", "unit": "words", "max": 8}
    checks = prepared(("request.bullets", BULLETS), ("request.words", words))
    long = "- green tea from China\n- black tea from India\n- oolong tea from Taiwan"
    h = harness(loop_script(replies, **{PREPARE: checks, REWRITE: [long, THREE]}))
    out = await answered(h, make_request, drive)
    final = out.result.final_answer
    assert final.answer_text == "Green, black and oolong are three teas."
    assert h.llm.calls.count(REWRITE) == 1
    assert "refinement:1" not in [c["answered_by"] for c in final.metadata["candidates"]]
    broke = "phase E: rewrite 1 was not used: it broke request.words, which held"
    assert broke in final.metadata["run_notes"]


async def test_refinement_stops_at_the_first_round_that_holds(
    harness, replies, make_request, drive
) -> None:
    """Round 1 meets one of the two failed checks, round 2 the other: the rounds stop there."""
    chai = {"type": "phrase_count", "phrase": "chai", "min": 1}
    checks = prepared(("request.bullets", BULLETS), ("request.chai", chai))
    rewrites = ["- chai\n- only two", "- chai\n- green\n- black", "never asked"]
    h = harness(
        loop_script(replies, **{PREPARE: checks, REWRITE: rewrites}), answer_refine_rounds=3
    )
    out = await answered(h, make_request, drive)
    assert h.llm.calls.count(REWRITE) == 2
    assert out.result.final_answer.metadata["answered_by"] == "refinement:2"
    second = [call for call in h.llm.history if call.prompt_id is REWRITE][1]
    # Round 2 rewrites the best candidate: round 1's rewrite, which held one check more
    assert second.input.answer == "- chai\n- only two"


async def test_a_rewrite_that_gains_nothing_ends_the_rounds(
    harness, replies, make_request, drive
) -> None:
    """Round 1's rewrite holds no more checks than the answer it rewrote: a round 2 would
    rewrite the same text for the same checks, so none is asked, and the note says why."""
    h = harness(loop_script(replies, **{REWRITE: ["- only\n- two", THREE]}))
    out = await answered(h, make_request, drive)
    final = out.result.final_answer
    assert h.llm.calls.count(REWRITE) == 1
    assert final.metadata["answered_by"] == "answer"
    ended = "phase E: rewrite 1 held no more checks than the text it rewrote; the rewrites end"
    assert any(note.startswith(ended) for note in final.metadata["run_notes"])


async def test_the_draft_is_kept_when_refinement_makes_things_worse(
    harness, replies, make_request, drive
) -> None:
    """The draft holds the check; the answer and both refinements do not: the draft is
    published, and the answer is not degraded, since what the user gets holds every check."""
    h = harness(loop_script(replies, **{DRAFT: THREE, REWRITE: ["worse", "still worse"]}))
    # effort high: the loop runs, though the draft holds every check
    out = await answered(h, make_request, drive, effort="high")
    final = out.result.final_answer
    assert final.answer_text == THREE
    assert final.metadata["answered_by"] == "draft"
    assert [c["held"] for c in final.metadata["candidates"]] == [1, 0]  # none rewritten
    assert REWRITE not in h.llm.calls
    assert final.confidence is None  # the model judged its own answer, not the draft
    assert not out.result.degraded


async def test_a_check_no_candidate_holds_degrades_the_answer_and_is_named(
    harness, replies, make_request, drive
) -> None:
    h = harness(loop_script(replies, **{REWRITE: ["worse", "still worse"]}), answer_refine_rounds=2)
    out = await answered(h, make_request, drive)
    final = out.result.final_answer
    assert out.result.degraded and final.metadata["reason"] == "checks_failed"
    assert final.metadata["checks_never_held"] == ["request.bullets"]
    # The answer over the draft it ties, and over the rewrite, which held no more than it (so
    # the rounds ended after it)
    assert final.metadata["answered_by"] == "answer"
    assert [c["held"] for c in final.metadata["candidates"]] == [0, 0, 0]
    # the model's text alone; the account beside it
    assert final.answer_text == "Green, black and oolong are three teas."
    assert "request.bullets (from the request) did not hold" in final.notes
    assert "not even the plain draft: this model did not meet it" in final.notes


async def test_no_rounds_means_checked_but_never_refined(
    harness, replies, make_request, drive
) -> None:
    h = harness(loop_script(replies), answer_refine_rounds=0)
    out = await answered(h, make_request, drive)
    assert REWRITE not in h.llm.calls and CRITIQUE not in h.llm.calls
    assert out.result.final_answer.metadata["checks"][0]["verdict"] == "fail"


async def test_a_redelivered_answer_hop_makes_no_second_critique_or_refinement(
    harness, replies, make_request, drive, delivered
) -> None:
    h = harness(loop_script(replies))
    trail = await drive(make_request(), h.deps)
    (first,) = await phase_e.handle(delivered(trail[-1]), h.deps)
    calls = len(h.llm.calls)
    (again,) = await phase_e.handle(delivered(trail[-1]), h.deps)
    assert len(h.llm.calls) == calls

    def checked(out: FinalAnswerReady) -> tuple[Any, ...]:
        meta = out.result.final_answer.metadata
        return out.result.final_answer.answer_text, meta["answered_by"], meta["checks"]

    assert checked(again) == checked(first)
    assert again.event_id == first.event_id


# ---------------------------------------------------------------------------------------------
# What a pass's material is judged by.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "on_material"),
    [
        ({"type": "pattern", "pattern": "Lisbon"}, True),
        ({"type": "pattern", "pattern": "TODO", "present": False}, False),
        ({"type": "phrase_count", "phrase": "Lisbon", "min": 2}, True),
        ({"type": "phrase_count", "phrase": "Lisbon", "max": 1}, False),
        (BULLETS, False),
        ({"type": "starts_with", "text": "Yes"}, False),
        ({"type": "language", "code": "en"}, False),
    ],
)
def test_only_checks_that_ask_for_presence_judge_a_pass(check, on_material) -> None:
    made = parse_check(check)
    assert asks_presence(made) is on_material
    kept = verification.on_material({"r": [made, PatternCheck(pattern="x")]})
    assert len(kept["r"]) == (2 if on_material else 1)


# ---------------------------------------------------------------------------------------------
# How the run ends, its history, and how the checks are shown.
# ---------------------------------------------------------------------------------------------


def _judged(failed: bool) -> Evaluation:
    finding = RuleFinding(id="request.bullets", severity="fail", message="exactly 3 bullets")
    return Evaluation(score=0.0 if failed else 1.0, passed=not failed, failed=[finding] * failed)


@pytest.mark.parametrize(
    ("depth", "tool", "tools_available", "failed", "approve", "ends"),
    [
        (1, "none", True, False, False, True),
        (2, "moderate", False, False, False, True),  # no tools here: the loop has none either
        (2, "moderate", True, False, False, False),
        (3, "none", False, False, False, False),
        # A check fails: still the draft path (E rewrites it), not the loop, for a request the
        # profile says needs no steps.
        (1, "none", False, True, False, True),
        (1, "none", False, False, True, False),
        (3, "none", False, True, False, False),  # it needs steps, and a check fails: the loop
    ],
)
def test_when_the_draft_is_enough(depth, tool, tools_available, failed, approve, ends) -> None:
    run = RunState(
        request="r",
        # A profile the model gave its reasons for: what it says of the request stands.
        profile=TaskProfile(reasoning_depth=depth, expected_tool_usage=tool, raw_inference="why"),
        approve_plan=approve,
    )
    end = exits.draft_suffices(run, _judged(failed), tools_available=tools_available, simple=False)
    assert (end is not None) is ends
    if end is not None:
        assert end.reason is ExitReason.CONVERGED


@pytest.mark.parametrize(
    ("simple", "failed", "approve", "ends"),
    [
        (True, False, False, True),
        (True, True, False, True),  # a check fails: the draft path's rewrite, not the loop
        (True, False, True, False),  # the plan is to be approved first
        (False, False, False, False),  # it needs steps, and no profile says it does not
        (False, True, False, False),
    ],
)
def test_without_a_profile_a_simple_ask_ends_on_its_draft(
    simple: bool, failed: bool, approve: bool, ends: bool
) -> None:
    """A simple ask (no tools, no files, one short ask: phases.spend) is never profiled: the
    default profile stands in and says nothing, and the draft is the answer, rewritten by Phase
    E where it fails a check (the loop held fewer rules than the draft path on SmolLM2, at six
    times its tokens). A request that needs steps, its profile not had, runs the loop."""
    run = RunState(
        request="What is the capital of France?",
        profile=TaskProfile(reasoning_depth=5),
        profile_is_default=True,
        approve_plan=approve,
    )
    end = exits.draft_suffices(run, _judged(failed), tools_available=False, simple=simple)
    assert (end is not None) == ends
    if end is not None:
        assert "the request is one short ask, with no tools or files to use" in end.detail
        assert ("Phase E rewrites it for the checks it fails" in end.detail) == failed


@pytest.mark.parametrize("raw_inference", ["", "   "])
def test_a_profile_with_no_reasons_says_nothing_of_a_request_that_needs_steps(
    raw_inference: str,
) -> None:
    """Issue 33: a profile whose ratings come with no reasons is not the model's reading of
    this request (SmolLM2 rated "What is the capital of France?" depth 1 or 3 so): for a
    request that is no simple ask, the loop runs."""
    profile = TaskProfile(reasoning_depth=1, raw_inference=raw_inference)
    run = RunState(request="Compare heat pumps and gas boilers. Then say which.", profile=profile)
    assert exits.draft_suffices(run, _judged(False), tools_available=False, simple=False) is None


def test_what_an_answer_is_when_checked() -> None:
    reason = exits.answer_reason
    assert reason("converged", 0, 0, ["plan_state"], has_draft=True) is AnswerReason.CONVERGED
    assert reason("converged", 0, 0, [], has_draft=False) is AnswerReason.NO_PASSES
    assert reason("converged", 2, 1, [], checks_failed=True) is AnswerReason.CHECKS_FAILED
    assert reason("stagnated", 2, 1, [], checks_failed=True) is AnswerReason.NOT_CONVERGED


async def test_the_draft_is_a_record_of_the_history_phase_e_reads() -> None:
    run = RunState(request="r", has_draft=True)
    run.draft = "A plain draft."
    event = LoopExited(
        correlation_id="run-1", deadline=utcnow(), reason=ExitReason.CONVERGED, run=run
    )
    (record,) = history.new_records([event], kept=0)
    assert (record.name, record.value) == (DRAFT_RECORD, b'"A plain draft."')
    wire = LoopExited.model_validate_json(event.model_dump_json())
    assert wire.run.draft is None and wire.run.has_draft  # not carried: read from the record
    assert DRAFT_RECORD in history.records_for_e(wire)
    records = DictRunRecords()
    records.write([record])
    await history.load_draft(records, "run-1", wire.run)
    assert wire.run.draft == "A plain draft."


CHECKED = {
    "answered_by": "refinement:1",
    "checks": [
        {
            "id": "request.bullets",
            "origin": "request",
            "severity": "fail",
            "description": "exactly 3 bullet points",
            "verdict": "fail",
            "details": "2 bullet line(s), wanted exactly 3",
        },
        {
            "id": "r.city",
            "origin": "rules",
            "severity": "fail",
            "description": "mentions Lisbon",
            "verdict": "pass",
            "details": "found",
        },
    ],
}
NOT_HELD = (
    "check request.bullets (from the request) did not hold: exactly 3 bullet points: "
    "2 bullet line(s), wanted exactly 3"
)


def test_the_checks_are_worded_in_one_place() -> None:
    assert render.checks_line(outcome_of(CHECKED)) == (
        "1 of 2 check(s) held; answered by the answer as refined in round 1"
    )
    assert render.checks_not_held(outcome_of(CHECKED)) == [NOT_HELD]
    assert render.checks_line(outcome_of({"answered_by": "answer", "checks": []})) == ""
    failed = {**CHECKED, "reason": "checks_failed", "convergence_status": "converged"}
    lines = render.ending_lines(outcome_of(failed))
    assert NOT_HELD in lines  # the answer's checks, not the last pass's failed rules


def test_the_cli_and_the_api_name_the_checks_that_did_not_hold() -> None:
    result = ExecutionResult(
        status=ExitReason.CONVERGED,
        degraded=False,
        total_passes=1,
        total_refinements=0,
        ttl_remaining=3,
        usage=Usage(),
        elapsed_seconds=1.0,
        final_answer=FinalAnswer(answer_text="- a\n- b", metadata=CHECKED),
    )
    shown = render_human(result.model_dump(mode="json"))
    assert "Checks: 1 of 2 check(s) held; answered by the answer as refined in round 1" in shown
    assert f"  - {NOT_HELD}" in shown
    assert "  - check r.city held: mentions Lisbon" in shown
    data = answer_data(result)
    assert data["checks_not_held"] == [NOT_HELD] and data["checks"].startswith("1 of 2")


async def test_the_draft_stands_in_when_the_answer_cannot_be_had(
    harness, replies, make_request, drive
) -> None:
    """Synthesis fails (its reply unusable even after the repair): the host would summarise
    the run's data; the draft, one call's answer, is published instead, still degraded."""
    h = harness(
        loop_script(
            replies,
            **{
                DRAFT: THREE,
                SYNTH: "not json at all",
                PromptId.SUPERVISOR_REPAIR_JSON_USER: "still not json",
            },
        )
    )
    # effort high: the loop runs, though the draft holds every check
    out = await answered(h, make_request, drive, effort="high")
    final = out.result.final_answer
    assert out.result.degraded and final.metadata["reason"] == "invalid_llm_output"
    assert final.metadata["answered_by"] == "draft"
    assert final.answer_text == THREE  # the draft alone: the host's account is in the notes
    assert final.notes.endswith("The answer is the plain draft (one call).")
    assert [c["verdict"] for c in final.metadata["checks"]] == ["pass"]


async def test_a_loop_that_fails_before_its_first_pass_publishes_the_draft_without_synthesis(
    harness, replies, make_request, drive
) -> None:
    """B gets no usable plan (SmolLM2 copies the plan format's example): no pass ran, so there
    is no work to synthesise from, and a synthesis would be one more plain call, a worse one
    (on SmolLM2, the answer format's example copied). A plan the model cannot make ends the
    loop path, not the run: the draft holds every check, so it is published as it is, the run
    answered, not failed, and the outcome names the loop as the part not used."""
    h = harness(no_plan_script(replies, THREE))
    # effort high: the loop runs, though the draft holds every check
    out = await answered(h, make_request, drive, effort="high")
    final = out.result.final_answer
    assert out.result.status == ExitReason.CONVERGED and not out.result.degraded
    assert final.metadata["reason"] == "converged" and final.metadata["answered_by"] == "draft"
    assert final.metadata["convergence_status"] == "failed"
    assert final.metadata["not_used"].startswith("the loop (phases B to D): plan generation")
    assert final.answer_text == THREE
    assert SYNTH not in h.llm.calls


async def test_a_loop_that_fails_before_its_first_pass_on_a_draft_that_fails_is_failed(
    harness, replies, make_request, drive
) -> None:
    """No candidate holds every check: the run is what it was, failed and degraded, and the
    host's account of it is in the notes, beside the model's text."""
    h = harness(no_plan_script(replies, "no bullets"), answer_refine_rounds=0)
    out = await answered(h, make_request, drive)
    final = out.result.final_answer
    assert out.result.status == ExitReason.FAILED and out.result.degraded
    assert final.metadata["reason"] == "no_passes" and "not_used" not in final.metadata
    assert final.answer_text == "no bullets"
    assert "plan generation failed" in final.notes


async def test_a_draft_that_fails_a_check_is_refined_when_no_pass_ran(
    harness, replies, make_request, drive
) -> None:
    """No plan, so no pass and no answer of the model's: the draft is the text the checks
    point at, critiqued and refined as an answer would be, and the refinement that holds is
    published: it holds every check, so the run is answered, not failed, with no synthesis
    call."""
    draft = "Teas: green, black and oolong."
    h = harness(no_plan_script(replies, draft))
    out = await answered(h, make_request, drive)
    final = out.result.final_answer
    assert final.metadata["reason"] == "converged" and not out.result.degraded
    assert out.result.status == ExitReason.CONVERGED
    assert final.metadata["answered_by"] == "refinement:1"
    assert [c["held"] for c in final.metadata["candidates"]] == [0, 1]
    assert final.answer_text == THREE
    assert SYNTH not in h.llm.calls
    [rewrite] = [c for c in h.llm.history if c.prompt_id == REWRITE]
    assert rewrite.input.answer == draft


def _candidate(source: verification.Source, held: int) -> verification.Candidate:
    return verification.Candidate(source, source, _judged(held == 0), held)


@pytest.mark.parametrize(
    ("loop_converged", "held", "chosen"),
    [
        (True, (1, 1, 1), "answer"),  # ties go to the later one, but a rewrite wins none
        (True, (1, 1, 2), "refinement"),  # a rewrite wins by holding more
        (False, (1, 1, 1), "draft"),  # and not past the draft, where the loop showed nothing
        (False, (0, 1, 1), "answer"),
        (False, (0, 0, 1), "refinement"),
        (False, (1, 2, 0), "answer"),  # more checks held win, whatever the loop did
    ],
)
def test_the_candidate_published(loop_converged: bool, held: tuple[int, ...], chosen: str) -> None:
    candidates = [
        _candidate(source, n)
        for source, n in zip(("draft", "answer", "refinement"), held, strict=True)
    ]
    assert verification.best(candidates, loop_converged=loop_converged).source == chosen


async def test_the_draft_stands_in_when_the_deadline_passed(
    harness, replies, make_request, drive
) -> None:
    """Past the deadline no model call starts; the draft was made in time, and is published."""
    h = harness(loop_script(replies, **{DRAFT: THREE}))
    # effort high: the loop runs, though the draft holds every check
    trail = await drive(make_request(effort="high"), h.deps)
    late = trail[-1].model_copy(update={"deadline": utcnow()})
    calls = len(h.llm.calls)
    (out,) = await phase_e.handle(late, h.deps)
    assert len(h.llm.calls) == calls  # no synthesis, no critique
    final = out.result.final_answer
    assert final.metadata["reason"] == "deadline_exceeded" and out.result.degraded
    assert final.metadata["answered_by"] == "draft" and final.answer_text.endswith(THREE)


# ---------------------------------------------------------------------------------------------
# The host's floor under PREPARE, and a draft that copies Aeon's own words.
# ---------------------------------------------------------------------------------------------


async def test_the_host_reads_a_plainly_stated_constraint_when_prepare_makes_none(
    harness, replies, make_request
) -> None:
    """A small model often prepares no checks: "in three bullet points" is checked anyway, and
    the model's own copy of the same check is not added twice."""
    request = RequestSubmitted.new("Name three teas in three bullet points.", timeout=600)
    for reply in ('{"checks": []}', prepared(("request.bullets", BULLETS))):
        h = harness({INFER: replies.profile(), PREPARE: reply, DRAFT: "x"})
        (out,) = await phase_a.handle(request, h.deps)
        (rule,) = out.run.rules
        assert (rule.id, rule.origin) == ("request.bullets", "request")
        assert out.run.prepared == {"request.bullets": [CountCheck(unit="bullets", min=3, max=3)]}


async def test_the_host_reads_a_rule_in_words_when_prepare_fails(
    harness, replies, make_request
) -> None:
    rule = Rule(id="short", check="Use at most 150 words in total.")
    h = harness({INFER: replies.profile(), PREPARE: "not JSON at all", DRAFT: "x"})
    (out,) = await phase_a.handle(make_request(rules=[rule]), h.deps)
    assert out.run.prepared == {"short": [CountCheck(unit="words", min=None, max=150)]}


async def test_a_draft_that_copies_aeons_instructions_is_not_kept(
    harness, replies, make_request
) -> None:
    """A weak model copies what its prompt shows it: such a draft is no candidate answer."""
    copied = "The heat pump: about 900 euros a year against 1,400 for the gas boiler (s1, s2)."
    h = harness(
        {INFER: replies.profile(depth=1, tool="none"), PREPARE: '{"checks": []}', DRAFT: copied}
    )
    (out,) = await phase_a.handle(make_request(), h.deps)
    assert isinstance(out, TaskProfiled) and not out.run.has_draft
    assert any("repeats Aeon's own instructions" in note for note in out.run.notes)


async def test_the_draft_is_the_plain_call_with_the_users_rules(
    harness, replies, make_request
) -> None:
    """The draft asks what a person asking once would: the request, then the user's rules as
    instructions, the same message the quality bench's plain baseline sends."""
    rule = Rule(id="moon", description="Name the Moon as a cause.", check="names the Moon")
    h = harness({INFER: replies.profile(), PREPARE: '{"checks": []}', DRAFT: "x"})
    request = make_request(rules=[rule])
    await phase_a.handle(request, h.deps)
    (sent,) = [call for call in h.llm.history if call.prompt_id is DRAFT]
    assert sent.input.request == plain_call(request.request, ["Name the Moon as a cause."])
    assert sent.input.request.startswith(request.request)
    assert "- Name the Moon as a cause." in sent.input.request


# ---------------------------------------------------------------------------------------------
# Repairs on the host (checks.repairs): before any model call, competing beside the original.
# ---------------------------------------------------------------------------------------------

LOWER = {"type": "case", "case": "lower"}


async def test_a_repaired_answer_holds_the_check_and_no_model_call_rewrites_it(
    harness, replies, make_request, drive
) -> None:
    """The model's answer fails "all lower case"; the host recases it, the repaired text holds
    the check, and it is published with the repair named: no rewrite."""
    script = loop_script(
        replies,
        **{
            PREPARE: prepared(("request.case", LOWER)),
            DRAFT: "Teas.",
            SYNTH: answer("Green, Black and Oolong."),
        },
    )
    h = harness(script)
    # effort high: the loop runs, though the draft holds every check
    out = await answered(h, make_request, drive, effort="high")
    final = out.result.final_answer
    assert final.answer_text == "green, black and oolong."
    outcome = outcome_of(final.metadata)
    assert outcome.answered_by == "answer"
    assert outcome.repairs == ["lower-cased by the host"]
    assert [(c.answered_by, c.held, c.repairs) for c in outcome.candidates] == [
        ("draft", 0, []),
        ("draft", 1, ["lower-cased by the host"]),
        ("answer", 0, []),
        ("answer", 1, ["lower-cased by the host"]),
    ]
    assert "lower-cased by the host" in render.checks_line(outcome)
    assert REWRITE not in h.llm.calls
    assert not out.result.degraded


async def test_a_draft_that_holds_once_repaired_ends_the_run_at_phase_a(
    harness, replies, make_request, drive
) -> None:
    """Sampling judges a draft as the host's repairs leave it: one that holds every check once
    recased needs no second sample and no loop, and is published repaired."""
    script = {
        INFER: replies.profile(depth=1, tool="none"),
        PREPARE: prepared(("request.case", LOWER)),
        DRAFT: ["Green Tea.", "never asked"],
    }
    h = harness(script)
    trail = await drive(make_request(), h.deps)
    (exit_event,) = trail
    assert isinstance(exit_event, LoopExited) and exit_event.reason is ExitReason.CONVERGED
    (out,) = await phase_e.handle(exit_event, h.deps)
    final = out.result.final_answer
    assert final.answer_text == "green tea."
    assert outcome_of(final.metadata).repairs == ["lower-cased by the host"]
    assert h.llm.calls.count(DRAFT) == 1 and len(h.llm.calls) == 3


async def test_a_repair_that_breaks_another_check_is_not_used(
    harness, replies, make_request, drive
) -> None:
    """Recasing would break a case-sensitive opening the answer holds: no repair, so the model
    is asked to rewrite, as before."""
    opening = {"type": "starts_with", "text": "Green", "case_sensitive": True}
    script = loop_script(
        replies,
        **{
            PREPARE: prepared(("request.case", LOWER), ("request.opening", opening)),
            DRAFT: "Green Tea.",
            SYNTH: answer("Green Tea and Black."),
            REWRITE: "Green tea and black.",
        },
    )
    h = harness(script)
    out = await answered(h, make_request, drive)
    final = out.result.final_answer
    outcome = outcome_of(final.metadata)
    assert outcome.repairs == [] and all(c.repairs == [] for c in outcome.candidates)
    assert REWRITE in h.llm.calls


def test_a_repaired_candidate_wins_only_by_holding_more() -> None:
    model = _candidate("answer", 1)
    fixed = verification.Candidate("answer", "fixed", _judged(False), 1, repairs=("lower-cased",))
    assert verification.best([model, fixed]) is model
    more = verification.Candidate("answer", "fixed", _judged(False), 2, repairs=("lower-cased",))
    assert verification.best([model, more]) is more


def test_a_repair_must_keep_the_users_content_checks_too() -> None:
    """A content check of the user's rules is a pattern the repair must not break: "Paris"
    must occur as written, so recasing the whole answer is not a repair here."""
    run = RunState(
        request="Name the capital, in lower case.",
        rules=[
            Rule(id="r.paris", severity="warn", check=RuleCheck(type="content", search="Paris")),
            Rule(id="request.case", severity="fail", check="all lower case", origin="request"),
        ],
        prepared={"request.case": [parse_check({"type": "case", "case": "lower"})]},
    )
    checks = verification.host_checks(run)
    assert checks == [PatternCheck(pattern="Paris"), parse_check({"type": "case", "case": "lower"})]
    assert repair("Paris is the capital.", checks) == ("Paris is the capital.", [])


async def test_the_checks_run_on_exactly_the_text_delivered(
    harness, replies, make_request, drive
) -> None:
    """Issue 41, finding 7: a degraded run whose text is the model's delivers that text alone,
    so a word limit it held is held as delivered (the host's account, longer than the limit,
    goes in the notes), and each verdict in the outcome is the verdict on `answer_text`."""
    words = {"type": "count", "unit": "words", "max": 12}
    h = harness(
        loop_script(
            replies,
            **{PREPARE: prepared(("request.bullets", BULLETS), ("request.words", words))},
            **{REWRITE: ["worse", "still worse"]},
        )
    )
    trail = await drive(make_request(effort="high"), h.deps)
    (out,) = await phase_e.handle(trail[-1], h.deps)
    final = out.result.final_answer
    # the answer: the rewrites held no more than it
    assert out.result.degraded and final.answer_text == "Green, black and oolong are three teas."
    assert len(final.notes.split()) > 12  # the account would have broken the limit
    run = trail[-1].run
    judged = await verification.check_text(run, final.answer_text, h.deps.settings)
    delivered = {r.id: r.verdict for r in judged.rule_results}
    assert {c.id: c.verdict for c in outcome_of(final.metadata).checks} == delivered
    assert delivered["request.words"] == "pass"
