"""Prompt tokens per prompt id: what Aeon's own prompts cost a run, call by call.

    python -m bench.prompt_tokens [--json] [--tokenizer GGUF] [REQUEST ...]

Runs each request (by default the standard ones: the README's main job and the costs section's
request) one after the other through an in-process pipeline (`AeonTestStack`) on the offline
model, and counts, per prompt id, the calls and the prompt tokens each call was sent. The
offline model counts no tokens: a prompt's are estimated from its length, as its usage says
(four characters a token, `llm.base.approx_tokens`), from the message a server would be sent
(`LLMCall.message`: the prompt's XML, with no JSON schema in it, as a server that takes
`response_format` gets it). With `--tokenizer`, each message is also counted by that GGUF
model's own tokenizer (llama-cpp-python's, vocabulary only: no weights are loaded): the tokens
the model reads of Aeon's message, without the server's chat template around it. A real
server's counts of a live run come from its own log (`bench.prefix`).

Issue 40 (prompt economy) measures its cut with this: the figures before and after are in
docs/benchmarks.md, "Prompt tokens per prompt id". Exit status: 0, or 2 when a run did not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aeonloop.llm.base import LLMCall, LLMReply
from aeonloop.llm.offline import OfflineLLM
from aeonloop.testing import AeonTestStack
from bench.report import table

#: The standard requests: the README's main job, a request of two parts that runs the loop,
#: and a simple ask, which one plain call answers
#: (docs/verified-answers.md, "Spend that follows need").
STANDARD_REQUESTS = (
    "Explain how photosynthesis works, then rewrite it for a 10-year-old",
    "Explain how tides work",
)
#: Seconds a run on the offline model may take (a few hundred ms on a quiet machine).
RUN_TIMEOUT_S = 120.0


#: Counts a message's tokens with a model's own tokenizer.
Tokenizer = Callable[[str], int]


class CountingLLM(OfflineLLM):
    """The offline model, counting each call's prompt tokens under its prompt id: its estimate,
    and with a `tokenizer`, that tokenizer's count of the message too."""

    def __init__(self, tokenizer: Tokenizer | None = None) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.calls: Counter[str] = Counter()
        self.prompt_tokens: Counter[str] = Counter()
        self.model_tokens: Counter[str] = Counter()

    async def complete(self, call: LLMCall) -> LLMReply:
        reply = await super().complete(call)
        self.calls[call.prompt_id.value] += 1
        self.prompt_tokens[call.prompt_id.value] += reply.usage.prompt_tokens
        if self.tokenizer is not None:
            self.model_tokens[call.prompt_id.value] += self.tokenizer(call.message)
        return reply


def gguf_tokenizer(path: Path) -> Tokenizer:
    """The tokenizer of the GGUF model at `path` (llama-cpp-python, vocabulary only)."""
    from llama_cpp import Llama  # the bench's optional dependency, as the real-server tier's

    model = Llama(str(path), vocab_only=True, verbose=False)
    return lambda text: len(model.tokenize(text.encode(), add_bos=False, special=False))


async def measure(requests: Sequence[str], tokenizer: Tokenizer | None = None) -> dict[str, Any]:
    """Each request's run, one at a time, and the calls and prompt tokens per prompt id."""
    runs: list[dict[str, Any]] = []
    total = CountingLLM()
    for request in requests:
        llm = CountingLLM(tokenizer)
        async with AeonTestStack(llm=llm) as stack:
            result = await stack.client.ask(request, timeout=RUN_TIMEOUT_S)
        runs.append(
            {
                "request": request,
                "status": result.status,
                "calls": sum(llm.calls.values()),
                "prompt_tokens": sum(llm.prompt_tokens.values()),
                **_model_tokens(llm, tokenizer),
            }
        )
        total.calls.update(llm.calls)
        total.prompt_tokens.update(llm.prompt_tokens)
        total.model_tokens.update(llm.model_tokens)
    per_prompt = {
        prompt_id: {
            "calls": total.calls[prompt_id],
            "prompt_tokens": tokens,
            **({"model_tokens": total.model_tokens[prompt_id]} if tokenizer else {}),
        }
        for prompt_id, tokens in sorted(total.prompt_tokens.items(), key=lambda kv: -kv[1])
    }
    return {
        "runs": runs,
        "per_prompt": per_prompt,
        "prompt_tokens": sum(total.prompt_tokens.values()),
        **_model_tokens(total, tokenizer),
    }


def _model_tokens(llm: CountingLLM, tokenizer: Tokenizer | None) -> dict[str, int]:
    return {"model_tokens": sum(llm.model_tokens.values())} if tokenizer else {}


def render(report: dict[str, Any]) -> str:
    """The per-prompt table (calls, tokens, tokens a call; the model's count beside them when
    a tokenizer counted), then each run's total."""
    counted = "model_tokens" in report
    extra = ["model's tokens", "a call"] if counted else []
    rows = []
    for prompt_id, row in report["per_prompt"].items():
        calls = row["calls"]
        model = [row["model_tokens"], row["model_tokens"] // calls] if counted else []
        rows.append([prompt_id, calls, row["prompt_tokens"], row["prompt_tokens"] // calls, *model])
    calls = sum(row["calls"] for row in report["per_prompt"].values())
    model_total = [report["model_tokens"], ""] if counted else []
    rows.append(["total", calls, report["prompt_tokens"], "", *model_total])
    per_run = [
        [r["request"], r["status"], r["calls"], r["prompt_tokens"]]
        + ([r["model_tokens"]] if counted else [])
        for r in report["runs"]
    ]
    return "\n\n".join(
        [
            table(["prompt id", "calls", "prompt tokens", "a call", *extra], rows),
            table(["request", "status", "calls", "prompt tokens", *extra[:1]], per_run),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prompt_tokens", description=__doc__)
    parser.add_argument("requests", nargs="*", help="requests to run (default: the standard)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--tokenizer", type=Path, help="a GGUF model whose tokenizer counts each message too"
    )
    args = parser.parse_args(argv)
    if args.tokenizer is not None and not args.tokenizer.is_file():
        print(f"bench.prompt_tokens: no GGUF file at {args.tokenizer}", file=sys.stderr)
        return 2
    tokenizer = gguf_tokenizer(args.tokenizer) if args.tokenizer else None
    report = asyncio.run(measure(args.requests or STANDARD_REQUESTS, tokenizer))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if all(run["status"] != "failed" for run in report["runs"]) else 2


if __name__ == "__main__":
    sys.exit(main())
