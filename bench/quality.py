"""Section quality: how much better Aeon's loop answers than one plain call to the same model.

`python -m bench --only quality --llm-url URL --model NAME` runs every case of
`bench/quality_cases.json` (a request and rules in Aeon's rule format, checked on the host) twice
against the same OpenAI-compatible server:

- one plain call: the request with the rules' descriptions as instructions (prompts/baseline.py),
  its reply judged by the rules;
- Aeon's loop: the request with the same rules through one in-process worker of every phase on
  the bench's Redis (the rules drive convergence), its final answer judged by the same rules.

It reports per case and in total: cases whose rules all held, rules held, calls, prompt and
completion tokens, and wall time. `--quality-cases N` runs the first N cases (the CI slice).
The figures are recorded, not targets: they say what the loop gains on that model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient
from aeonloop.limits import LoopSettings
from aeonloop.llm.factory import LLMSettings, ready_adapter
from aeonloop.phases.evaluation import evaluate_rules
from aeonloop.phases.models import Rule
from aeonloop.prompts.baseline import plain_call
from aeonloop.testing import AeonTestStack
from bench.context import BenchContext

CASES = Path(__file__).resolve().parent / "quality_cases.json"
#: Seconds one run of the loop may take (a small model on 2 cores: a few seconds a call).
RUN_TIMEOUT_S = 900.0
#: The plain call's reply budget, in tokens.
PLAIN_MAX_TOKENS = 1024


@dataclass(frozen=True)
class Case:
    id: str
    request: str
    rules: list[Rule]


def load_cases(path: Path = CASES) -> list[Case]:
    """The suite: every case's rules validated as Aeon's rules."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        Case(c["id"], c["request"], [Rule.model_validate(rule) for rule in c["rules"]])
        for c in data["cases"]
    ]


async def _held(rules: list[Rule], text: str) -> tuple[int, bool]:
    """Rules of fail or warn severity that held on `text`, and whether all of them did."""
    evaluation = await evaluate_rules(rules, text, threshold=1.0)
    judged = [r for r in evaluation.rule_results if r.verdict != "skipped"]
    held = sum(1 for r in judged if r.verdict == "pass")
    return held, held == len(judged)


async def _plain(client: Any, model: str, case: Case) -> dict[str, Any]:
    content = plain_call(case.request, [rule.description for rule in case.rules])
    started = time.perf_counter()
    reply = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        max_tokens=PLAIN_MAX_TOKENS,
    )
    seconds = time.perf_counter() - started
    text = reply.choices[0].message.content or ""
    held, all_held = await _held(case.rules, text)
    usage = reply.usage
    return {
        "rules_held": held,
        "all_held": all_held,
        "calls": 1,
        "prompt_tokens": usage.prompt_tokens if usage else 0,
        "completion_tokens": usage.completion_tokens if usage else 0,
        "seconds": round(seconds, 2),
    }


async def _looped(gateway: AeonClient, case: Case) -> dict[str, Any]:
    started = time.perf_counter()
    result = await gateway.ask(case.request, rules=case.rules, timeout=RUN_TIMEOUT_S)
    seconds = time.perf_counter() - started
    held, all_held = await _held(case.rules, result.final_answer.answer_text)
    return {
        "rules_held": held,
        "all_held": all_held,
        "calls": result.usage.calls,
        "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens,
        "seconds": round(seconds, 2),
        "status": result.status,
    }


def _total(rows: list[dict[str, Any]], way: str) -> dict[str, Any]:
    return {
        "cases_all_held": sum(1 for r in rows if r[way]["all_held"]),
        "rules_held": sum(r[way]["rules_held"] for r in rows),
        "calls": sum(r[way]["calls"] for r in rows),
        "prompt_tokens": sum(r[way]["prompt_tokens"] for r in rows),
        "completion_tokens": sum(r[way]["completion_tokens"] for r in rows),
        "seconds": round(sum(r[way]["seconds"] for r in rows), 1),
    }


async def run_quality(ctx: BenchContext) -> dict[str, Any]:
    if not (ctx.llm_url and ctx.model):
        raise ValueError("the quality section needs --llm-url and --model (an OpenAI server)")
    from openai import AsyncOpenAI  # the openai client: only this section needs it here

    cases = load_cases()[: ctx.quality_cases or None]
    llm_settings = LLMSettings(kind="openai", base_url=ctx.llm_url, model=ctx.model)
    llm = await ready_adapter(llm_settings)
    plain = AsyncOpenAI(base_url=ctx.llm_url, api_key="none", max_retries=2)
    prefix = ctx.new_prefix("quality")
    settings = BusSettings(redis_url=ctx.redis_url, prefix=prefix)
    rows: list[dict[str, Any]] = []
    try:
        async with AeonTestStack(llm, settings=settings, loop=LoopSettings.from_env()) as stack:
            for case in cases:
                rows.append(
                    {
                        "case": case.id,
                        "rules": len(case.rules),
                        "plain": await _plain(plain, ctx.model, case),
                        "loop": await _looped(stack.client, case),
                    }
                )
    finally:
        await llm.aclose()
        await plain.close()
        await ctx.clean(prefix)
    return {
        "model": ctx.model,
        "cases": len(rows),
        "rules": sum(r["rules"] for r in rows),
        "per_case": rows,
        "plain": _total(rows, "plain"),
        "loop": _total(rows, "loop"),
    }
