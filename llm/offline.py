"""The zero-config default adapter: deterministic replies built from the request, no network.

It answers from `call.prompt_id`'s typed input (never from the rendered prose), so each reply fits
its prompt's contract: JSON prompts get JSON matching their output model, free-form ones get text.
Only the prompts the main job shows (`aeon ask` offline) have replies written here (`_REPLIES`),
readable ones made from the request; every other prompt, and any prompt added later, is answered
from its contract alone (llm.schema_reply). The texts below are model *replies*, i.e. data, not
prompts.

Across a run it behaves like a model that improves once, so the loop visibly refines:

- pass 1: the pass evaluation says completeness 0.85, not converged, and reports one
  low-severity issue because no step output mentions the final review
  step; refinement ADDs that step (REVIEW_STEP) under a fresh id;
- pass 2 on: the evaluation says converged (0.97 / 0.95, all aligned), and finds no issue
  once the executed review step's output (which restates its description) is in the pass.

Verified answers (docs/verified-answers.md): it prepares checks from the constraints a request or a
rule in words states, in the forms the host's own reader reads (`checks.stated`: "three
bullet points", "list three benefits as a bulleted list", "under 100 words", "in lower case",
"mention X"); its plain draft restates the request without meeting them, as a weak model's
one call would; and its refinement of an answer meets those constraints, so a run shows
the answer checked, critiqued and refined with no LLM.

Its final answers say plainly that they come from the offline model and that no LLM was called;
their confidence is the last pass's score (it cannot judge more than the loop measured), and its
token counts are marked estimated (no model counted them).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from aeonloop.checks.patterns import compile_pattern, phrase_pattern
from aeonloop.checks.repairs import repair
from aeonloop.checks.running import run_check
from aeonloop.checks.stated import TITLE_PATTERN, stated_checks, stated_constraints
from aeonloop.checks.types import (
    CaseCheck,
    CountCheck,
    EndsWithCheck,
    ForbiddenWordsCheck,
    JsonCheck,
    PatternCheck,
    PhraseCountCheck,
    StartsWithCheck,
    parse_check,
)
from aeonloop.checks.units import count_units
from aeonloop.exceptions import LLMError
from aeonloop.llm.base import LLMCall, LLMReply, TokenUsage, approx_tokens
from aeonloop.llm.offline_tools import (
    TOOL_WORD,
    first_json_object,
    lower_words,
    repair_tool_call,
    requested_tools,
)
from aeonloop.llm.schema_reply import free_form_reply, schema_reply
from aeonloop.prompts.registry import (
    GOAL_AS_REQUEST,
    AnswerSynthesisInput,
    CritiqueInput,
    DraftAnswerInput,
    PassEvaluationInput,
    PlanGenerationInput,
    PrepareChecksInput,
    PromptId,
    PromptInput,
    ReasoningStepInput,
    RefinementInput,
    RepairJSONInput,
    RepairMissingToolInput,
    RewriteAnswerInput,
    SemanticValidationInput,
    TaskProfileInferenceInput,
    TaskProfileOutput,
    TaskProfileUpdateInput,
    default_registry,
)
from aeonloop.prompts.unified import UnifiedPrompt

MODEL_NAME = "aeon-offline"
#: The step of a plan whose request only asked for tools: the answer is written from them.
TOOL_ANSWER_STEP = "Answer the request from the tools' results"
REVIEW_STEP = "Review the answer for accuracy and completeness"
OFFLINE_NOTICE = "This answer was produced by Aeon's offline model: no LLM was called."

MIN_STEPS, MAX_STEPS = 2, 6
MAX_CRITIQUE_ISSUES = 5
MAX_DESCRIPTION = 200

_CLAUSE_BREAK = re.compile(
    r"(?<=[.!?])\s+"  # sentence ends
    r"|\s*;\s*"
    r"|\s*,\s*(?:and\s+)?then\s+"  # ", then" / ", and then"
    r"|\s+and\s+then\s+",
    re.IGNORECASE,
)
_STEP_ID = re.compile(r"\bs(\d+)\b")
_STEP_MENTION = re.compile(r"\b[st]\d+(?:\.\d+)*\b")  # s1, s2.1; t1 for a tool's step
# "id, severity, message" (also "- id: message"); the severity word is dropped from the message.
_RULE_LINE = re.compile(
    r"^[-*\s]*([^,:\s]+)\s*[,:]?\s*(?:(?:fail|warn|info)\b\s*[,:]?\s*)?(.*)$", re.IGNORECASE
)


class OfflineLLM:
    """LLMAdapter that needs nothing: same call, same reply, every time."""

    family = "offline"
    #: In process: never away.
    outage = None

    def __init__(self, delay: float = 0.0) -> None:
        #: Seconds slept per call: a stand-in for LLM latency in load tests and benchmarks.
        self.delay = delay

    async def complete(self, call: LLMCall) -> LLMReply:
        """Reply from the typed input; LLMError for a prompt id and input it has no reply for.

        A call with a sink (its reply may be published) gets its reply written there in
        chunks of a few words, as a streaming server sends it, the delay spread over them."""
        text = reply_text(call.prompt_id, call.input)
        if call.prompt_id is PromptId.REASONING_STEP_USER:
            text += _files_note(call.prompt)
        if call.sink is None:
            if self.delay > 0:
                await asyncio.sleep(self.delay)
        else:
            pieces = paced(chunks(text))
            for piece in pieces:
                if self.delay > 0:
                    await asyncio.sleep(self.delay / len(pieces))
                await call.sink.write(piece)
        # No model counted these tokens: they are guessed from the text's length, and say so.
        usage = TokenUsage(
            prompt_tokens=approx_tokens(_prompt_length(call)),
            completion_tokens=approx_tokens(len(text)),
            estimated=True,
        )
        return LLMReply(text=text, usage=usage, model=MODEL_NAME)

    async def check(self) -> None:
        """Always ready: the model is this module."""

    async def aclose(self) -> None:
        """Nothing to release."""


#: Words per chunk the offline model writes a streamed reply in.
CHUNK_WORDS = 3
_WORD = re.compile(r"\s*\S+\s*|\s+")


def chunks(text: str, words: int = CHUNK_WORDS) -> list[str]:
    """`text` in pieces of `words` words each (with their spaces), which join to it."""
    found = _WORD.findall(text)
    return ["".join(found[i : i + words]) for i in range(0, len(found), words)] or [text]


#: Writes (and waits) the offline model spreads one streamed reply over at most: a wait and a
#: write a chunk of a long answer was most of a worker's CPU per run at 1,000 runs in flight
#: (python -m bench, concurrency), where a reader sees no difference.
PACED_STEPS = 10


def paced(pieces: list[str], steps: int = PACED_STEPS) -> list[str]:
    """`pieces` joined into at most `steps` in order, which join to the same text."""
    size = -(-len(pieces) // steps)  # ceiling: the fewest pieces a step so the steps suffice
    return ["".join(pieces[i : i + size]) for i in range(0, len(pieces), size)]


def reply_text(prompt_id: PromptId, data: PromptInput) -> str:
    """The offline reply to one prompt (JSON text for the JSON prompts): the prompt's own reply
    where the main job shows it (`_REPLIES`), else one made from its contract (llm.schema_reply),
    so a prompt added to the registry needs nothing written here."""
    definition = default_registry().get_definition(prompt_id)
    if not isinstance(data, definition.input_model):
        detail = f"{prompt_id.value} with {type(data).__name__}"
        raise LLMError(f"the offline model has no reply for {detail}", transient=False)
    handler = _REPLIES.get(prompt_id)
    if handler is not None:
        reply = handler(data)
    elif definition.output_model is not None:
        reply = schema_reply(definition.output_model)
    else:
        reply = free_form_reply(data)
    return reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)


def _files_note(prompt: UnifiedPrompt) -> str:
    """A step's word on the files its prompt gave it, so a run shows they reached the step."""
    files = [
        f"{item.name} ({len(item.content):,} characters)"
        for item in prompt.context
        if item.type == "file"
    ]
    return f" It had the attached file(s) to work from: {', '.join(files)}." if files else ""


def _prompt_length(call: LLMCall) -> int:
    prompt = call.prompt
    context = sum(len(item.content) for item in prompt.context)
    return len(prompt.system_prompt) + len(prompt.instructions) + context


# --------------------------------------------------------------------------------------------
# Text helpers.
# --------------------------------------------------------------------------------------------


def _squash(text: str) -> str:
    return " ".join(text.split())


def _shorten(text: str, limit: int = MAX_DESCRIPTION) -> str:
    text = _squash(text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _sentence(text: str) -> str:
    text = _squash(text).rstrip(" .!?;,")
    return text[:1].upper() + text[1:] if text else text


def linked_clauses(request: str) -> list[tuple[str, bool]]:
    """The request's clauses, in order (sentences, and the parts joined by "then" or ";"), each
    with whether it follows on from the one before ("then": it builds on it)."""
    found: list[tuple[str, bool]] = []
    start, follows = 0, False
    for brk in [*_CLAUSE_BREAK.finditer(request), None]:
        part = _sentence(request[start : brk.start() if brk else len(request)])
        if part:
            follows = follows or part.lower().startswith("then ")  # "; then ..." as well
            found.append((part, follows and bool(found)))
        if brk is not None:
            start, follows = brk.end(), "then" in brk.group(0).lower()
    return found


def clauses(request: str) -> list[str]:
    """The request's clauses, in order: sentences, and the parts joined by "then" or ";"."""
    return [part for part, _ in linked_clauses(request)]


def linked_plan_steps(request: str) -> list[tuple[str, bool]]:
    """2 to MAX_STEPS step descriptions from the request's clauses (extra ones fold into the
    last), each with whether it builds on the step before it."""
    parts = linked_clauses(request) or [(_sentence(request) or "The request", False)]
    if len(parts) < MIN_STEPS:
        subject = parts[0][0]
        parts = [(f"Work out what is asked: {subject}", False), (f"Answer it: {subject}", True)]
    if len(parts) > MAX_STEPS:
        folded = "; ".join(part for part, _ in parts[MAX_STEPS - 1 :])
        parts = [*parts[: MAX_STEPS - 1], (folded, parts[MAX_STEPS - 1][1])]
    return [(_shorten(part), follows) for part, follows in parts]


def _step_ids(text: str) -> list[str]:
    """Step ids (s1, s2.1, ...) mentioned in `text`, first mention first."""
    return list(dict.fromkeys(_STEP_MENTION.findall(text)))


# --------------------------------------------------------------------------------------------
# Replies, one per prompt.
# --------------------------------------------------------------------------------------------

DEFAULT_PROFILE: dict[str, Any] = {
    "reasoning_depth": 3,
    "information_sufficiency": 0.5,
    "expected_tool_usage": "moderate",
    "output_breadth": "moderate",
    "confidence_requirement": "medium",
}


def _profile(data: TaskProfileInferenceInput) -> dict[str, Any]:
    words = len(data.request.split())
    note = (
        f"Offline model (no LLM was called): the default profile for a request of {words} "
        f"word(s) in {len(clauses(data.request))} clause(s)."
    )
    return {**DEFAULT_PROFILE, "raw_inference": note}


def _profile_update(data: TaskProfileUpdateInput) -> dict[str, Any]:
    """Keeps the profile in force: offline, there is no judgement to revise it with."""
    current = first_json_object(data.current_profile) or {}
    kept = {key: current.get(key, value) for key, value in DEFAULT_PROFILE.items()}
    note = "Offline model (no LLM was called): the profile in force is kept unchanged."
    try:
        TaskProfileOutput.model_validate(kept)
    except ValidationError:
        kept, note = DEFAULT_PROFILE, "Offline model (no LLM was called): the default profile."
    return {**kept, "raw_inference": note}


def _plan(goal: str, descriptions: list[tuple[str, bool]]) -> dict[str, Any]:
    """A plan of the given steps: one that follows on from the step before depends on it, the
    others on nothing (they run at once)."""
    steps = [
        {
            "step_id": f"s{number}",
            "description": description,
            "depends_on": [f"s{number - 1}"] if follows else [],
        }
        for number, (description, follows) in enumerate(descriptions, start=1)
    ]
    return {"plan": {"goal": _shorten(goal, 300), "steps": steps}}


def _plan_for_request(data: PlanGenerationInput) -> dict[str, Any]:
    """The request's clauses as steps; before them, a step for each listed tool the request
    asks for (`requested_tools`), whose results every other step is shown."""
    calls = requested_tools(data.request, data.tools)
    if not calls:
        return _plan(data.request, linked_plan_steps(data.request))
    names = {offer.name.lower() for offer, _ in calls}
    rest = [
        (part, follows)
        for part, follows in linked_plan_steps(data.request)
        if not (TOOL_WORD.search(part) and names & set(lower_words(part)))
    ] or [(TOOL_ANSWER_STEP, False)]
    rest[0] = (rest[0][0], False)  # what it followed on from may have been a tool clause
    plan = _plan(data.request, rest)
    tool_ids = [f"t{number}" for number in range(1, len(calls) + 1)]
    for step in plan["plan"]["steps"]:
        step["depends_on"] = [*tool_ids, *step["depends_on"]]
    tool_steps = [
        {
            "step_id": step_id,
            "description": f"Call the tool {offer.name} with {json.dumps(arguments)}",
            "depends_on": [],
            "tool": offer.name,
            "arguments": arguments,
        }
        for step_id, (offer, arguments) in zip(tool_ids, calls, strict=True)
    ]
    plan["plan"]["steps"] = [*tool_steps, *plan["plan"]["steps"]]
    return plan


def _reasoning_step(data: ReasoningStepInput) -> str:
    sentences = [
        f"Step {data.step_id} (pass {data.pass_number}): {_sentence(data.step_description)}.",
        f"Worked offline for the request: {_sentence(_shorten(data.request))}.",
    ]
    if data.goal != GOAL_AS_REQUEST and _squash(data.goal) != _squash(data.request):
        sentences.append(f"Goal: {_sentence(_shorten(data.goal))}.")
    prior = data.prior_outputs.strip()
    sentences.append(
        f"It builds on the earlier steps ({', '.join(_step_ids(prior)) or 'their outputs'})."
        if prior
        else "It is the first step, so it starts from the request alone."
    )
    return " ".join(sentences)


def _semantic_validation(data: SemanticValidationInput) -> dict[str, Any]:
    """A pass without the review step gets one low issue asking for it; anything else is clean."""
    if data.artifact_kind == "pass" and REVIEW_STEP.lower() not in data.artifact.lower():
        issue = {
            "kind": "semantic",
            "severity": "low",
            "description": f"No final review step yet; add one: {REVIEW_STEP}.",
            "step_id": None,
        }
        return {"issues": [issue], "summary": "Offline check: one low-severity gap."}
    return {"issues": [], "summary": f"Offline check: the {data.artifact_kind} fits the request."}


def _assessment(data: PassEvaluationInput) -> dict[str, Any]:
    if data.pass_number < 2:
        return {
            "converged": False,
            "completeness_score": 0.85,
            "coherence_score": 0.9,
            "consistency": {"plan_aligned": True, "step_aligned": True, "answer_aligned": False},
            "reason_codes": ["needs_review"],
            "summary": "Offline assessment: the steps ran once; a review pass is still due.",
        }
    return {
        "converged": True,
        "completeness_score": 0.97,
        "coherence_score": 0.95,
        "consistency": {"plan_aligned": True, "step_aligned": True, "answer_aligned": True},
        "reason_codes": ["complete"],
        "summary": f"Offline assessment: complete and coherent after pass {data.pass_number}.",
    }


def _pass_evaluation(data: PassEvaluationInput) -> dict[str, Any]:
    """The assessment and the pass's validation in one reply, as the two calls give them."""
    check = SemanticValidationInput(
        request=data.request, artifact_kind="pass", artifact=data.step_outputs
    )
    return {**_assessment(data), "issues": _semantic_validation(check)["issues"]}


def _plan_steps_in(plan_json: str) -> list[dict[str, Any]]:
    document = first_json_object(plan_json) or {}
    body = document.get("plan", document)
    steps = body.get("steps", []) if isinstance(body, dict) else []
    return [step for step in steps if isinstance(step, dict)]


def _refinement(data: RefinementInput) -> dict[str, Any]:
    """ADD the review step once, under a fresh id; executed steps are never touched."""
    steps = _plan_steps_in(data.plan)
    descriptions = {_squash(str(step.get("description", ""))).lower() for step in steps}
    if REVIEW_STEP.lower() in descriptions:
        return {"actions": []}
    known = [str(step.get("step_id", "")) for step in steps] + data.executed_step_ids
    numbers = [int(n) for step_id in known for n in _STEP_ID.findall(step_id)]
    new_id = f"s{max(numbers, default=0) + 1}"
    everything = list(dict.fromkeys(step_id for step_id in known if step_id))
    action = {
        "action_type": "ADD",
        "target_step_id": None,
        # The review reads every output there is.
        "new_step": {"step_id": new_id, "description": REVIEW_STEP, "depends_on": everything},
        "reason": "A final review makes the answer complete.",
    }
    return {"actions": [action]}


def _critique(data: CritiqueInput) -> dict[str, Any]:
    issues = []
    for line in data.failed_rules.splitlines():
        match = _RULE_LINE.match(line.strip())
        if not line.strip() or not match:
            continue
        rule_id, detail = match.group(1), _sentence(match.group(2)) or "the rule's check failed"
        issues.append(
            {
                "rule_id": rule_id,
                "problem": f"Rule {rule_id} failed: {detail}.",
                "fix_instruction": f"Revise the output so that rule {rule_id} holds: {detail}.",
                "expected_effect": f"Rule {rule_id} passes on the next pass.",
            }
        )
    return {"issues": issues[:MAX_CRITIQUE_ISSUES]}


def _repair_json(data: RepairJSONInput) -> dict[str, Any]:
    return first_json_object(data.malformed_output) or {}


def _repair_missing_tool(data: RepairMissingToolInput) -> str:
    step = _sentence(_shorten(data.step_description))
    if data.available_tools:
        return f"{step}, using {data.available_tools[0]} instead of {data.tool_name}."
    return f"{step}, by reasoning alone ({data.tool_name} is not available)."


def _answer(data: AnswerSynthesisInput) -> dict[str, Any]:
    results = data.results_summary.strip() or "(no step results were recorded)"
    sections = [
        OFFLINE_NOTICE + " It composes the work the loop did rather than adding knowledge.",
        f"Request: {_squash(data.request)}",
        f"Step results:\n{results}",
    ]
    plan = "\n".join(  # a goal given as the request's own words is the request, shown above
        line for line in data.plan_summary.strip().splitlines() if GOAL_AS_REQUEST not in line
    )
    if plan:
        sections.append(f"Plan:\n{plan}")
    notes = (
        f"convergence: {data.convergence_status}; passes: {data.total_passes}; "
        f"refinement actions: {data.total_refinements}; ttl remaining: {data.ttl_remaining}"
    )
    if data.missing_fields:
        notes += f"; missing: {', '.join(data.missing_fields)}"
    return {
        "answer_text": "\n\n".join(sections),
        "confidence": _confidence(data),
        "used_step_ids": _step_ids(data.results_summary),
        "notes": notes,
    }


def _confidence(data: AnswerSynthesisInput) -> float:
    """What an answer that only composes the step results can claim: the score the loop gave
    those results in its last pass, and nothing when there are no results to compose."""
    return data.last_pass_score if data.results_summary.strip() else 0.0


# --------------------------------------------------------------------------------------------
# Verified answers: PREPARE, the draft, REFINE.
# --------------------------------------------------------------------------------------------


def _prepare(data: PrepareChecksInput) -> dict[str, Any]:
    """Checks from each rule in words and from the request's own constraints: what
    `stated_checks` reads in each, as the host itself does."""
    return {"checks": stated_checks(data.request, data.rules_in_words)}


def _draft(data: DraftAnswerInput) -> str:
    """One plain call's answer: the request restated, its constraints not met (a weak model's
    draft, which the loop and the refinement then improve on)."""
    return f"{OFFLINE_NOTICE} The request was: {_sentence(_shorten(data.request))}."


def _rewrite(data: RewriteAnswerInput) -> str:
    """The answer with the constraints the request and the failed checks state met, each by the
    smallest change that meets it; everything else kept."""
    text = data.answer.strip()
    wanted: dict[tuple[str, str], dict[str, Any]] = {}
    # The request's word first; an issue also quotes what a check found ("2 bullet lines"),
    # which must not count as a second constraint of the same kind.
    for _, _, check in stated_constraints(data.request) + stated_constraints(data.failed_checks):
        key = (check["type"], str(check.get("unit") or check.get("phrase") or check.get("pattern")))
        wanted.setdefault(key, check)
    for check in sorted(wanted.values(), key=_refine_order):
        text = _meet(text, check)
    return text


def _refine_order(check: dict[str, Any]) -> int:
    """Edits of words first, then case, then the shape (bullets), then cuts to a length (line
    by line, so the shape stays), and JSON, which wraps the whole, last."""
    if check["type"] == "json":
        return 4
    if check["type"] == "count":
        return 2 if check["unit"] == "bullets" else 3
    return 1 if check["type"] == "case" else 0


def _meet(text: str, check: dict[str, Any]) -> str:
    """The text changed as little as meets `check`, judged as the host judges it
    (aeonloop.checks): a text that holds the check already is kept as it is, and so is one no
    change of the offline model meets (a count of sentences, a language)."""
    try:
        made = parse_check(check)
    except ValueError:  # a constraint no check can hold ("under 0 words")
        return text
    if run_check(made, text).held:
        return text
    fixed, applied = repair(text, [made])  # what the host would fix, fixed alike
    if applied:
        return fixed
    if isinstance(made, PatternCheck):
        return _meet_pattern(made, text)
    if isinstance(made, PhraseCountCheck):
        for _ in range(made.min or 0):
            text = f"{text} {made.phrase}"
            if run_check(made, text).held:
                break
        return text
    if isinstance(made, StartsWithCheck):
        return f"{made.text} {text}"
    if isinstance(made, EndsWithCheck):
        return f"{text} {made.text}"
    if isinstance(made, ForbiddenWordsCheck):
        for word in made.words:
            pattern = phrase_pattern(word, whole_word=True)
            text = compile_pattern(pattern, case_sensitive=made.case_sensitive).sub("", text)
        return _squash(text)
    if isinstance(made, CaseCheck):
        return text.lower() if made.case == "lower" else text.upper()
    if isinstance(made, JsonCheck):
        return json.dumps({"answer": text}, ensure_ascii=False)
    if isinstance(made, CountCheck) and made.unit == "bullets":
        return _as_bullets(text, made.max or made.min or 1)
    if isinstance(made, CountCheck) and made.unit == "words" and made.max is not None:
        return _first_words(text, made.max)
    return text


def _meet_pattern(check: PatternCheck, text: str) -> str:
    """A pattern that must not occur, taken out ("no commas"); a title in <<double angular
    brackets>> written above the text. Any other pattern is left unmet: the offline model
    cannot write text to match a pattern it does not know."""
    if not check.present:
        found = compile_pattern(check.pattern, case_sensitive=check.case_sensitive)
        return _squash(found.sub("", text))
    if check.pattern == TITLE_PATTERN:
        return f"<<Offline answer>>\n\n{text}"
    return text


def _first_words(text: str, most: int) -> str:
    """The text cut to at most `most` words as the host counts them (a piece such as "e.g." or
    "a/b" is two): a list keeps its items alone, each line its first words, a fair share of
    `most` each, so a list stays a list of as many lines."""
    lines = [line for line in text.splitlines() if line.strip()]
    items = [line for line in lines if _LIST_ITEM.match(line)]
    lines = items or lines
    share = max(1, most // max(1, len(lines)))
    kept = [_line_words(line, share) for line in lines]
    while kept and count_units("words", "\n".join(kept)) > most:
        kept.pop()
    return "\n".join(kept)


_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def _line_words(line: str, most: int) -> str:
    """A line's first pieces holding at most `most` words, its list marker kept."""
    marker = _LIST_ITEM.match(line)
    start = marker.group(0) if marker else ""
    pieces = line[len(start) :].split()[:most]
    while pieces and count_units("words", " ".join(pieces)) > most:
        pieces.pop()
    return start + " ".join(pieces)


def _as_bullets(text: str, n: int) -> str:
    """`n` bullet lines, from the text's sentences (the last one takes what is left)."""
    plain = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s+", "", line) for line in text.splitlines()]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", "\n".join(plain)) if s.strip()]
    sentences += ["(nothing more to say)"] * max(0, n - len(sentences))
    items = [*sentences[: n - 1], " ".join(sentences[n - 1 :])]
    return "\n".join(f"- {_squash(item)}" for item in items)


_Handler = Callable[[Any], str | dict[str, Any]]

#: The prompts the main job shows (`aeon ask` offline: the profile's note, the plan, the steps,
#: the passes' verdicts, the refinement, the checks, the draft and the answer) or acts on (the
#: repairs of a tool call), each answered readably from its input. Every other prompt's reply
#: is made from its contract (`reply_text`).
_REPLIES: dict[PromptId, _Handler] = {
    PromptId.TASKPROFILE_INFERENCE_USER: _profile,
    PromptId.TASKPROFILE_UPDATE_USER: _profile_update,
    PromptId.PLAN_GENERATION_USER: _plan_for_request,
    PromptId.REASONING_STEP_USER: _reasoning_step,
    PromptId.VALIDATION_SEMANTIC_USER: _semantic_validation,
    PromptId.PASS_EVALUATION_USER: _pass_evaluation,
    PromptId.RECURSIVE_REFINEMENT_USER: _refinement,
    PromptId.RULE_CRITIQUE_USER: _critique,
    PromptId.SUPERVISOR_REPAIR_JSON_USER: _repair_json,
    PromptId.SUPERVISOR_REPAIR_TOOLCALL_USER: repair_tool_call,
    PromptId.SUPERVISOR_REPAIR_MISSINGTOOL_USER: _repair_missing_tool,
    PromptId.ANSWER_SYNTHESIS_USER: _answer,
    PromptId.CHECKS_PREPARE_USER: _prepare,
    PromptId.ANSWER_DRAFT_USER: _draft,
    PromptId.ANSWER_REWRITE_USER: _rewrite,
}
