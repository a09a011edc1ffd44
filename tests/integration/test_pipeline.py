"""Whole runs through the real bus: gateway client → A → B → C/D loop → E → answer.

The workers run in this process, in the harness users' tests run on (aeonloop.testing; the
multi-process proofs are in tests/e2e); the Redis is real, and the LLM is scripted per PromptId
so each scenario of the loop is forced on purpose.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from redis.asyncio import Redis

from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.progress import Progress
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMAdapter, LLMCall, LLMError
from aeonloop.llm.offline import OfflineLLM
from aeonloop.phases.events import ExecutionResult
from aeonloop.prompts.registry import PromptId
from aeonloop.testing import AeonTestStack, ScriptedLLM


def assessment(score: float, converged: bool = False) -> str:
    aligned = score >= 0.95
    return json.dumps(
        {
            "converged": converged,
            "completeness_score": score,
            "coherence_score": score,
            "consistency": {
                "plan_aligned": aligned,
                "step_aligned": aligned,
                "answer_aligned": aligned,
            },
            "reason_codes": [] if aligned else ["incomplete"],
            "summary": f"score {score}",
            "issues": [],
        }
    )


#: A request the loop runs for (two parts: phases.spend), with no constraint to PREPARE.
LOOPED = "Explain photosynthesis, then summarise it"
NO_ISSUES = json.dumps({"issues": [], "summary": "fine"})
PLAN = json.dumps(
    {
        "plan": {
            "goal": "answer",
            "steps": [
                {"step_id": "s1", "description": "Explain it"},
                {"step_id": "s2", "description": "Simplify it"},
            ],
        }
    }
)


def add_a_step() -> Callable[[LLMCall], str]:
    """A refinement that adds one new step per call, so every pass has work to do."""
    added: list[int] = []

    def refine(call: LLMCall) -> str:
        added.append(1)
        step = {"step_id": f"extra{len(added)}", "description": f"Deepen the answer ({len(added)})"}
        return json.dumps({"actions": [{"action_type": "ADD", "new_step": step, "reason": "gap"}]})

    return refine


@asynccontextmanager
async def pipeline(
    settings: BusSettings, llm: LLMAdapter, loop: LoopSettings | None = None
) -> AsyncIterator[AeonClient]:
    """The client of a whole pipeline on `settings` (aeonloop.testing), its keys left for the
    test to look at (the `redis_prefix` fixture clears them)."""
    async with AeonTestStack(llm, settings=settings, loop=loop) as stack:
        yield stack.client


async def ask(settings: BusSettings, llm: LLMAdapter, request: str, **options) -> ExecutionResult:
    loop = options.pop("loop", None)
    async with pipeline(settings, llm, loop) as client:
        return await client.ask(request, timeout=options.pop("timeout", 30), **options)


async def test_offline_model_refines_once_and_converges_in_pass_2(settings: BusSettings) -> None:
    result = await ask(settings, OfflineLLM(), "Explain tides, then summarise them for a child")
    answer = result.final_answer
    assert result.status == "converged"
    assert result.total_passes == 2
    assert result.total_refinements >= 1
    assert not result.degraded
    assert "offline model" in answer.answer_text
    assert answer.metadata["degraded"] is False
    assert result.usage.calls > 0 and result.usage.total_tokens > 0
    assert result.usage.estimated, "no LLM counted the offline model's tokens"
    assert answer.confidence == answer.metadata["execution_passes"][-1]["score"] == 0.96


async def test_converges_in_pass_1(settings: BusSettings) -> None:
    llm = ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: PLAN,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: assessment(0.99, converged=True),
        }
    )
    result = await ask(settings, llm, LOOPED)
    assert (result.status, result.total_passes, result.degraded) == ("converged", 1, False)
    assert llm.calls.count(PromptId.REASONING_STEP_USER) == 2


async def test_llm_saying_converged_is_not_enough(settings: BusSettings) -> None:
    """The host decides from the evidence: a low-scoring 'converged' does not end the loop."""
    llm = ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: PLAN,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: [
                assessment(0.5, converged=True),
                assessment(0.99, converged=True),
            ],
        }
    )
    result = await ask(settings, llm, LOOPED)
    assert result.status == "converged"
    assert result.total_passes == 2


async def test_ttl_exhausted(settings: BusSettings) -> None:
    llm = ScriptedLLM(
        {
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: [
                assessment(0.3),
                assessment(0.6),
                assessment(0.8),
            ],
            PromptId.RECURSIVE_REFINEMENT_USER: add_a_step(),
        }
    )
    result = await ask(settings, llm, LOOPED, max_ttl=2)
    assert result.status == "ttl_exhausted"
    assert result.total_passes == 2
    assert result.ttl_remaining == 0
    assert result.degraded
    assert result.final_answer.ttl_exhausted is True


async def test_stagnation(settings: BusSettings) -> None:
    llm = ScriptedLLM(
        {
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: assessment(0.5),
            PromptId.RECURSIVE_REFINEMENT_USER: add_a_step(),
        }
    )
    result = await ask(settings, llm, LOOPED)
    assert result.status == "stagnated"
    assert result.total_passes == 3
    assert result.degraded


async def test_no_plan_ends_the_loop_path_not_the_run(settings: BusSettings) -> None:
    """A plan the model cannot make ends the loop path: no pass ran, and the draft, which holds
    every check (there are none), is published as it is, the run answered, not failed; the
    outcome names the loop as the part not used (docs/verified-answers.md)."""
    llm = ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: "I cannot plan this.",
            PromptId.SUPERVISOR_REPAIR_JSON_USER: "still no JSON",
        }
    )
    result = await ask(settings, llm, LOOPED)
    assert (result.status, result.total_passes, result.degraded) == ("converged", 0, False)
    metadata = result.final_answer.metadata
    assert metadata["answered_by"] == "draft" and metadata["convergence_status"] == "failed"
    assert metadata["not_used"].startswith("the loop (phases B to D): plan generation failed")
    assert result.final_answer.answer_text.startswith("This answer was produced by Aeon's")


async def test_malformed_json_is_repaired_once(settings: BusSettings) -> None:
    llm = ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: "Here it is: {plan: goal=answer",
            PromptId.SUPERVISOR_REPAIR_JSON_USER: PLAN,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: assessment(0.99, converged=True),
        }
    )
    result = await ask(settings, llm, LOOPED)
    assert (result.status, result.degraded) == ("converged", False)
    assert llm.calls.count(PromptId.SUPERVISOR_REPAIR_JSON_USER) == 1


async def test_llm_error_gives_a_degraded_answer_with_the_reason(settings: BusSettings) -> None:
    llm = ScriptedLLM(
        {
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: LLMError("model endpoint returned 503"),
        }
    )
    result = await ask(settings, llm, LOOPED)
    assert result.status == "failed"
    assert result.degraded
    assert "503" in json.dumps(result.final_answer.metadata)


async def test_synthesis_failure_still_answers(settings: BusSettings) -> None:
    llm = ScriptedLLM({PromptId.ANSWER_SYNTHESIS_USER: LLMError("synthesis model down")})
    result = await ask(settings, llm, LOOPED)
    assert result.degraded
    assert result.final_answer.metadata["degraded"] is True
    assert result.final_answer.answer_text


async def test_handler_crash_is_dead_lettered_and_the_run_still_answered(
    settings: BusSettings,
) -> None:
    def crash(call: LLMCall) -> str:
        raise RuntimeError("bug in a handler")

    llm = ScriptedLLM({PromptId.PASS_EVALUATION_USER: crash})
    result = await ask(settings, llm, LOOPED)
    # The loop path failed before its first pass was recorded; the draft, holding every check
    # (there are none), answers the run, and the outcome says what could not be used.
    assert (result.status, result.degraded) == ("converged", False)
    assert "phase-c gave up" in result.final_answer.metadata["not_used"]
    redis = Redis.from_url(settings.redis_url)
    dead = await redis.xrange(Keys(settings.prefix).dead_letter(0))
    await redis.aclose()
    assert len(dead) == 1
    assert dead[0][1][b"group"] == b"phase-c"
    assert b"bug in a handler" in dead[0][1][b"reason"]


async def test_deadline_exceeded(settings: BusSettings) -> None:
    llm = OfflineLLM(delay=0.4)
    result = await ask(settings, llm, LOOPED, timeout=1.5)
    assert result.status == "deadline_exceeded"
    assert result.degraded


async def test_rules_drive_convergence(settings: BusSettings) -> None:
    from aeonloop.gateway.validation import parse_rules

    rules = parse_rules(
        [
            {
                "id": "mentions-light",
                "description": "must mention light",
                "severity": "fail",
                "weight": 2,
                "check": {"type": "content", "search": "(?i)light"},
            }
        ]
    )
    llm = ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: PLAN,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.REASONING_STEP_USER: "Plants use light to make sugar.",
            PromptId.PASS_EVALUATION_USER: assessment(0.5),
        }
    )
    # effort high: at medium a draft that holds the rule ends the run before the loop
    result = await ask(settings, llm, LOOPED, rules=rules, effort="high")
    assert result.status == "converged", "rules passed: the rubric's low score does not matter"
    assert result.total_passes == 1


async def test_a_failed_rule_is_named_wherever_the_answer_is_shown(settings: BusSettings) -> None:
    """A rule no pass can meet: the run stagnates, and its answer's text, the CLI's output and
    the HTTP API's `degraded_because` each name the rule (id and message) and the exit in words,
    not only "stagnated". The rule is named as a check of the answer the user gets (which is
    checked, critiqued and refined in vain), not only as a rule the last pass failed."""
    from aeonloop.gateway.cli.display import render_human
    from aeonloop.gateway.http.run_steps import degraded_because
    from aeonloop.gateway.validation import parse_rules

    rules = parse_rules(
        [
            {
                "id": "cites-a-source",
                "description": "names its source",
                "severity": "fail",
                "check": {"type": "content", "search": "Source: https?://"},
            }
        ]
    )
    llm = ScriptedLLM(
        {
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.REASONING_STEP_USER: "Plants use light to make sugar.",
            PromptId.PASS_EVALUATION_USER: assessment(0.99, converged=True),
            PromptId.RECURSIVE_REFINEMENT_USER: add_a_step(),
        }
    )
    # effort high: at medium a request with a rule and nothing to use ends on its draft path
    result = await ask(settings, llm, LOOPED, rules=rules, effort="high")

    assert (result.status, result.degraded) == ("stagnated", True)
    metadata = result.final_answer.metadata
    assert [rule["id"] for rule in metadata["failed_rules"]] == ["cites-a-source"]
    assert [c["verdict"] for c in metadata["checks"]] == ["fail"]
    named = "check cites-a-source did not hold: names its source: /Source: https?:/// not found"
    exit_words = "exited early, before converging: stopped improving"
    # Beside the model's answer, in its notes, not in its text (docs/requirements.md, FR-030).
    assert f"C{named[1:]}" in result.final_answer.notes  # a sentence of its own
    assert exit_words in result.final_answer.notes
    assert named not in result.final_answer.answer_text
    because = degraded_because(result)
    assert any(line.startswith(named) for line in because)
    assert f"the loop {exit_words}" in because
    shown = render_human(result.model_dump(mode="json"))
    assert f"  - {named}" in shown and exit_words in shown


#: "aaaa bbbb … zzzz" twenty times, then a `#` that `(\w+\s?)*#` reaches only after trying
#: every way of splitting the words: minutes under `re`, its time bound under `regex`.
CATASTROPHIC_TEXT = " ".join(c * 4 for c in "abcdefghijklmnopqrstuvwxyz") * 20 + "!#"


async def test_a_catastrophic_pattern_fails_its_rule_and_the_worker_keeps_answering(
    settings: BusSettings,
) -> None:
    """Two runs on one worker, one with a rule whose pattern backtracks without end on the
    steps' output: the rule fails saying it ran out of time, that run is answered, and so is
    the other. With the pattern run by `re` in the worker's loop, neither was."""
    from aeonloop.gateway.validation import parse_rules

    rules = parse_rules(
        [
            {
                "id": "catastrophic",
                "description": "has a hash after the words",
                "check": {"type": "content", "search": r"(\w+\s?)*#"},
            }
        ]
    )
    llm = ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: PLAN,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.REASONING_STEP_USER: CATASTROPHIC_TEXT,
            PromptId.PASS_EVALUATION_USER: assessment(0.99, converged=True),
        }
    )
    loop = LoopSettings(max_passes=2, check_pattern_timeout_s=0.2)
    async with pipeline(settings, llm, loop) as client:
        slow, other = await asyncio.gather(
            # effort high: the loop, whose steps' output the pattern is run on.
            client.ask("Explain the alphabet", rules=rules, timeout=60, effort="high"),
            client.ask("Explain the alphabet again", timeout=60),
        )
    assert (other.status, other.degraded) == ("converged", False)
    assert slow.degraded and slow.status != "converged"
    failed = slow.final_answer.metadata["failed_rules"]
    assert [rule["id"] for rule in failed] == ["catastrophic"]
    assert "ran out of its 0.2 s time bound; the check fails" in failed[0]["message"]


async def test_many_requests_in_flight_each_get_their_own_answer(settings: BusSettings) -> None:
    llm = OfflineLLM(delay=0.01)
    async with pipeline(settings, llm) as client:
        requests = [f"Explain topic number {i}, then give an example" for i in range(40)]
        results = await asyncio.gather(*(client.ask(r, timeout=60) for r in requests))
    for request, result in zip(requests, results, strict=True):
        assert request.split(",")[0] in result.final_answer.answer_text
    redis = Redis.from_url(settings.redis_url)
    answers = await redis.xrange(Keys(settings.prefix).stream("answers", 0))
    await redis.aclose()
    assert len(answers) == 40
    assert len({f[b"cid"] for _, f in answers}) == 40


async def test_progress_is_reported(settings: BusSettings) -> None:
    seen: list[Progress] = []
    async with pipeline(settings, OfflineLLM()) as client:
        result = await client.ask(LOOPED, timeout=30, on_progress=seen.append)
    assert all(isinstance(p, Progress) for p in seen)
    assert [p.phase for p in seen][:2] == ["A", "B"] and seen[-1].phase == "E"
    assert {"C", "D"} <= {p.phase for p in seen}
    assert all(len(str(p)) < 300 for p in seen)  # a line, not a run state
    # Every pass has exactly one line, the converging one included.
    passes = [p.pass_number for p in seen if p.pass_number is not None]
    assert passes == list(range(1, result.total_passes + 1))
    # B's plan check and each pass's refinement add up to the run's refinement actions.
    counts = [re.search(r"(\d+) refinement action\(s\)", p.line) for p in seen]
    reported = [int(found.group(1)) for found in counts if found]
    assert len(reported) >= 2 and sum(reported) == result.total_refinements >= 1


def verbose_model(plan: str = PLAN) -> ScriptedLLM:
    """A model that converges in one pass and writes 120,000 characters per step."""
    return ScriptedLLM(
        {
            PromptId.PLAN_GENERATION_USER: plan,
            PromptId.VALIDATION_SEMANTIC_USER: NO_ISSUES,
            PromptId.PASS_EVALUATION_USER: assessment(0.99, converged=True),
            PromptId.REASONING_STEP_USER: "tides " * 20_000,
        }
    )


async def test_long_outputs_are_stored_cut_so_the_run_converges(settings: BusSettings) -> None:
    """A verbose model cannot push the run past AEON_MAX_EVENT_BYTES: outputs are stored cut."""
    llm = verbose_model()
    small = settings.with_(max_event_bytes=60_000)
    result = await ask(small, llm, "Explain tides", loop=LoopSettings(max_step_output_chars=20_000))
    assert (result.status, result.degraded) == ("converged", False)


async def test_whole_long_outputs_stay_out_of_the_events(settings: BusSettings) -> None:
    """Outputs are kept in the run's history, not in its events: 120,000 characters per step,
    kept whole, pass a 60 KB event limit."""
    small = settings.with_(max_event_bytes=60_000)
    loop = LoopSettings(max_step_output_chars=1_000_000)
    result = await ask(small, verbose_model(), "Explain tides", loop=loop)
    assert (result.status, result.degraded) == ("converged", False)


def planning_model() -> ScriptedLLM:
    """A model whose plan, which every later event carries, is about 100,000 characters."""
    steps = [{"step_id": f"s{n}", "description": f"step {n} " * 2_000} for n in range(8)]
    return verbose_model(json.dumps({"plan": {"goal": "answer", "steps": steps}}))


async def test_an_event_that_would_pass_the_size_limit_ends_the_run_with_the_true_reason(
    settings: BusSettings,
) -> None:
    """Not "the request text was lost": the run is answered from the event that was handled."""
    small = settings.with_(max_event_bytes=60_000)
    result = await ask(small, planning_model(), "Explain tides, then their history")
    metadata = result.final_answer.metadata
    assert metadata["reason"] != "request_lost"
    assert "over AEON_MAX_EVENT_BYTES (60000)" in metadata["exit_detail"]
    # The loop path could not go on; the draft (no checks to fail) answers the run.
    assert "over AEON_MAX_EVENT_BYTES (60000)" in metadata["not_used"]
    assert result.final_answer.answer_text.strip()
