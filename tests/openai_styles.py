"""A stand-in for a real model behind an OpenAI-compatible server, in each reply style seen in use.

`PipelineModel` reads each request the way a server would (the XML prompt in the one user
message), recognises which of Aeon's prompts it is from the registry's own templates, and answers
it with a reply that fits, so a whole run can go through. A style then dresses that reply the way
a given server or model does: reasoning blocks (DeepSeek-R1, Qwen3), a separate
`reasoning_content` field (vLLM, DeepSeek's API), fences and prose, Python-ish JSON, the length
limit, empty replies, rate limits, server errors, no structured output, no usage, refusals, and a
small context window, and a model that copies its prompt's examples and instructions back. Every
reply is streamed when the call asks (openai_fake), so a style can also be timed: a reply that
stalls before its first token or in its middle, one written slowly, servers that refuse or
ignore streaming, and one that cuts a stream short when another call comes (llama-cpp-python's).
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openai_fake import Planned, Seen, completion, error_body

from aeonloop.prompts.registry import PromptId, default_registry

PROFILE = {
    "reasoning_depth": 3,
    "information_sufficiency": 0.7,
    "expected_tool_usage": "minimal",
    "output_breadth": "moderate",
    "confidence_requirement": "medium",
    "raw_inference": "A few connected steps; the request gives what is needed.",
}
PLAN = {
    "plan": {
        "goal": "Explain why the sea has tides",
        "steps": [
            {"step_id": "s1", "description": "Explain how the Moon's gravity pulls the oceans"},
            {"step_id": "s2", "description": "Summarise it in two sentences for a child"},
        ],
    }
}
ASSESSMENT = {
    "converged": True,
    "completeness_score": 0.97,
    "coherence_score": 0.95,
    "consistency": {"plan_aligned": True, "step_aligned": True, "answer_aligned": True},
    "reason_codes": [],
    "summary": "Both steps are done and fit together.",
    "issues": [],
}
ANSWER = {
    "answer_text": "Tides happen because the Moon's gravity pulls the oceans towards it.",
    "confidence": 0.9,
    "used_step_ids": ["s1", "s2"],
    "notes": None,
}
JSON_REPLIES: dict[PromptId, dict[str, Any]] = {
    PromptId.TASKPROFILE_INFERENCE_USER: PROFILE,
    PromptId.TASKPROFILE_UPDATE_USER: PROFILE,
    PromptId.PLAN_GENERATION_USER: PLAN,
    PromptId.VALIDATION_SEMANTIC_USER: {"issues": [], "summary": "Nothing to report."},
    PromptId.PASS_EVALUATION_USER: ASSESSMENT,
    PromptId.RECURSIVE_REFINEMENT_USER: {"actions": []},
    PromptId.RULE_CRITIQUE_USER: {"issues": []},
    PromptId.CHECKS_PREPARE_USER: {"checks": []},
    PromptId.ANSWER_SYNTHESIS_USER: ANSWER,
}
STEP_TEXT = "The Moon's gravity pulls the water facing it, so the sea bulges there: {step}."
REFUSAL = "I'm sorry, but I can't help with that."
_STEP_ID = re.compile(r"Your step \(([^,)]+)")
_TITLE = re.compile(r'"title": "(\w+)"')


def _signatures() -> list[tuple[str, PromptId]]:
    """Each user prompt's fixed opening (its template up to the first field), longest first."""
    registry = default_registry()
    found = []
    for prompt_id in PromptId:
        template = registry.get_definition(prompt_id).template
        if template:
            found.append((template.split("{", 1)[0], prompt_id))
    return sorted(found, key=lambda pair: -len(pair[0]))


SIGNATURES = _signatures()
OUTPUT_OF = {default_registry().get_definition(p).output_model.__name__: p for p in JSON_REPLIES}


@dataclass
class Request:
    """What the model was asked: which prompt, its instructions, and the HTTP request."""

    prompt_id: PromptId
    instructions: str
    seen: Seen
    attempt: int  # 1 for the first time this exact prompt was sent

    @property
    def step_id(self) -> str:
        match = _STEP_ID.search(self.instructions)
        return match.group(1) if match else ""

    @property
    def options(self) -> dict[str, Any]:
        return self.seen.body


def read(seen: Seen) -> tuple[PromptId, str]:
    """The prompt id and instructions of a request, as the model sees them. A message that is
    no prompt XML is the plain draft: the request as one call sends it (llm.session.PLAIN)."""
    content = seen.body["messages"][0]["content"]
    if not content.startswith("<prompt>"):
        return PromptId.ANSWER_DRAFT_USER, content
    root = ET.fromstring(content)
    instructions = root.findtext("instructions") or ""
    for opening, prompt_id in SIGNATURES:
        if instructions.startswith(opening):
            return prompt_id, instructions
    raise AssertionError(f"no prompt starts like {instructions[:80]!r}")


def answer_for(request: Request, step_chars: int = 0) -> str:
    """A reply that fits the prompt; a repair is answered for the prompt being repaired."""
    prompt_id = request.prompt_id
    if prompt_id == PromptId.REASONING_STEP_USER:
        text = STEP_TEXT.format(step=request.step_id)
        return (text + " More detail follows." * (step_chars // 20))[: max(step_chars, len(text))]
    if prompt_id in (PromptId.ANSWER_DRAFT_USER, PromptId.ANSWER_REWRITE_USER):
        return str(ANSWER["answer_text"])  # an answer in prose: the plain draft, a refinement
    if prompt_id == PromptId.SUPERVISOR_REPAIR_JSON_USER:
        titles = [t for t in _TITLE.findall(request.instructions) if t in OUTPUT_OF]
        prompt_id = OUTPUT_OF[titles[-1]]
    return json.dumps(JSON_REPLIES[prompt_id])


# -- styles --------------------------------------------------------------------------------------

Style = Callable[[Request, str], Planned]


def ok(text: str | None, **message: Any) -> Planned:
    return Planned(body=completion(text, **message))


def plain(request: Request, reply: str) -> Planned:
    return ok(reply)


#: The prompts whose reply is prose, not JSON: a step, the plain draft, a refined answer.
PROSE = frozenset(
    {PromptId.REASONING_STEP_USER, PromptId.ANSWER_DRAFT_USER, PromptId.ANSWER_REWRITE_USER}
)


def _is_json(request: Request) -> bool:
    return request.prompt_id not in PROSE


def _draft(reply: str) -> str:
    """A first, partial go at the answer, as reasoning models write in their thinking."""
    value = json.loads(reply)
    first = next(iter(value))
    return json.dumps({first: value[first]})


def think_draft(request: Request, reply: str) -> Planned:
    draft = _draft(reply) if _is_json(request) else "a first sentence"
    return ok(f"<think>\nLet me draft it: {draft}\nNo, more is needed.\n</think>\n\n{reply}")


def think_opened_in_prompt(request: Request, reply: str) -> Planned:
    draft = _draft(reply) if _is_json(request) else "a first sentence"
    return ok(
        f"Okay, the user wants this. Draft: {draft}. Now the full reply.\n</think>\n\n{reply}"
    )


def reasoning_field(request: Request, reply: str) -> Planned:
    draft = _draft(reply) if _is_json(request) else "a first sentence"
    return ok(reply, reasoning_content=f"Thinking... a draft would be {draft}.")


def fenced_prose(request: Request, reply: str) -> Planned:
    if not _is_json(request):
        return ok(reply)
    return ok(f"Sure! Here is the JSON you asked for:\n\n```json\n{reply}\n```\n\nHope it helps.")


_SHOUTED = {"minimal": "Minimal", "moderate": "MODERATE", "medium": "Medium"}


def python_literals(request: Request, reply: str) -> Planned:
    """Single quotes, True/None, a trailing comma, and enum values in the wrong case."""
    if not _is_json(request):
        return ok(reply)
    value = json.loads(reply)
    if "expected_tool_usage" in value:
        value = {k: _SHOUTED.get(v, v) if isinstance(v, str) else v for k, v in value.items()}
    text = repr(value)
    return ok(text[:-1] + ",}")


def cut_once(request: Request, reply: str) -> Planned:
    """A model that writes past every first budget: each reply is cut in half at it; asked
    again (with a bigger budget) it fits."""
    if request.attempt > 1:
        return ok(reply)
    return ok(reply[: len(reply) // 2], finish_reason="length")


def empty_once(request: Request, reply: str) -> Planned:
    return ok("" if request.attempt == 1 else reply)


def rate_limited(request: Request, reply: str) -> Planned:
    if request.attempt == 1:
        return Planned(429, error_body("Rate limit reached"), headers={"retry-after-ms": "200"})
    return ok(reply)


def server_error_once(request: Request, reply: str) -> Planned:
    if request.attempt == 1:
        return Planned(503, error_body("The server is overloaded"))
    return ok(reply)


def no_json_schema(request: Request, reply: str) -> Planned:
    if request.options.get("response_format", {}).get("type") == "json_schema":
        return Planned(400, error_body("response_format type json_schema is not supported"))
    return ok(reply)


#: llama-cpp-python's server (0.3) refusing json_schema: HTTP 500 with its request validation's
#: text, as the real server answers (tests/e2e/test_real_server.py meets the real one).
LLAMA_CPP_PYTHON_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
    "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}"
)


def llama_cpp_python(request: Request, reply: str) -> Planned:
    """json_schema is a 500; json_object takes a `schema` and constrains the reply to it."""
    if request.options.get("response_format", {}).get("type") == "json_schema":
        return Planned(500, error_body(LLAMA_CPP_PYTHON_REFUSAL))
    return ok(reply)


def no_usage(request: Request, reply: str) -> Planned:
    return Planned(body=completion(reply, usage=False))


def refuses_a_step_once(request: Request, reply: str) -> Planned:
    first_pass = request.attempt == 1 and "pass 1 over the plan" in request.instructions
    if request.prompt_id == PromptId.REASONING_STEP_USER and request.step_id == "s1" and first_pass:
        return ok(REFUSAL)
    return ok(reply)


def refuses_every_step(request: Request, reply: str) -> Planned:
    if request.prompt_id == PromptId.REASONING_STEP_USER:
        return ok(None, refusal=REFUSAL)
    return ok(reply)


def _copied(request: Request) -> str:
    """What a model that copies its prompt writes (SmolLM2-135M, issue 32): for a JSON prompt the
    last JSON object that starts a line of it (a reply format's example, which comes after the
    prompt's material; in a repair, the rejected reply it was shown), else the prompt's opening
    instructions."""
    decoder = json.JSONDecoder()
    found = None
    for start in re.finditer(r"^\{", request.instructions, re.MULTILINE):
        try:
            found, _ = decoder.raw_decode(request.instructions, start.start())
        except ValueError:
            continue
    if found is not None:
        return json.dumps(found)
    return request.instructions.split("\n\n", 1)[0]


def echoes_always(request: Request, reply: str) -> Planned:
    """Every reply copies the prompt: its example, its instructions, the reply it repairs."""
    return ok(_copied(request))


def echoes_sometimes(request: Request, reply: str) -> Planned:
    """The copies of issue 32, once each: the plan is the format's example, the first step of
    pass 1 its instructions, the answer cites `s1,`; asked again (a repair, the next pass),
    the model writes its own."""
    first = request.attempt == 1
    if first and request.prompt_id == PromptId.PLAN_GENERATION_USER:
        return ok(_copied(request))
    first_pass = first and "pass 1 over the plan" in request.instructions
    if request.prompt_id == PromptId.REASONING_STEP_USER and request.step_id == "s1" and first_pass:
        return ok(_copied(request))
    if first and request.prompt_id == PromptId.ANSWER_SYNTHESIS_USER:
        return ok(json.dumps({**ANSWER, "used_step_ids": ["s1,", "s2"]}))
    return ok(reply)


#: The time limits the timed styles run under (a stall outlasts them), in seconds.
BOUND_S = 3
TIMED = {
    "AEON_LLM_TIMEOUT": str(BOUND_S),
    "AEON_LLM_FIRST_TOKEN_PER_1K_S": "0",
    "AEON_LLM_IDLE_TIMEOUT": str(BOUND_S),
}
STALL_S = 3 * BOUND_S


def _first_plan(request: Request) -> bool:
    return request.attempt == 1 and request.prompt_id == PromptId.PLAN_GENERATION_USER


def flaky(request: Request, reply: str) -> Planned:
    """A server that hangs once, longer than the timeout, before the first token of a reply
    (the plan's, as SmolLM2's did on a busy CPU, issue 33); asked again, it answers."""
    return Planned(body=completion(reply), sleep=STALL_S if _first_plan(request) else 0.0)


def stalls_mid_stream(request: Request, reply: str) -> Planned:
    """The plan's first reply stops after a few words for longer than the idle bound."""
    return Planned(body=completion(reply), pause=(4, STALL_S) if _first_plan(request) else None)


#: Seconds between the words of the slowly written plan: it takes longer in all than BOUND_S.
SLOW_WORD_S = 0.15


def slow_plan(request: Request, reply: str) -> Planned:
    """The plan written a word at a time, SLOW_WORD_S apart: longer in all than the timeout,
    never long without a token."""
    slow = request.prompt_id == PromptId.PLAN_GENERATION_USER
    return Planned(body=completion(reply), gap=SLOW_WORD_S if slow else 0.0)


def refuses_streaming(request: Request, reply: str) -> Planned:
    if request.options.get("stream"):
        return Planned(400, error_body("stream: streaming responses are not supported"))
    return ok(reply)


def ignores_streaming(request: Request, reply: str) -> Planned:
    """A server that answers `stream: true` with the whole reply as JSON."""
    return Planned(body=completion(reply), streams=False)


class Interrupting:
    """llama-cpp-python's server as it runs by default (`interrupt_requests`): a stream it is
    serving ends at once, `[DONE]` with no finish reason, when another request comes; a reply
    sent whole is never cut. Streams are written a chunk every GAP_S, so the calls a run sends
    at once (Phase A's) do overlap."""

    GAP_S = 0.05

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Requests that came so far, whichever run's (the count only grows).
        self.arrived = 0
        #: Streams cut short.
        self.cut = 0

    def __call__(self, request: Request, reply: str) -> Planned:
        with self._lock:
            self.arrived += 1
            mine = self.arrived
        if not request.options.get("stream"):
            return ok(reply)
        return Planned(body=completion(reply), gap=self.GAP_S, cut=lambda _: self._later(mine))

    def _later(self, mine: int) -> bool:
        """Another request came after this stream's: the server cuts this one."""
        with self._lock:
            cut = self.arrived > mine
            self.cut += cut
        return cut


INTERRUPTING = Interrupting()

CONTEXT_TOKENS = 8_192


def small_context(request: Request, reply: str) -> Planned:
    """A server with an 8k window (4 characters a token) and a model that writes long steps."""
    prompt = request.options["messages"][0]["content"]
    if len(prompt) > CONTEXT_TOKENS * 4:
        message = (
            f"This model's maximum context length is {CONTEXT_TOKENS} tokens. However, you "
            f"requested {len(prompt) // 4} tokens. Please reduce the length of the messages."
        )
        return Planned(400, error_body(message))
    return ok(reply)


@dataclass(frozen=True)
class Case:
    style: Style
    #: Characters each step writes (0: a sentence).
    step_chars: int = 0
    #: Whether the run can be answered non-degraded from these replies.
    answerable: bool = True
    #: Settings the run needs beside the gauntlet's own (the timed styles' bounds).
    env: dict[str, str] = field(default_factory=dict)


CASES: dict[str, Case] = {
    "plain": Case(plain),
    "fenced-prose": Case(fenced_prose),
    "think-block-with-draft": Case(think_draft),
    "think-opened-in-prompt": Case(think_opened_in_prompt),
    "reasoning-content-field": Case(reasoning_field),
    "python-literals-enum-case": Case(python_literals),
    "cut-at-length-once": Case(cut_once),
    "empty-once": Case(empty_once),
    "429-retry-after": Case(rate_limited),
    "503-once": Case(server_error_once),
    "no-json-schema": Case(no_json_schema),
    "json-schema-refused-with-500": Case(llama_cpp_python),
    "no-usage": Case(no_usage),
    "refuses-a-step-once": Case(refuses_a_step_once),
    "small-context-long-steps": Case(small_context, step_chars=24_000),
    "flaky": Case(flaky, env=TIMED),
    "stalls-mid-stream": Case(stalls_mid_stream, env=TIMED),
    "slow-plan": Case(slow_plan, env=TIMED),
    "refuses-streaming": Case(refuses_streaming),
    "ignores-streaming": Case(ignores_streaming),
    "interrupts-streams": Case(INTERRUPTING),
    "refuses-every-step": Case(refuses_every_step, answerable=False),
    # Answerable, but only through repair calls and a second pass.
    "echoes-sometimes": Case(echoes_sometimes, answerable=False),
    "echoes-always": Case(echoes_always, answerable=False),
}


@dataclass
class PipelineModel:
    """The responder: recognise the prompt, make the reply, dress it in the case's style."""

    case: Case
    requests: list[Request] = field(default_factory=list)
    _sent: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, seen: Seen) -> Planned:
        prompt_id, instructions = read(seen)
        key = seen.body["messages"][0]["content"]
        with self._lock:
            self._sent[key] += 1
            request = Request(prompt_id, instructions, seen, self._sent[key])
            self.requests.append(request)
        return self.case.style(request, answer_for(request, self.case.step_chars))
