"""`aeon ask` against an OpenAI-compatible server answering in each reply style real ones use.

Each case runs the README's command as a user with `AEON_LLM=openai` would (embedded Redis, the
official client, real HTTP to a fake server on loopback) and checks the outcome: answered and
not degraded wherever the replies allow it, with no repair call spent on what can be fixed
locally. Run with `-s` to see one line per style: outcome, LLM calls and repair calls per run
(the table in docs/llm-servers.md is such a run).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from e2e_support import Processes, child_env
from openai_fake import FakeOpenAI, serve
from openai_styles import (
    BOUND_S,
    CASES,
    CONTEXT_TOKENS,
    INTERRUPTING,
    PLAN,
    SLOW_WORD_S,
    PipelineModel,
    Request,
)

from aeonloop.prompts.echo import quoted_instruction
from aeonloop.prompts.registry import PromptId, default_registry

pytestmark = pytest.mark.e2e

REQUEST = "Explain why the sea has tides, then summarise it for a child"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with serve() as fake:
        fake.models = ["stand-in"]  # what it serves, as `aeon ask` checks at start
        yield fake


def ask_stand_in(
    procs: Processes, server: FakeOpenAI, name: str, **settings: str
) -> tuple[int, dict]:
    """`aeon ask --json` as a user pointing it at the stand-in server, with AEON_LLM_TIMEOUT=10
    unless `settings` say otherwise."""
    env = child_env(
        fast=False,
        AEON_LLM="openai",
        AEON_LLM_BASE_URL=server.base_url,
        AEON_LLM_MODEL="stand-in",
        **{"AEON_LLM_TIMEOUT": "10", **settings},
    )
    run = procs.run_aeon(env, "ask", "--json", "--timeout", "60", REQUEST, timeout=90, name=name)
    assert "Traceback" not in run.stderr, run.tail()
    return run.returncode, json.loads(run.stdout)


def ask(procs: Processes, server: FakeOpenAI, name: str) -> tuple[int, dict, PipelineModel]:
    model = PipelineModel(CASES[name])
    server.responder = model
    return *ask_stand_in(procs, server, name, **CASES[name].env), model


def report(name: str, code: int, result: dict, model: PipelineModel) -> None:
    usage = result.get("usage", {})
    print(
        f"style={name} exit={code} status={result.get('status')} "
        f"degraded={result.get('degraded')} llm_calls={usage.get('calls')} "
        f"repair_calls={usage.get('repair_calls')} local_repairs={usage.get('local_repairs')} "
        f"http_requests={len(model.requests)}"
    )


#: Styles with time limits of their own have a test each, below, that holds them to this too.
UNTIMED = [n for n, case in CASES.items() if case.answerable and not case.env]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", UNTIMED)
def test_each_style_is_answered_without_degrading(
    procs: Processes, server: FakeOpenAI, name: str
) -> None:
    code, result, model = ask(procs, server, name)
    report(name, code, result, model)
    answered_in_full(code, result, model)


def answered_in_full(code: int, result: dict, model: PipelineModel) -> None:
    """Converged, not degraded, the answer the replies make, and no repair call spent."""
    assert code == 0, result
    assert (result["status"], result["degraded"]) == ("converged", False)
    answer = result["final_answer"]
    assert answer["answer_text"].startswith("Tides happen because")
    assert (answer["confidence"], answer["used_step_ids"]) == (0.9, ["s1", "s2"])
    assert result["usage"]["repair_calls"] == 0
    assert not any(r.prompt_id == PromptId.SUPERVISOR_REPAIR_JSON_USER for r in model.requests)


@pytest.mark.timeout(120)
def test_a_model_that_refuses_every_step_degrades_and_says_why(
    procs: Processes, server: FakeOpenAI
) -> None:
    code, result, model = ask(procs, server, "refuses-every-step")
    report("refuses-every-step", code, result, model)

    assert code == 1 and result["degraded"] is True
    notes = result["final_answer"]["metadata"]
    assert "refused" in json.dumps(notes)


# -- a model that copies its prompt (issue 32) ---------------------------------------------------


def never_publishes_aeons_text(result: dict) -> None:
    """The published answer holds no paragraph of Aeon's prompt text, and no reply format's
    example value."""
    text = result["final_answer"]["answer_text"]
    assert quoted_instruction(text) is None, text
    registry = default_registry()
    for prompt_id in PromptId:
        example = registry.get_definition(prompt_id).example_output or {}
        for value in json.dumps(example).split('"'):
            assert len(value.split()) < 4 or value not in text, (value, text)


@pytest.mark.timeout(120)
def test_a_model_that_copies_its_prompt_sometimes_recovers_through_the_repairs(
    procs: Processes, server: FakeOpenAI
) -> None:
    code, result, model = ask(procs, server, "echoes-sometimes")
    report("echoes-sometimes", code, result, model)

    assert code == 0, result
    assert (result["status"], result["degraded"]) == ("converged", False)
    never_publishes_aeons_text(result)
    assert result["final_answer"]["answer_text"].startswith("Tides happen because")
    assert result["final_answer"]["used_step_ids"] == ["s1", "s2"]
    # The copied plan and the unclean id each took the one repair call; the copied step failed
    # and ran again in pass 2.
    assert result["usage"]["repair_calls"] == 2
    repairs = [r for r in model.requests if r.prompt_id == PromptId.SUPERVISOR_REPAIR_JSON_USER]
    assert "plan.goal repeats the prompt's own instruction" in repairs[0].instructions
    assert "used_step_ids[0] is 's1,', not a clean id" in repairs[1].instructions
    assert REQUEST in repairs[0].instructions  # the repair knows what the reply was for
    first_pass = result["final_answer"]["metadata"]["execution_passes"][0]
    assert first_pass["failed_steps"] == {"s1": "the reply repeats Aeon's own instructions"}


@pytest.mark.timeout(120)
def test_a_model_that_always_copies_its_prompt_is_answered_by_its_draft_saying_why(
    procs: Processes, server: FakeOpenAI
) -> None:
    code, result, model = ask(procs, server, "echoes-always")
    report("echoes-always", code, result, model)

    never_publishes_aeons_text(result)
    metadata = result["final_answer"]["metadata"]
    # Its profile and plan are copies, refused: no pass ran, so no synthesis is asked for (it
    # would be a copy too) and the draft, the model's reply to the request alone, is published
    # as it is. It holds every check (there are none), so the plan the model could not make
    # ended the loop path, not the run: answered, the loop named as the part not used.
    assert code == 0 and result["degraded"] is False and result["status"] == "converged", result
    assert metadata["answered_by"] == "draft" and metadata["convergence_status"] == "failed"
    assert "plan.goal repeats the prompt's own instruction" in metadata["not_used"]
    assert "plan.goal repeats the prompt's own instruction" in metadata["exit_detail"]
    assert "repeats the prompt's own instruction" in json.dumps(metadata["run_notes"])
    assert not any(r.prompt_id == PromptId.ANSWER_SYNTHESIS_USER for r in model.requests)


# -- what each style proves beyond the answer ----------------------------------------------------


#: Calls Phase A sends at once: the profile, PREPARE and the draft.
PHASE_A_PROMPTS = {
    PromptId.TASKPROFILE_INFERENCE_USER,
    PromptId.CHECKS_PREPARE_USER,
    PromptId.ANSWER_DRAFT_USER,
}
A_CALLS = len(PHASE_A_PROMPTS)
#: What Phase A asks in JSON: the profile and PREPARE (the draft beside them is prose).
PHASE_A_JSON_PROMPTS = {PromptId.TASKPROFILE_INFERENCE_USER, PromptId.CHECKS_PREPARE_USER}


def refused_then_stepped_down(
    model: PipelineModel, carried: Callable[[Request], bool], phase_a: set[PromptId]
) -> None:
    """A refused option is sent once per call in flight when the refusal was learnt, and never
    again. Phase A's calls (`phase_a`, those that carry the option) start at once, and which of
    them reaches the server first, a refused one's second request among them, varies: so this
    is proven by phase, not by order. Only they carried it; every later call starts after they
    ended."""
    carrying = [r.prompt_id for r in model.requests if carried(r)]
    assert 1 <= len(carrying) <= len(phase_a), carrying
    assert set(carrying) <= phase_a, carrying


def schema_sent(request: Request) -> bool:
    return request.options.get("response_format", {}).get("type") == "json_schema"


def streamed(request: Request) -> bool:
    return bool(request.seen.body.get("stream"))


@pytest.mark.timeout(120)
def test_structured_output_falls_back_once(procs: Processes, server: FakeOpenAI) -> None:
    _, _, model = ask(procs, server, "no-json-schema")
    refused_then_stepped_down(model, schema_sent, PHASE_A_JSON_PROMPTS)


@pytest.mark.timeout(120)
def test_a_refusal_answered_with_500_steps_down_once_keeping_the_schema(
    procs: Processes, server: FakeOpenAI
) -> None:
    _, result, model = ask(procs, server, "json-schema-refused-with-500")
    refused_then_stepped_down(model, schema_sent, PHASE_A_JSON_PROMPTS)
    formats = [r.options.get("response_format") for r in model.requests]
    assert result["usage"]["repair_calls"] == 0
    # From then on the schema goes with json_object, its ranges as values a grammar enforces.
    # (Phase A's calls start at once, so which of them the server saw first varies.)
    grammar_mode = [f for f in formats if f and f["type"] == "json_object"]
    profile = next(f for f in grammar_mode if "reasoning_depth" in json.dumps(f))
    assert profile["schema"]["properties"]["reasoning_depth"]["enum"] == [1, 2, 3, 4, 5]


@pytest.mark.timeout(120)
def test_retry_after_is_waited(procs: Processes, server: FakeOpenAI) -> None:
    _, _, model = ask(procs, server, "429-retry-after")
    first = model.requests[0]
    # The same call sent again (Phase A's other calls go out beside it).
    again = next(r for r in model.requests[1:] if r.prompt_id == first.prompt_id)
    assert again.seen.at - first.seen.at >= 0.2


@pytest.mark.timeout(120)
def test_cut_replies_are_asked_again_with_a_budget(procs: Processes, server: FakeOpenAI) -> None:
    _, _, model = ask(procs, server, "cut-at-length-once")
    # Every call sends its prompt contract's budget; the cut one is asked again with twice it.
    # Phase A's calls start at once, so the one asked again is the next of the first's prompt,
    # not the next request.
    first, *rest = model.requests
    again = next(r for r in rest if r.prompt_id == first.prompt_id)
    budget = first.options.get("max_tokens")
    assert budget == default_registry().reply_tokens(first.prompt_id)
    assert again.options.get("max_tokens") >= 2 * budget


@pytest.mark.timeout(120)
def test_usage_without_a_usage_field_is_marked_estimated(
    procs: Processes, server: FakeOpenAI
) -> None:
    _, result, _ = ask(procs, server, "no-usage")
    assert result["usage"]["estimated"] is True
    assert result["usage"]["prompt_tokens"] > 0


@pytest.mark.timeout(120)
def test_prompts_are_fitted_after_a_context_length_refusal(
    procs: Processes, server: FakeOpenAI
) -> None:
    _, result, model = ask(procs, server, "small-context-long-steps")
    sizes = [len(r.options["messages"][0]["content"]) for r in model.requests]
    assert any(size > CONTEXT_TOKENS * 4 for size in sizes)  # the default window was too big
    assert "clipped to fit the context window" in json.dumps(
        [r.instructions for r in model.requests]
    )
    assert result["degraded"] is False


@pytest.mark.timeout(120)
def test_lenient_replies_cost_no_repair_call(procs: Processes, server: FakeOpenAI) -> None:
    _, result, _ = ask(procs, server, "python-literals-enum-case")
    # Each structured reply read leniently: the profile, the plan, its check, the pass's
    # evaluation (no PREPARE: the request states no constraint, phases.spend).
    assert result["usage"]["local_repairs"] >= 4
    assert result["usage"]["repair_calls"] == 0


# -- time limits that judge progress (issue 33) ---------------------------------------------------


def sent(model: PipelineModel, prompt_id: PromptId) -> int:
    return sum(r.prompt_id == prompt_id for r in model.requests)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["flaky", "stalls-mid-stream"])
def test_a_stalled_reply_is_sent_again_and_the_run_converges(
    procs: Processes, server: FakeOpenAI, name: str
) -> None:
    """The plan's first reply hangs longer than the bound (before its first token, or in its
    middle): that attempt is cut, sent again, and the run is answered as if nothing happened."""
    code, result, model = ask(procs, server, name)
    report(name, code, result, model)

    answered_in_full(code, result, model)
    assert sent(model, PromptId.PLAN_GENERATION_USER) == 2
    assert all(r.seen.body.get("stream") for r in model.requests)


@pytest.mark.timeout(120)
def test_a_slow_reply_that_keeps_coming_is_not_cut(procs: Processes, server: FakeOpenAI) -> None:
    """The plan takes longer in all than AEON_LLM_TIMEOUT, a word at a time: one request."""
    # The premise: the plan's words, SLOW_WORD_S apart, take longer than the bound.
    assert len(json.dumps(PLAN).split()) * SLOW_WORD_S > BOUND_S
    code, result, model = ask(procs, server, "slow-plan")
    report("slow-plan", code, result, model)

    answered_in_full(code, result, model)
    assert sent(model, PromptId.PLAN_GENERATION_USER) == 1


@pytest.mark.timeout(120)
def test_a_server_refusing_streaming_is_sent_whole_replies(
    procs: Processes, server: FakeOpenAI
) -> None:
    _, result, model = ask(procs, server, "refuses-streaming")
    refused_then_stepped_down(model, streamed, PHASE_A_PROMPTS)
    assert result["degraded"] is False


@pytest.mark.timeout(120)
def test_a_server_cutting_streams_when_calls_overlap_gets_one_call_at_a_time(
    procs: Processes, server: FakeOpenAI
) -> None:
    """llama-cpp-python's server by default ends a stream with no finish reason when another
    call comes (issue 33 on the real server): each stream cut is sent again, calls go one at a
    time from then on, still streamed, and the run is answered as if nothing happened. Only the
    calls sent at once before that (Phase A's) are cut: none sent in its turn is."""
    cut_before = INTERRUPTING.cut
    code, result, model = ask(procs, server, "interrupts-streams")
    report("interrupts-streams", code, result, model)

    answered_in_full(code, result, model)
    assert 1 <= INTERRUPTING.cut - cut_before <= A_CALLS, "no stream was cut, or one in turn"
    assert all(r.seen.body.get("stream") for r in model.requests)


@pytest.mark.timeout(120)
def test_a_server_that_never_starts_its_replies_in_time_ends_the_run_saying_why(
    procs: Processes, server: FakeOpenAI
) -> None:
    """A server that takes every call and writes nothing within the first-token bound: each
    call is a stall, sent again within AEON_LLM_MAX_RETRIES and no more (issue 24 had a call
    that timed out never sent again, which failed runs a slow but working server would have
    answered), and the run ends naming the bound."""
    server.stall(20.0)

    code, result = ask_stand_in(
        procs,
        server,
        "never-starts",
        AEON_LLM_TIMEOUT="1",
        AEON_LLM_FIRST_TOKEN_PER_1K_S="0",
        AEON_LLM_MAX_RETRIES="1",
    )

    assert code == 1, result
    assert result["status"] == "failed" and result["degraded"] is True
    assert "no first token within 1s (AEON_LLM_TIMEOUT=1s" in json.dumps(result)
    prompts = [seen.body["messages"][0]["content"] for seen in server.seen]
    print(f"never starts: {len(prompts)} requests, {len(set(prompts))} distinct")
    assert all(prompts.count(prompt) == 2 for prompt in prompts), "sent other than twice"
