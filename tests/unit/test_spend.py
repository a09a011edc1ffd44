"""Spend that follows need (docs/verified-answers.md, "Spend that follows need"): a simple ask
makes no profile call, the profile is asked only where it can change the run's path, PREPARE
only for words or unread constraint language, the loop runs only where it has something to
add, and a redelivered hop makes no second call. The calls are counted on the scripted LLM."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aeonloop.contracts import AttachedFile, Usage
from aeonloop.gateway.cli.main import _parser
from aeonloop.gateway.http.chat_models import ChatRequest, completion
from aeonloop.gateway.http.models import RunRequest
from aeonloop.limits import LoopSettings
from aeonloop.phases import phase_a, spend, verification
from aeonloop.phases.events import (
    ExecutionResult,
    LoopExited,
    RequestSubmitted,
    RunState,
    TaskProfiled,
)
from aeonloop.phases.models import ExitReason, FinalAnswer, Rule
from aeonloop.prompts.registry import PromptId

INFER = PromptId.TASKPROFILE_INFERENCE_USER
PREPARE = PromptId.CHECKS_PREPARE_USER
DRAFT = PromptId.ANSWER_DRAFT_USER
FRANCE = "What is the capital of France?"
FRUITS = "Name three fruits in three bullet points, in lower case, in under 20 words."


def ask(text: str, **options: object) -> RequestSubmitted:
    return RequestSubmitted.new(text, timeout=600, **options)  # type: ignore[arg-type]


async def test_a_simple_ask_makes_no_profile_call(harness, delivered) -> None:
    """ "What is the capital of France?": one call, the draft; the run ends on it. Its
    redelivery makes none."""
    h = harness({DRAFT: "The capital of France is Paris."})
    event = ask(FRANCE)
    (out,) = await phase_a.handle(delivered(event), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged"
    assert h.llm.calls == [DRAFT]
    assert out.run.profile_is_default and out.run.notes == []
    assert "one short ask, with no tools or files" in out.detail
    (again,) = await phase_a.handle(delivered(event), h.deps)
    assert h.llm.calls == [DRAFT] and again.event_id == out.event_id


async def test_a_simple_ask_whose_constraints_the_host_reads_makes_one_call(harness) -> None:
    """The fruits request: every constraint is read by the host, so neither the profile nor
    PREPARE is asked; the draft that holds them all ends the run."""
    h = harness({DRAFT: "- apple\n- pear\n- plum"})
    (out,) = await phase_a.handle(ask(FRUITS), h.deps)
    assert isinstance(out, LoopExited)
    assert h.llm.calls == [DRAFT]
    assert {rule.id for rule in out.run.rules} >= {"request.bullets", "request.case"}


@pytest.mark.parametrize(
    ("text", "rules", "asked"),
    [
        (FRANCE, [], False),  # no constraint language
        (FRUITS, [], False),  # the host's reader reads every constraint it states
        ("Explain how tides work in a table.", [], True),  # "in a table": not read
        (FRANCE, [Rule(id="r.short", check="keep it brief")], True),  # a rule in words
        (FRANCE, [Rule(id="r.paris", check="Mention Paris.")], False),  # one the host reads
    ],
)
async def test_prepare_only_for_words_or_unread_constraint_language(
    harness, text: str, rules: list[Rule], asked: bool
) -> None:
    h = harness({PREPARE: '{"checks": []}', DRAFT: "x", INFER: "{}"})
    await phase_a.handle(ask(text, rules=rules), h.deps)
    assert (PREPARE in h.llm.calls) is asked


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("Name three fruits in three bullet points.", True),
        ("Explain tides in a table.", False),
        ("Explain tides, and end with 'Done'.", True),
        ("Give a pro and a con, with lines starting 'Pro:' and 'Con:'.", True),  # one clause
        ("Explain it. End with a line 'Summary: ' followed by one sentence.", True),
        ("What is the capital of France?", True),  # nothing to read: nothing unread
    ],
)
def test_unread_constraints(text: str, read: bool) -> None:
    assert (spend.unread_constraints(text) == []) is read


async def test_a_simple_ask_whose_draft_fails_a_check_is_rewritten_not_looped(harness) -> None:
    """A request that needs no steps stays on the draft path when its draft fails a check:
    the run ends at A on its best draft, and Phase E rewrites it for the checks it fails (at
    medium, AEON_ANSWER_REFINE_ROUNDS rewrites). On SmolLM2 the loop after such a draft held
    fewer rules than the draft path, at six times its tokens (docs/benchmarks.md)."""
    h = harness({DRAFT: "Apple, pear and plum."}, draft_samples=1)
    (out,) = await phase_a.handle(ask(FRUITS), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged" and out.run.has_draft
    assert out.detail == (
        "the plain draft held 2 of 3 fail-severity check(s), and the request is one short ask, "
        "with no tools or files to use; Phase E rewrites it for the checks it fails"
    )
    assert h.llm.calls == [DRAFT]  # a simple ask: the default profile stands in
    assert verification.rewrite_rounds(out.run, LoopSettings(answer_refine_rounds=2)) == 2


@pytest.mark.parametrize(
    "options",
    [
        {"files": [AttachedFile(path="notes.txt", content="Tides: the Moon.")]},
        {"text": "Explain how photosynthesis works, then rewrite it for a 10-year-old"},
    ],
)
async def test_a_request_that_needs_steps_is_profiled(harness, replies, options) -> None:
    """Files to read, or several parts: the profile is asked, and without its reasons to say
    one call is enough, the loop runs though the draft holds."""
    text = options.pop("text", FRANCE)
    h = harness({INFER: "not json", PromptId.SUPERVISOR_REPAIR_JSON_USER: "no", DRAFT: "x"})
    (out,) = await phase_a.handle(ask(text, **options), h.deps)
    assert INFER in h.llm.calls
    assert isinstance(out, TaskProfiled)


TIDES = "Explain how tides work, then say why there are two a day."
TIDE_RULE = Rule(id="r.moon", check={"type": "content", "search": "Moon"})


@pytest.mark.parametrize(
    ("state", "tools", "asked"),
    [
        ({"request": FRANCE}, False, False),  # a simple ask
        ({"request": TIDES}, False, True),  # several parts, no check: the profile decides
        ({"request": TIDES, "rules": [TIDE_RULE]}, False, False),  # a rule, nothing to use
        ({"request": f"{TIDES} Answer in under 50 words."}, False, False),  # the host reads one
        ({"request": TIDES, "rules": [TIDE_RULE]}, True, True),  # tools to use
        ({"request": TIDES, "rules": [TIDE_RULE], "file_paths": ["a.txt"]}, False, True),
        ({"request": TIDES, "rules": [TIDE_RULE], "approve_plan": True}, False, True),
        ({"request": FRANCE, "effort": "high"}, False, True),  # high: the loop, as profiled
        ({"request": TIDES, "effort": "low"}, True, False),  # low: the draft path only
    ],
)
def test_the_profile_only_where_it_can_change_the_runs_path(
    state: dict[str, object], tools: bool, asked: bool
) -> None:
    run = RunState.model_validate({"effort": "medium", **state})
    simple = spend.simple_ask(run, tools_available=tools)
    assert spend.needs_profile(run, tools_available=tools, simple=simple) is asked


async def test_a_request_of_several_parts_with_a_rule_ends_on_its_draft_path(harness) -> None:
    """Two parts and a rule the draft fails, nothing to use: no profile is asked, the samples
    are taken, and the run ends at A on the best (Phase E rewrites it); the loop is not run."""
    h = harness({DRAFT: ["Tides rise and fall.", "The sea moves."]}, draft_samples=2)
    (out,) = await phase_a.handle(ask(TIDES, rules=[TIDE_RULE]), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged"
    assert h.llm.calls == [DRAFT, DRAFT]
    assert "nothing to use but its words; Phase E rewrites it" in out.detail


def test_a_simple_ask_has_no_tools_files_or_second_part() -> None:
    assert spend.simple_ask(RunState(request=FRANCE), tools_available=False)
    assert not spend.simple_ask(RunState(request=FRANCE), tools_available=True)
    assert not spend.simple_ask(RunState(request=FRANCE, file_paths=["a"]), tools_available=False)
    assert not spend.simple_ask(RunState(request=f"{FRANCE} Then Spain's."), tools_available=False)


# -- the effort (limits.Effort: AEON_EFFORT, a request's effort) ---------------------------------


async def test_effort_low_ends_on_the_draft_path_even_when_a_check_fails(harness) -> None:
    """Low: the draft path only. No profile is asked, and the run ends at A on its best draft
    (Phase E then rewrites it once, at most: `rewrite_rounds`)."""
    h = harness({DRAFT: "Apple, pear and plum."}, draft_samples=1)
    (out,) = await phase_a.handle(ask(FRUITS, effort="low"), h.deps)
    assert isinstance(out, LoopExited) and out.reason == "converged"
    assert out.detail.startswith("effort low, the draft path only: the plain draft held 2 of 3")
    assert h.llm.calls == [DRAFT]
    assert verification.rewrite_rounds(out.run, LoopSettings(answer_refine_rounds=3)) == 1


async def test_effort_high_runs_the_loop_even_for_a_simple_ask(harness, replies) -> None:
    h = harness({INFER: replies.profile(depth=1, tool="none"), DRAFT: "Paris."})
    (out,) = await phase_a.handle(ask(FRANCE, effort="high"), h.deps)
    assert isinstance(out, TaskProfiled)
    assert sorted(h.llm.calls) == sorted([INFER, DRAFT])


async def test_the_effort_travels_with_the_request_over_the_workers_setting(harness) -> None:
    """A request's effort is its run's, whatever the worker's AEON_EFFORT; without one, the
    worker's stands."""
    h = harness({DRAFT: "Paris.", INFER: "{}"}, effort="high")
    (mine,) = await phase_a.handle(ask(FRANCE, effort="medium"), h.deps)
    assert mine.run.effort == "medium" and isinstance(mine, LoopExited)
    (theirs,) = await phase_a.handle(ask(FRANCE), h.deps)
    assert theirs.run.effort == "high" and isinstance(theirs, TaskProfiled)


@pytest.mark.parametrize(
    ("given", "effort"),
    [(None, None), ("minimal", "low"), ("low", "low"), ("medium", "medium"), ("xhigh", "high")],
)
def test_the_chat_endpoints_reasoning_effort_is_the_runs_effort(given, effort) -> None:
    body = {"model": "aeon", "messages": [{"role": "user", "content": "hi"}]}
    if given is not None:
        body["reasoning_effort"] = given
    assert ChatRequest.model_validate(body).effort() == effort


def test_the_runs_api_takes_an_effort_and_names_a_wrong_one() -> None:
    """`POST /v1/runs` takes `effort` as `aeon ask --effort` does; left out, the workers'
    AEON_EFFORT decides (None)."""
    assert RunRequest.model_validate({"request": "hi", "effort": "high"}).effort == "high"
    assert RunRequest.model_validate({"request": "hi"}).effort is None
    with pytest.raises(ValidationError, match="effort"):
        RunRequest.model_validate({"request": "hi", "effort": "max"})


def test_aeon_ask_takes_an_effort() -> None:
    parser = _parser()
    assert parser.parse_args(["ask", "hi", "--effort", "low"]).effort == "low"
    assert parser.parse_args(["ask", "hi"]).effort is None  # the workers' AEON_EFFORT


def test_the_chat_outcome_carries_the_hosts_account_beside_the_models_text() -> None:
    """Issue 41, finding 7: the completion's content is the model's text alone; the host's
    account of the run is in `aeon.notes`."""
    answer = FinalAnswer(
        answer_text="Paris.", notes="The loop exited early.", metadata={"reason": "no_passes"}
    )
    result = ExecutionResult(
        status=ExitReason.FAILED,
        degraded=True,
        total_passes=0,
        total_refinements=0,
        ttl_remaining=0,
        usage=Usage(),
        elapsed_seconds=1.0,
        final_answer=answer,
    )
    made = completion("run-1", 0, result)
    assert made.choices[0].message.content == "Paris."
    assert made.aeon.notes == "The loop exited early."
