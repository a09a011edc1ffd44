"""OfflineLLM: every prompt's contract, determinism, and the refine-once-then-converge run."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from aeonloop.checks.vocabulary import described
from aeonloop.llm.base import LLMAdapter, LLMError
from aeonloop.llm.offline import _REPLIES, REVIEW_STEP, OfflineLLM, linked_plan_steps
from aeonloop.llm.schema_reply import OFFLINE_TEXT, free_form_reply, schema_reply
from aeonloop.prompts import registry as r
from aeonloop.prompts.registry import PromptId

REQUEST = "Compare the two sorting algorithms, then pick the faster one; explain why."

SYSTEM = r.SystemPromptInput(agent="offline")

SAMPLES: dict[PromptId, r.PromptInput] = {
    PromptId.TASKPROFILE_INFERENCE_USER: r.TaskProfileInferenceInput(request=REQUEST),
    PromptId.TASKPROFILE_UPDATE_USER: r.TaskProfileUpdateInput(
        request=REQUEST,
        current_profile=json.dumps({"reasoning_depth": 4, "output_breadth": "broad"}),
        evidence="not converged",
    ),
    PromptId.PLAN_GENERATION_USER: r.PlanGenerationInput(request=REQUEST),
    PromptId.REASONING_STEP_USER: r.ReasoningStepInput(
        request=REQUEST,
        goal=REQUEST,
        step_id="s2",
        step_description="Pick the faster one",
        prior_outputs="s1: compared them",
        pass_number=1,
    ),
    PromptId.VALIDATION_SEMANTIC_USER: r.SemanticValidationInput(
        request=REQUEST, artifact_kind="pass", artifact="s1: compared"
    ),
    PromptId.CONVERGENCE_ASSESSMENT_USER: r.ConvergenceAssessmentInput(
        request=REQUEST, goal=REQUEST, pass_number=1, step_outputs="s1: compared"
    ),
    PromptId.PASS_EVALUATION_USER: r.PassEvaluationInput(
        request=REQUEST, goal=REQUEST, pass_number=1, step_outputs="s1: compared"
    ),
    PromptId.RECURSIVE_PLAN_GENERATION_USER: r.RecursivePlanInput(
        request=REQUEST, parent_goal=REQUEST
    ),
    PromptId.RECURSIVE_SUBPLAN_GENERATION_USER: r.RecursiveSubplanInput(
        request=REQUEST, parent_step_id="s1", parent_step_description="Measure both. Compare."
    ),
    PromptId.RECURSIVE_REFINEMENT_USER: r.RefinementInput(
        request=REQUEST,
        plan=json.dumps({"goal": "g", "steps": [{"step_id": "s1", "description": "a"}]}),
        issues="no review",
        executed_step_ids=["s1"],
    ),
    PromptId.SUPERVISOR_REPAIR_JSON_USER: r.RepairJSONInput(
        expected_schema="{}", malformed_output='Sure! {"a": 1,} done', error="trailing comma"
    ),
    PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER: r.RepairToolCallInput(
        tool_name="search", malformed_call="search(q", error="unclosed"
    ),
    PromptId.SUPERVISOR_REPAIR_PLAN_USER: r.RepairPlanInput(
        request=REQUEST, plan="{broken", error="not JSON"
    ),
    PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER: r.RepairMissingToolInput(
        tool_name="calc", available_tools=["python"], step_description="Add numbers"
    ),
    PromptId.ANSWER_SYNTHESIS_USER: r.AnswerSynthesisInput(
        request=REQUEST,
        convergence_status="converged",
        total_passes=2,
        total_refinements=1,
        ttl_remaining=2,
        last_pass_score=0.96,
        plan_summary="s1 compare; s2 pick; s3 explain",
        results_summary="s1: quicksort vs mergesort\ns3: quicksort is faster\ns3.1: on average",
    ),
    PromptId.RULE_CRITIQUE_USER: r.CritiqueInput(
        request=REQUEST,
        artifact="answer",
        failed_rules="R1, fail, must mention complexity\n\n- R2: warn, cite a source",
    ),
}
SAMPLES.update(
    {
        PromptId.CHECKS_PREPARE_USER: r.PrepareChecksInput(
            request=REQUEST + " Answer in three bullet points.",
            rules_in_words="- r.name: mentions Quicksort",
            check_types=described(),
        ),
        PromptId.ANSWER_DRAFT_USER: r.DraftAnswerInput(request=REQUEST),
        PromptId.ANSWER_REWRITE_USER: r.RewriteAnswerInput(
            request=REQUEST + " Answer in three bullet points.",
            answer="Quicksort wins. It is faster on average. Mergesort is stable.",
            failed_checks="- [request.bullets] exactly 3 bullet points",
        ),
    }
)
SAMPLES.update({prompt_id: SYSTEM for prompt_id in PromptId if prompt_id.endswith("_SYSTEM")})

REGISTRY = r.default_registry()


async def reply_json(make_call, prompt_id: PromptId, data: r.PromptInput) -> dict:
    reply = await OfflineLLM().complete(make_call(prompt_id, data))
    return json.loads(reply.text)


@pytest.mark.parametrize("prompt_id", list(PromptId), ids=lambda p: p.value)
def test_samples_are_the_registered_input_models(prompt_id):
    assert type(SAMPLES[prompt_id]) is REGISTRY.get_definition(prompt_id).input_model


@pytest.mark.parametrize("prompt_id", list(PromptId), ids=lambda p: p.value)
async def test_reply_fits_the_prompt_contract(make_call, prompt_id):
    data = SAMPLES[prompt_id]
    call = make_call(prompt_id, data, instructions=REGISTRY.get_prompt(prompt_id, data))

    reply = await OfflineLLM().complete(call)

    assert reply.text.strip()
    assert reply.model == "aeon-offline"
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert reply.usage.estimated, "no model counted these tokens: they are a length estimate"
    if REGISTRY.get_definition(prompt_id).is_json:
        REGISTRY.validate_output(prompt_id, reply.text)


@pytest.mark.parametrize("prompt_id", list(PromptId), ids=lambda p: p.value)
async def test_replies_are_deterministic(make_call, prompt_id):
    call = make_call(prompt_id, SAMPLES[prompt_id])

    first, second = await OfflineLLM().complete(call), await OfflineLLM().complete(call)

    assert first == second


async def test_mismatched_input_is_an_error(make_call):
    call = make_call(PromptId.PLAN_GENERATION_USER, SAMPLES[PromptId.ANSWER_SYNTHESIS_USER])

    with pytest.raises(LLMError, match="PLAN_GENERATION_USER"):
        await OfflineLLM().complete(call)


def test_is_an_adapter_of_its_own_family():
    adapter = OfflineLLM()
    assert isinstance(adapter, LLMAdapter)
    assert adapter.family == "offline"


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        (
            "Compare A and B, then pick one; explain why.",
            ["Compare A and B", "Pick one", "Explain why"],
        ),
        (
            "Read it. Summarise it and then translate it!",
            ["Read it", "Summarise it", "Translate it"],
        ),
        ("What is 2+2?", ["Work out what is asked: What is 2+2", "Answer it: What is 2+2"]),
        ("a. b. c. d. e. f. g. h.", ["A", "B", "C", "D", "E", "F; G; H"]),
    ],
)
def test_plan_steps_follow_the_request_clauses(request_text, expected):
    assert [step for step, _ in linked_plan_steps(request_text)] == expected


async def test_plan_has_sequential_ids_and_the_request_as_goal(make_call):
    body = await reply_json(
        make_call, PromptId.PLAN_GENERATION_USER, SAMPLES[PromptId.PLAN_GENERATION_USER]
    )

    plan = r.PlanGenerationOutput.model_validate(body).plan
    assert plan.goal == REQUEST
    assert [step.step_id for step in plan.steps] == ["s1", "s2", "s3"]
    assert plan.steps[1].description == "Pick the faster one"
    # "Compare ..., then pick ...; explain why.": the second builds on the first, the third
    # stands apart (a ";" break), so it runs beside them.
    assert [step.depends_on for step in plan.steps] == [[], ["s1"], []]


async def test_reasoning_step_restates_the_step(make_call):
    data = SAMPLES[PromptId.REASONING_STEP_USER]
    reply = await OfflineLLM().complete(make_call(PromptId.REASONING_STEP_USER, data))

    assert reply.text.startswith("Step s2 (pass 1): Pick the faster one.")
    assert "s1" in reply.text


async def test_profile_is_the_default_and_says_offline(make_call):
    data = SAMPLES[PromptId.TASKPROFILE_INFERENCE_USER]
    profile = r.TaskProfileOutput.model_validate(
        await reply_json(make_call, PromptId.TASKPROFILE_INFERENCE_USER, data)
    )

    assert (profile.reasoning_depth, profile.information_sufficiency) == (3, 0.5)
    assert profile.expected_tool_usage == "moderate" and profile.output_breadth == "moderate"
    assert profile.confidence_requirement == "medium"
    assert "offline" in profile.raw_inference.lower()


async def test_profile_update_keeps_the_profile_in_force(make_call):
    data = SAMPLES[PromptId.TASKPROFILE_UPDATE_USER]
    body = await reply_json(make_call, PromptId.TASKPROFILE_UPDATE_USER, data)

    assert body["reasoning_depth"] == 4 and body["output_breadth"] == "broad"
    assert body["information_sufficiency"] == 0.5


async def test_profile_update_replaces_an_invalid_profile_with_the_default(make_call):
    data = r.TaskProfileUpdateInput(
        request=REQUEST, current_profile='{"reasoning_depth": 9}', evidence="e"
    )
    body = await reply_json(make_call, PromptId.TASKPROFILE_UPDATE_USER, data)

    assert body["reasoning_depth"] == 3


async def test_the_loop_refines_once_then_converges(make_call):
    """Pass 1: one low issue, not converged, refinement adds the review step; pass 2: converged.
    Each pass is judged and validated by one call (PASS_EVALUATION_USER)."""
    evaluation = r.PassEvaluationInput
    pass_1 = r.PassEvaluationOutput.model_validate(
        await reply_json(
            make_call,
            PromptId.PASS_EVALUATION_USER,
            evaluation(request=REQUEST, goal=REQUEST, pass_number=1, step_outputs="s1: compared"),
        )
    )
    [issue] = pass_1.issues
    assert issue.severity == "low" and REVIEW_STEP in issue.description
    assert pass_1.converged is False and pass_1.completeness_score == 0.85

    plan_check = await reply_json(
        make_call,
        PromptId.VALIDATION_SEMANTIC_USER,
        r.SemanticValidationInput(request=REQUEST, artifact_kind="plan", artifact="s1 compare"),
    )
    assert plan_check["issues"] == []

    plan = {"plan": {"goal": "g", "steps": [{"step_id": "s1", "description": "a"}]}}
    refinement = await reply_json(
        make_call,
        PromptId.RECURSIVE_REFINEMENT_USER,
        r.RefinementInput(
            request=REQUEST,
            plan=json.dumps(plan),
            issues=issue.description,
            executed_step_ids=["s1", "s2"],
        ),
    )
    [action] = r.RefinementOutput.model_validate(refinement).actions
    assert action.action_type == "ADD"
    assert action.new_step is not None
    assert (action.new_step.step_id, action.new_step.description) == ("s3", REVIEW_STEP)
    assert action.new_step.depends_on == ["s1", "s2"], "the review reads every output"

    review_output = f"Step s3 (pass 2): {REVIEW_STEP}."
    second = r.PassEvaluationOutput.model_validate(
        await reply_json(
            make_call,
            PromptId.PASS_EVALUATION_USER,
            evaluation(request=REQUEST, goal=REQUEST, pass_number=2, step_outputs=review_output),
        )
    )
    assert second.issues == [] and second.converged is True
    assert (second.completeness_score, second.coherence_score) == (0.97, 0.95)
    assert all(second.consistency.model_dump().values())


@pytest.mark.parametrize(
    "prompt_id", [p for p in PromptId if p not in _REPLIES], ids=lambda p: p.value
)
async def test_a_prompt_without_a_reply_of_its_own_is_answered_from_its_contract(
    make_call, prompt_id
):
    """Only the main job's prompts have replies written for them: the others' replies are
    made from their output model (or a sentence, for a free-form prompt)."""
    data = SAMPLES[prompt_id]
    reply = await OfflineLLM().complete(make_call(prompt_id, data))

    model = REGISTRY.get_definition(prompt_id).output_model
    if model is None:
        assert reply.text == free_form_reply(data) and reply.text.startswith(OFFLINE_TEXT)
    else:
        assert json.loads(reply.text) == schema_reply(model)


@pytest.mark.parametrize("prompt_id", list(PromptId), ids=lambda p: p.value)
def test_every_prompt_gets_a_valid_reply_from_its_schema(prompt_id):
    """The schema path answers every registered prompt, so a new prompt needs no reply written
    for it offline: the reply fits the output model, and is one a session accepts (no text of
    the prompt's own, ids clean)."""
    from aeonloop.prompts.echo import unusable_reply

    definition = REGISTRY.get_definition(prompt_id)
    if definition.output_model is None:
        assert free_form_reply(SAMPLES[prompt_id]).startswith(OFFLINE_TEXT)
        return
    output = REGISTRY.validate_output(prompt_id, json.dumps(schema_reply(definition.output_model)))
    assert unusable_reply(output, REGISTRY) is None


def test_the_schema_reply_fills_what_the_schema_asks_for():
    plan = schema_reply(r.PlanGenerationOutput)["plan"]
    assert plan["steps"] == [
        {
            "step_id": "s1",
            "description": OFFLINE_TEXT,
            "depends_on": None,
            "tool": None,
            "arguments": None,
        }
    ], "a plan needs a step (minItems 1); an optional field is null"
    profile = r.TaskProfileOutput.model_validate(schema_reply(r.TaskProfileOutput))
    assert (profile.reasoning_depth, profile.expected_tool_usage) == (1, "none"), (
        "a range's lower bound, an enum's first member"
    )
    assert schema_reply(r.RefinementOutput) == {"actions": []}


async def test_refinement_adds_nothing_when_the_review_step_exists(make_call):
    plan = {
        "steps": [
            {"step_id": "s1", "description": "a"},
            {"step_id": "s2", "description": REVIEW_STEP},
        ]
    }
    data = r.RefinementInput(request=REQUEST, plan=json.dumps(plan), issues="x")

    body = await reply_json(make_call, PromptId.RECURSIVE_REFINEMENT_USER, data)

    assert body == {"actions": []}


async def test_critique_names_one_issue_per_failed_rule_at_most_five(make_call):
    lines = "\n".join(f"R{n}, fail, rule {n} text" for n in range(1, 8))
    data = r.CritiqueInput(request=REQUEST, artifact="a", failed_rules=lines)

    body = await reply_json(make_call, PromptId.RULE_CRITIQUE_USER, data)

    assert [issue["rule_id"] for issue in body["issues"]] == ["R1", "R2", "R3", "R4", "R5"]
    sample = await reply_json(
        make_call, PromptId.RULE_CRITIQUE_USER, SAMPLES[PromptId.RULE_CRITIQUE_USER]
    )
    assert [issue["rule_id"] for issue in sample["issues"]] == ["R1", "R2"]
    assert sample["issues"][0]["problem"] == "Rule R1 failed: Must mention complexity."


@pytest.mark.parametrize(
    ("prompt_id", "data", "expected"),
    [
        (
            PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER,
            r.RepairToolCallInput(tool_name="f", malformed_call='f(x, [1, {"a": 2', error="e"),
            'f(x, [1, {"a": 2}])',
        ),
        (
            PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER,
            r.RepairMissingToolInput(tool_name="calc", step_description="add them"),
            "Add them, by reasoning alone (calc is not available).",
        ),
    ],
)
async def test_free_form_repairs(make_call, prompt_id, data, expected):
    reply = await OfflineLLM().complete(make_call(prompt_id, data))

    assert reply.text == expected


@pytest.mark.parametrize(
    ("malformed", "expected"),
    [
        ('Here: {"a": 1,} ok', {"a": 1}),
        ('```json\n{"plan": {"goal": "g"}}\n```', {"plan": {"goal": "g"}}),
        ("no json at all", {}),
        ('[1, 2] then {"b": [true]}', {"b": [True]}),
    ],
)
async def test_repair_json_echoes_the_object(make_call, malformed, expected):
    data = r.RepairJSONInput(expected_schema="{}", malformed_output=malformed, error="e")

    assert await reply_json(make_call, PromptId.SUPERVISOR_REPAIR_JSON_USER, data) == expected


async def test_answer_says_offline_and_composes_the_results(make_call):
    data = SAMPLES[PromptId.ANSWER_SYNTHESIS_USER]
    answer = r.FinalAnswerOutput.model_validate(
        await reply_json(make_call, PromptId.ANSWER_SYNTHESIS_USER, data)
    )

    assert "offline model" in answer.answer_text and "no LLM was called" in answer.answer_text
    assert "s3: quicksort is faster" in answer.answer_text
    assert answer.confidence == 0.96, "the last pass's score: what the loop measured"
    assert answer.used_step_ids == ["s1", "s3", "s3.1"]


async def test_delay_stands_in_for_latency_without_blocking(make_call):
    adapter = OfflineLLM(delay=0.1)
    call = make_call(PromptId.PLAN_GENERATION_USER, SAMPLES[PromptId.PLAN_GENERATION_USER])
    started = time.monotonic()

    await asyncio.gather(*(adapter.complete(call) for _ in range(10)))

    assert 0.1 <= time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    ("fields", "confidence"),
    [
        ({"last_pass_score": 0.875}, 0.875),  # a run that stopped short: its lower score
        ({"last_pass_score": 0.0, "total_passes": 0}, 0.0),  # no pass ran, nothing measured
        ({"results_summary": ""}, 0.0),  # no results to compose: nothing to be confident in
    ],
    ids=["not converged", "no pass", "no results"],
)
async def test_answer_confidence_follows_the_run(make_call, fields, confidence):
    """Never a fixed placeholder: the offline model claims what the run it is given measured."""
    sample = SAMPLES[PromptId.ANSWER_SYNTHESIS_USER]
    data = sample.model_copy(update={"convergence_status": "max_passes", **fields})
    answer = r.FinalAnswerOutput.model_validate(
        await reply_json(make_call, PromptId.ANSWER_SYNTHESIS_USER, data)
    )

    assert answer.confidence == confidence


# ---- verified answers: PREPARE, the draft, REFINE -------------------------------------------


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        (
            "Name three teas in three bullet points and mention Darjeeling twice.",
            [
                {
                    "rule_id": "request.bullets",
                    "description": "exactly 3 bullet points",
                    "check": {"type": "count", "unit": "bullets", "min": 3, "max": 3},
                },
                {
                    "rule_id": "request.mentions-darjeeling",
                    "description": "mentions Darjeeling at least 2 times",
                    "check": {
                        "type": "phrase_count",
                        "phrase": "Darjeeling",
                        "min": 2,
                        "max": None,
                    },
                },
            ],
        ),
        (
            "Describe tea in under 100 words.",
            [
                {
                    "rule_id": "request.words",
                    "description": "at most 99 words",
                    "check": {"type": "count", "unit": "words", "min": None, "max": 99},
                }
            ],
        ),
        ('Start with "Tea" and avoid the word "very".', None),
        (  # issue 40: the count stated apart from its unit
            "List three benefits of exercise as a bulleted list",
            [
                {
                    "rule_id": "request.bullets",
                    "description": "exactly 3 bullet points",
                    "check": {"type": "count", "unit": "bullets", "min": 3, "max": 3},
                }
            ],
        ),
        (
            "Wrap your entire response in double quotes.",
            [
                {"rule_id": "request.quoted", "description": "wrapped in double quotes", "check": c}
                for c in ({"type": "starts_with", "text": '"'}, {"type": "ends_with", "text": '"'})
            ],
        ),
        ("What is the capital of France?", []),
    ],
)
async def test_prepare_reads_the_requests_own_constraints(make_call, request_text, expected):
    data = r.PrepareChecksInput(request=request_text, check_types=described())
    body = await reply_json(make_call, PromptId.CHECKS_PREPARE_USER, data)
    if expected is None:  # only the kinds, in the order the request states them
        kinds = [c["check"]["type"] for c in body["checks"]]
        assert kinds == ["starts_with", "forbidden_words"]
    else:
        assert body["checks"] == expected


async def test_prepare_maps_a_rule_in_words_to_its_id(make_call):
    data = r.PrepareChecksInput(
        request="Tell me about Lisbon.",
        rules_in_words="- r.city: mentions Lisbon\n- r.tone: be friendly",
        check_types=described(),
    )
    body = await reply_json(make_call, PromptId.CHECKS_PREPARE_USER, data)
    assert [(c["rule_id"], c["check"]["phrase"]) for c in body["checks"]] == [("r.city", "Lisbon")]


async def test_the_draft_restates_the_request_without_meeting_it(make_call):
    reply = await OfflineLLM().complete(
        make_call(PromptId.ANSWER_DRAFT_USER, r.DraftAnswerInput(request="List 3 teas."))
    )
    assert "List 3 teas" in reply.text and "offline model" in reply.text
    assert not any(line.startswith("- ") for line in reply.text.splitlines())


async def test_refine_meets_the_stated_constraints_and_keeps_the_rest(make_call):
    answer = "Green tea is mild. Black tea is strong. Oolong sits between them."
    data = r.RewriteAnswerInput(
        request="Name teas in three bullet points and mention Assam.",
        answer=answer,
        failed_checks="- [request.bullets] three bullet points",
    )
    reply = await OfflineLLM().complete(make_call(PromptId.ANSWER_REWRITE_USER, data))
    lines = reply.text.splitlines()
    assert len(lines) == 3 and all(line.startswith("- ") for line in lines)
    assert "Assam" in reply.text
    for sentence in ("Green tea is mild.", "Black tea is strong.", "Oolong sits between them"):
        assert sentence in reply.text


async def test_rewrite_cuts_to_a_word_limit_line_by_line_keeping_the_list(make_call):
    """A list cut to a word limit stays a list of as many items: each keeps its first words."""
    data = r.RewriteAnswerInput(
        request="Name fruits in three bullet points, in under 10 words.",
        answer="Fruits:\n- apples are crisp and sweet\n- pears are soft\n- plums are tart and dark",
        failed_checks="- at most 9 words",
    )
    reply = await OfflineLLM().complete(make_call(PromptId.ANSWER_REWRITE_USER, data))
    assert reply.text.splitlines() == ["- apples are crisp", "- pears are soft", "- plums are tart"]


def test_a_streamed_reply_is_paced_in_a_few_steps_that_join_to_it() -> None:
    """The offline model writes a long reply in at most PACED_STEPS writes (a wait and a write
    a chunk cost a worker most of its CPU per run), in order, joining to the reply."""
    from aeonloop.llm.offline import PACED_STEPS, chunks, paced

    text = " ".join(f"word{i}" for i in range(301))
    steps = paced(chunks(text))
    assert 1 < len(steps) <= PACED_STEPS and "".join(steps) == text
    assert paced(["only"]) == ["only"]


async def test_rewrite_meets_the_newer_forms_the_host_reads(make_call):
    """No commas, a title marker, lower case and an exact ending: the offline model meets each,
    the host's own lossless fixes first (checks.repairs)."""
    data = r.RewriteAnswerInput(
        request=(
            "Describe tea in all lowercase letters. Do not use any commas. Your answer must "
            "contain a title, wrapped in double angular brackets, such as <<poem of joy>>. End "
            "your answer with 'Any other questions?'"
        ),
        answer="Tea is a drink, made from leaves. It is Popular.",
        failed_checks="",
    )
    reply = await OfflineLLM().complete(make_call(PromptId.ANSWER_REWRITE_USER, data))
    assert "," not in reply.text
    assert reply.text.startswith("<<") and ">>" in reply.text
    assert reply.text == reply.text.lower()
    assert reply.text.endswith("any other questions?")
    assert "tea is a drink made from leaves" in reply.text
