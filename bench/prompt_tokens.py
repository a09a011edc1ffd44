"""Prompt tokens per prompt id: what Aeon's own prompts cost a run, call by call.

    python -m bench.prompt_tokens [--json] [REQUEST ...]

Runs each request (by default the standard ones: the README's main job and the costs section's
request) one after the other through an in-process pipeline (`AeonTestStack`) on the offline
model, and counts, per prompt id, the calls and the prompt tokens each call was sent. The
offline model counts no tokens: a prompt's are estimated from its length, as its usage says
(four characters a token, `llm.base.approx_tokens`), from the message a server would be sent
(`LLMCall.message`: the prompt's XML, with no JSON schema in it, as a server that takes
`response_format` gets it). A real server's counts come from its own log (`bench.prefix`).

Issue 40 (prompt economy) measures its cut with this: the figures before and after are in
docs/benchmarks.md, "Prompt tokens per prompt id". Exit status: 0, or 2 when a run did not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from aeonloop.llm.base import LLMCall, LLMReply
from aeonloop.llm.offline import OfflineLLM
from aeonloop.testing import AeonTestStack
from bench.report import table

#: The standard request: the README's main job (`aeon ask "Explain how tides work"`) and the
#: costs section's two-part request.
STANDARD_REQUESTS = (
    "Explain how photosynthesis works, then rewrite it for a 10-year-old",
    "Explain how tides work",
)
#: Seconds a run on the offline model may take (a few hundred ms on a quiet machine).
RUN_TIMEOUT_S = 120.0


class CountingLLM(OfflineLLM):
    """The offline model, counting each call's prompt tokens under its prompt id."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.prompt_tokens: Counter[str] = Counter()

    async def complete(self, call: LLMCall) -> LLMReply:
        reply = await super().complete(call)
        self.calls[call.prompt_id.value] += 1
        self.prompt_tokens[call.prompt_id.value] += reply.usage.prompt_tokens
        return reply


async def measure(requests: Sequence[str]) -> dict[str, Any]:
    """Each request's run, one at a time, and the calls and prompt tokens per prompt id."""
    runs: list[dict[str, Any]] = []
    total = CountingLLM()
    for request in requests:
        llm = CountingLLM()
        async with AeonTestStack(llm=llm) as stack:
            result = await stack.client.ask(request, timeout=RUN_TIMEOUT_S)
        runs.append(
            {
                "request": request,
                "status": result.status,
                "calls": sum(llm.calls.values()),
                "prompt_tokens": sum(llm.prompt_tokens.values()),
            }
        )
        total.calls.update(llm.calls)
        total.prompt_tokens.update(llm.prompt_tokens)
    per_prompt = {
        prompt_id: {"calls": total.calls[prompt_id], "prompt_tokens": tokens}
        for prompt_id, tokens in sorted(total.prompt_tokens.items(), key=lambda kv: -kv[1])
    }
    return {
        "runs": runs,
        "per_prompt": per_prompt,
        "prompt_tokens": sum(total.prompt_tokens.values()),
    }


def render(report: dict[str, Any]) -> str:
    """The per-prompt table (calls, tokens, tokens a call), then each run's total."""
    rows = [
        [prompt_id, row["calls"], row["prompt_tokens"], row["prompt_tokens"] // row["calls"]]
        for prompt_id, row in report["per_prompt"].items()
    ]
    calls = sum(row["calls"] for row in report["per_prompt"].values())
    rows.append(["total", calls, report["prompt_tokens"], ""])
    per_run = [[r["request"], r["status"], r["calls"], r["prompt_tokens"]] for r in report["runs"]]
    return "\n\n".join(
        [
            table(["prompt id", "calls", "prompt tokens", "a call"], rows),
            table(["request", "status", "calls", "prompt tokens"], per_run),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prompt_tokens", description=__doc__)
    parser.add_argument("requests", nargs="*", help="requests to run (default: the standard)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args.requests or STANDARD_REQUESTS))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if all(run["status"] != "failed" for run in report["runs"]) else 2


if __name__ == "__main__":
    sys.exit(main())
