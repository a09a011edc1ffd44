"""`aeon eval`'s paths: each case asked of the configured model in every way the report compares.

For each case, in this order:

1. **Aeon**, once for each mode (rules as checks, rules in words) and each effort run: the
   request and its rules through the pipeline the client is connected to, scored on the answer
   as published (`published_text`);
2. **plain samples**: the request with its rules' descriptions as instructions, sent as one
   plain call sends it (the same call as a run's draft, `PromptId.ANSWER_DRAFT_USER` through an
   `LLMSession`, so it goes to any configured model, the offline one included). One set of
   samples serves every k: plain is the first, best of k picks among the first k. Their number
   is `k_max` when given, else matched to Aeon's spend: samples are taken until they have spent
   the tokens of the dearest Aeon path of the case, at most K_CEILING.

Each take is recorded as plain JSON (cases.py reads them): the text scored, each rule's verdict,
calls, prompt and completion tokens, seconds. Where the words mode would ask Aeon exactly what
the checks mode asked (rules in words already, or none), its take is the checks run's, marked
`same_run_as`, and no second run is made. A path that raises is recorded with its error and
the harness goes on: a 40-case run on a small model takes hours.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aeonloop.contracts import Usage
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.quality.cases import Case, Mode, summarise, tokens, usable, verdicts
from aeonloop.limits import EFFORTS as EFFORT_LEVELS
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMAdapter
from aeonloop.llm.session import LLMSession
from aeonloop.phases.events import ExecutionResult
from aeonloop.prompts.baseline import plain_call
from aeonloop.prompts.registry import DraftAnswerInput, PromptId, default_registry

#: Seconds one Aeon run may take (a small model on 2 cores: minutes).
RUN_TIMEOUT_S = 900.0
#: The most plain samples a case takes when their number is matched to Aeon's spend: on a
#: small model a run spends 7 to 60 plain calls' tokens, so this bounds the baseline's cost.
K_CEILING = 8
#: Aeon's effort when none is asked for: the workers' AEON_EFFORT.
DEFAULT_EFFORT = "default"
#: The efforts a run can be asked at (limits.Effort), each passed on in `_effort_options`: the
#: one place the harness turns an effort into a run.
EFFORTS: tuple[str, ...] = EFFORT_LEVELS

#: How the host opens an answer it wrote itself (publish.degraded_answer): one paragraph that
#: says how the run ended and names each check that failed, in the check's words. An answer the
#: model wrote has no such opening: the host's account of it is in its notes (FR-030 as
#: docs/requirements.md reads it).
HOST_OPENING = "Unable to synthesize a complete answer."


@dataclass(frozen=True)
class Step:
    """What the harness is doing now, for a progress display: case `number` of `total`."""

    number: int
    total: int
    case: str
    doing: str
    #: The case is finished (its record is complete).
    done: bool = False
    #: Its record was kept from an earlier run (`--resume`): nothing ran for it.
    kept: bool = False


@dataclass(frozen=True)
class Plan:
    """What to run for each case."""

    modes: tuple[Mode, ...]
    efforts: tuple[str, ...] = (DEFAULT_EFFORT,)
    #: Plain samples a case; None: matched to Aeon's spend, at most K_CEILING.
    k_max: int | None = None
    timeout: float = RUN_TIMEOUT_S
    #: The bounds a run's checks keep, which scoring keeps too (AEON_ALLOW_EXECUTABLE_CHECKS,
    #: AEON_CHECK_PATTERN_TIMEOUT_S).
    loop: LoopSettings = field(default_factory=LoopSettings)


def efforts_to_run(asked: Sequence[str]) -> tuple[str, ...]:
    """The efforts to run Aeon at: those asked, each once, in the order asked; none asked, the
    default (the workers' AEON_EFFORT), shown as `aeon`."""
    return tuple(dict.fromkeys(asked)) or (DEFAULT_EFFORT,)


def path_name(effort: str) -> str:
    """An Aeon path's name in the report: `aeon`, or `aeon low` for an effort of its own."""
    return "aeon" if effort == DEFAULT_EFFORT else f"aeon {effort}"


def _effort_options(effort: str) -> dict[str, Any]:
    """What a run is asked with at `effort`: the request's effort (the default: none, so the
    workers' AEON_EFFORT)."""
    return {} if effort == DEFAULT_EFFORT else {"effort": effort}


def answer_body(text: str) -> str:
    """`text` without the host's opening paragraph, if it has one (an answer the host wrote).
    That paragraph quotes the rules that failed ("Check moon did not hold: Name the Moon as a
    cause."), so scored with it, a degraded answer would hold the very rules it failed."""
    if text.startswith(HOST_OPENING) and "\n\n" in text:
        return text.split("\n\n", 1)[1]
    return text


def published_text(result: ExecutionResult) -> str:
    """The text scored for a run: the answer the user gets, as published (Phase E's
    `answer_text`), never a step's output; less the host's opening paragraph (`answer_body`)."""
    return answer_body(result.final_answer.answer_text)


async def plain_sample(llm: LLMAdapter, case: Case, settings: LoopSettings) -> dict[str, Any]:
    """One plain call: the request with the rules' descriptions as instructions, as a run's
    draft sends it (a session of its own, so no memo can answer it)."""
    usage = Usage()
    session = LLMSession(llm, default_registry(), _Forget(), uuid.uuid4().hex, usage)
    asked = plain_call(case.request, [rule.description for rule in case.rules])
    started = time.perf_counter()
    reply = await session.text(
        PromptId.ANSWER_DRAFT_USER, DraftAnswerInput(request=asked), scope="eval/plain"
    )
    return {
        "text": reply.text,
        "verdicts": await verdicts(case, reply.text, settings),
        "calls": usage.calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "seconds": round(time.perf_counter() - started, 2),
    }


class _Forget:
    """A memo that remembers nothing: each sample is a call of its own."""

    async def get(self, key: str) -> str | None:
        return None

    async def put(self, key: str, value: str, until: object = None) -> None:
        return None


async def aeon_take(
    client: AeonClient, case: Case, mode: Mode, effort: str, plan: Plan
) -> dict[str, Any]:
    """The case through Aeon in `mode` at `effort`, scored on the answer as published."""
    started = time.perf_counter()
    result = await client.ask(
        case.request, rules=case.rules_for(mode), timeout=plan.timeout, **_effort_options(effort)
    )
    return {
        "text": result.final_answer.answer_text,
        # The host's account of the run (why it ended as it did), beside the model's text.
        "notes": result.final_answer.notes,
        "verdicts": await verdicts(case, published_text(result), plan.loop),
        "calls": result.usage.calls,
        "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens,
        "seconds": round(time.perf_counter() - started, 2),
        "status": result.status,
        "degraded": result.degraded,
        # Each rule of the run with its verdict by the run's own checks on the published text:
        # with rules in words, the checks PREPARE made.
        "checks": [verdict.model_dump(mode="json") for verdict in result.outcome.checks],
    }


async def _taken(measure: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """A take, or what broke it, recorded as such."""
    started = time.perf_counter()
    try:
        return await measure
    except Exception as error:  # recorded in the report; the harness goes on
        return {
            "error": f"{type(error).__name__}: {error}"[:500],
            "seconds": round(time.perf_counter() - started, 2),
        }


async def run_case(
    case: Case,
    llm: LLMAdapter,
    client: AeonClient,
    plan: Plan,
    say: Callable[[str], None] = lambda doing: None,
) -> dict[str, Any]:
    """Every path of one case: its record."""
    aeon: dict[str, dict[str, Any]] = {}
    for mode in plan.modes:
        for effort in plan.efforts:
            say(f"{path_name(effort)}, rules {'in words' if mode == 'words' else 'as checks'}")
            # Rules in words already (or none): the words run would be the checks run again.
            same = mode == "words" and case.rules_for("words") == case.rules
            taken = aeon.get("checks", {}).get(path_name(effort)) if same else None
            aeon.setdefault(mode, {})[path_name(effort)] = (
                {**taken, "same_run_as": "checks"}
                if taken
                else await _taken(aeon_take(client, case, mode, effort, plan))
            )
    spend = max(
        (tokens(t) for paths in aeon.values() for t in paths.values() if usable(t)), default=0
    )
    samples: list[dict[str, Any]] = []
    while _more(samples, plan.k_max, spend):
        say(f"plain call {len(samples) + 1}")
        samples.append(await _taken(plain_sample(llm, case, plan.loop)))
    return {
        "case": case.id,
        "rules": [rule.id for rule in case.rules],
        "scored": [rule.id for rule in case.scored()],
        "samples": samples,
        "aeon": aeon,
    }


def _more(samples: Sequence[dict[str, Any]], k_max: int | None, spend: int) -> bool:
    """Whether to take another plain sample: fewer than k_max, or (matched) while the samples
    have spent less than Aeon did, at least one and at most K_CEILING."""
    if k_max is not None:
        return len(samples) < k_max
    spent = sum(tokens(s) for s in samples if usable(s))
    return not samples or (len(samples) < K_CEILING and spent < spend)


def fingerprint(case: Case, plan: Plan) -> str:
    """What a record was measured on: the case as written and what the plan asked of it. A
    record kept from an earlier run (`kept`) stands only for the same case asked the same way."""
    asked = [case.model_dump(mode="json"), plan.modes, plan.efforts, plan.k_max]
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


async def run_cases(
    cases: Sequence[Case],
    llm: LLMAdapter,
    client: AeonClient,
    plan: Plan,
    on_step: Callable[[Step], None] = lambda step: None,
    on_record: Callable[[list[dict[str, Any]]], None] = lambda records: None,
    kept: Mapping[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every case, in order: the records; `on_step` hears what runs, `on_record` gets the
    records so far after each case (a run cut short keeps what it finished). A case whose
    record `kept` holds (by `fingerprint`, from an earlier run's report) is not run again."""
    records: list[dict[str, Any]] = []
    for number, case in enumerate(cases, 1):

        def say(doing: str, number: int = number, case: Case = case) -> None:
            on_step(Step(number, len(cases), case.id, doing))

        key = fingerprint(case, plan)
        found = (kept or {}).get(key)
        record = found or {**await run_case(case, llm, client, plan, say), "fingerprint": key}
        records.append(record)
        on_step(Step(number, len(cases), case.id, "done", done=True, kept=found is not None))
        on_record(records)
    return records


async def evaluate(
    cases: Sequence[Case],
    llm: LLMAdapter,
    client: AeonClient,
    plan: Plan,
    model: str,
    on_step: Callable[[Step], None] = lambda step: None,
    on_report: Callable[[dict[str, Any]], None] = lambda report: None,
    kept: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every case on every path (but those `kept` from an earlier run), and the report
    (`cases.summarise`, with the records it was made from); `on_report` is given the report so
    far after each case."""
    aeon = [path_name(effort) for effort in plan.efforts]

    def report_of(records: list[dict[str, Any]]) -> dict[str, Any]:
        return {**summarise(model, records, plan.modes, aeon), "records": records}

    records = await run_cases(
        cases, llm, client, plan, on_step, lambda records: on_report(report_of(records)), kept
    )
    return report_of(records)
