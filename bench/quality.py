"""Section quality: how much better Aeon's loop answers than plain calls to the same model.

`python -m bench --only quality --llm-url URL --model NAME` runs every case of
`bench/quality_cases.json` (a request and rules in Aeon's rule format, each with a hand-written
check the host runs) against the same OpenAI-compatible server, in up to four columns
(`--quality-columns`, default all):

- `plain`: one plain call, the request with the rules' descriptions as instructions
  (prompts/baseline.py);
- `bestof`: K_MAX plain calls of the same prompt; best of k takes the first k, k matched per case
  to the loop's token spend, and picks the one that holds most rules (ties to the first);
- `loop`: the request and its rules through one in-process worker of every phase on the bench's
  Redis (the rules drive convergence);
- `words`: the same with each rule's check replaced by its description, so the run's PREPARE
  must make the checks; how far those agree with the hand-written ones is reported.

Every column is scored on the answer as published, by the hand-written checks: a plain call's
reply, and a run's `final_answer.answer_text` (`published_text`), never a step's output; of a
degraded answer, the text after the host's opening paragraph, which names the failed checks in
their own words.

Results go to `--quality-results PATH` after every case and column, so a run cut short still
has a table (`python -m bench.quality_report PATH`), and a later run with the same file keeps
what is there and measures only what is missing: the baseline of one run and the loop of another
make one table. Per case and in total: rules held, cases whole, flips, calls, tokens, wall time
(bench/quality_scores.py). The figures are recorded, not targets.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient
from aeonloop.limits import LoopSettings
from aeonloop.llm.factory import LLMSettings, ready_adapter
from aeonloop.phases.evaluation import evaluate_rules
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import Rule
from aeonloop.prompts.baseline import plain_call
from aeonloop.testing import AeonTestStack
from bench.context import BenchContext
from bench.quality_scores import K_MAX, summarise

CASES = Path(__file__).resolve().parent / "quality_cases.json"
#: Seconds one run of the loop may take (a small model on 2 cores: a few seconds a call).
RUN_TIMEOUT_S = 900.0
#: The plain call's reply budget, in tokens.
PLAIN_MAX_TOKENS = 1024
#: The columns, in the order a case measures them.
COLUMNS = ("plain", "bestof", "loop", "words")


@dataclass(frozen=True)
class Case:
    id: str
    request: str
    rules: list[Rule]

    @property
    def fingerprint(self) -> str:
        """What a stored result was measured on: a case whose request or rules changed since
        is measured again."""
        text = json.dumps([self.request, [r.model_dump(mode="json") for r in self.rules]])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_cases(path: Path = CASES) -> list[Case]:
    """The suite: every case's rules validated as Aeon's rules."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        Case(c["id"], c["request"], [Rule.model_validate(rule) for rule in c["rules"]])
        for c in data["cases"]
    ]


def in_words(rules: Sequence[Rule]) -> list[Rule]:
    """The rules as plain language only: each check is its description (a `check` may be in
    words: docs/requirements.md, PREPARE), so the run's PREPARE must turn it into checks the
    host can run."""
    try:
        return [Rule.model_validate({**r.model_dump(), "check": r.description}) for r in rules]
    except ValidationError as error:
        raise ValueError(
            "the words column needs rules whose check may be plain language; this build's "
            f"rules take only content or executable checks ({error.error_count()} refused)"
        ) from error


def parse_columns(text: str) -> list[str]:
    """`--quality-columns`: a comma-separated choice of COLUMNS, in their own order."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = names - set(COLUMNS)
    if unknown or not names:
        raise ValueError(f"choose from {','.join(COLUMNS)} (comma-separated); got {text!r}")
    return [name for name in COLUMNS if name in names]


def published_text(result: ExecutionResult) -> str:
    """The text the harness scores for a run: the answer the user gets, as published (Phase E's
    `answer_text`, after any checking and refinement), never a step's output; less the opening
    paragraph the host puts before a degraded answer (`answer_body`)."""
    return answer_body(result.final_answer.answer_text)


#: How Phase E opens an answer that is degraded or its own (FR-030, phases/phase_e.py): one
#: paragraph that says how the run ended and names each check that failed, in the check's words.
HOST_OPENINGS = ("Degraded answer: ", "Unable to synthesize a complete answer.")


def answer_body(text: str) -> str:
    """`text` without the host's opening paragraph, if it has one. That paragraph quotes the
    rules that failed ("Check moon did not hold: Name the Moon as a cause."), so scored with
    it, a degraded answer would hold the very rules it failed."""
    if text.startswith(HOST_OPENINGS) and "\n\n" in text:
        return text.split("\n\n", 1)[1]
    return text


async def verdicts(case: Case, text: str) -> dict[str, str]:
    """Each rule's verdict on `text` by the case's hand-written checks, as the host runs them."""
    evaluation = await evaluate_rules(case.rules, text, threshold=1.0)
    return {result.id: result.verdict for result in evaluation.rule_results}


async def _plain(client: Any, model: str, case: Case) -> dict[str, Any]:
    started = time.perf_counter()
    reply = await client.chat.completions.create(
        model=model,
        messages=[
            {
                "role": "user",
                "content": plain_call(case.request, [rule.description for rule in case.rules]),
            }
        ],
        max_tokens=PLAIN_MAX_TOKENS,
    )
    seconds = time.perf_counter() - started
    text = reply.choices[0].message.content or ""
    usage = reply.usage
    return {
        "text": text,
        "verdicts": await verdicts(case, text),
        "calls": 1,
        "prompt_tokens": usage.prompt_tokens if usage else 0,
        "completion_tokens": usage.completion_tokens if usage else 0,
        "seconds": round(seconds, 2),
    }


async def _looped(gateway: AeonClient, case: Case, rules: list[Rule]) -> dict[str, Any]:
    started = time.perf_counter()
    result = await gateway.ask(case.request, rules=rules, timeout=RUN_TIMEOUT_S)
    seconds = time.perf_counter() - started
    text = published_text(result)
    return {
        "text": result.final_answer.answer_text,
        "verdicts": await verdicts(case, text),
        "calls": result.usage.calls,
        "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens,
        "seconds": round(seconds, 2),
        "status": result.status,
        "degraded": result.degraded,
        # Each rule of the run (the request's own among them) with its verdict on the published
        # text by the run's checks: with rules in words, the checks PREPARE made.
        "checks": [check.model_dump() for check in result.outcome.checks],
    }


async def _taken(measure: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """A take, or what broke it: one case's run that times out or fails is recorded as such and
    the harness goes on to the next (a 40-case run on a small model takes hours)."""
    started = time.perf_counter()
    try:
        return await measure
    except Exception as error:  # recorded in the results and shown in the table
        return {
            "error": f"{type(error).__name__}: {error}"[:500],
            "seconds": round(time.perf_counter() - started, 2),
        }


class Results:
    """The per-case results file: read at the start (what is there is kept), written whole after
    every case and column (replaced atomically, so a reader never sees half of it)."""

    def __init__(self, path: Path | None, model: str) -> None:
        self.path = path
        self.model = model
        self.records: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("model") != model:
                raise ValueError(
                    f"{path} holds results for model {data.get('model')!r}, not {model!r}: "
                    "give another --quality-results file"
                )
            self.records = {r["case"]: r for r in data["records"]}

    def record(self, case: Case) -> dict[str, Any]:
        """The case's record, fresh if it was measured on another request or other rules."""
        found = self.records.get(case.id)
        if found is None or found.get("fingerprint") != case.fingerprint:
            found = {
                "case": case.id,
                "fingerprint": case.fingerprint,
                "rules": [rule.id for rule in case.rules],
                "plain": [],
                "loop": None,
                "words": None,
            }
            self.records[case.id] = found
        return found

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        body = {"model": self.model, "k_max": K_MAX, "records": list(self.records.values())}
        partial.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, self.path)


def _wanted(record: dict[str, Any], columns: Sequence[str]) -> tuple[int, list[str]]:
    """Plain samples still to take, and the loop columns still to run (a broken take is run
    again)."""
    samples = K_MAX if "bestof" in columns else 1 if "plain" in columns else 0
    good = [s for s in record["plain"] if "error" not in s]
    record["plain"] = good
    loops = [
        c for c in ("loop", "words") if c in columns and (record[c] is None or "error" in record[c])
    ]
    return max(0, samples - len(good)), loops


async def run_quality(ctx: BenchContext) -> dict[str, Any]:
    if not (ctx.llm_url and ctx.model):
        raise ValueError("the quality section needs --llm-url and --model (an OpenAI server)")
    from openai import AsyncOpenAI  # the openai client: only this section needs it here

    columns = list(ctx.quality_columns or COLUMNS)
    cases = load_cases()[: ctx.quality_cases or None]
    words = {case.id: in_words(case.rules) for case in cases} if "words" in columns else {}
    results = Results(ctx.quality_results, ctx.model)
    # The server and model are the section's flags; the rest (AEON_LLM_TIMEOUT and the other
    # bounds) is the environment's, as a worker's would be, so a loaded machine can be measured.
    server = {"kind": "openai", "base_url": ctx.llm_url, "model": ctx.model}
    llm_settings = LLMSettings.from_env().model_copy(update=server)
    llm = await ready_adapter(llm_settings)
    plain = AsyncOpenAI(base_url=ctx.llm_url, api_key="none", max_retries=2)
    prefix = ctx.new_prefix("quality")
    settings = BusSettings(redis_url=ctx.redis_url, prefix=prefix)
    try:
        async with AeonTestStack(llm, settings=settings, loop=LoopSettings.from_env()) as stack:
            for case in cases:
                record = results.record(case)
                samples, loops = _wanted(record, columns)
                for _ in range(samples):
                    record["plain"].append(await _taken(_plain(plain, ctx.model, case)))
                    results.save()
                for column in loops:
                    rules = case.rules if column == "loop" else words[case.id]
                    record[column] = await _taken(_looped(stack.client, case, rules))
                    results.save()
    finally:
        await llm.aclose()
        await plain.close()
        await ctx.clean(prefix)
    section = summarise(ctx.model, [results.records[case.id] for case in cases])
    section["columns"] = columns
    return section
