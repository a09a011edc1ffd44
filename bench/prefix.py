"""How much of each call's prompt the server had already processed: its prefix cache's share.

    python -m bench.prefix LOG                      # every call the log holds, as one run
    python -m bench.prefix LOG --ask REQUEST ...    # `aeon ask --json` each request, one at a
                                                    # time, and each run's calls apart

LOG is the stderr of llama-cpp-python's server run with `--verbose true` (its default), where
every completion leaves lines like these (llama_cpp.llama.Llama.generate and llama.cpp's
llama_perf_context_print):

    Llama.generate: 212 prefix-match hit, remaining 530 prompt tokens to eval
    llama_perf_context_print: prompt eval time =  1234.56 ms /   530 tokens (...)

A call's prompt is the tokens the server kept from the last prompt it holds (the prefix-match
hit; 0 when the line is missing, as the server then evaluates the whole prompt) and the tokens it
processed (the prompt eval line). On a CPU server the processed ones are most of a call's time
(docs/llm-servers.md, "Prompt prefix caching"); the layout of Aeon's prompts decides how many
of them a server can skip (prompts.unified).

With --ask, the requests run through `aeon ask --json` with the environment as it is (AEON_LLM,
AEON_LLM_BASE_URL naming the server that writes LOG, ...), one after the other, and the calls
each run added to LOG are its own. A run can end with calls still queued at the server (a call
that timed out at Aeon is still processed there), so after each run one more call of a single
token is sent, which the server (one at a time, in order) answers only once every call before it
is done; the calls up to it are the run's, and it is left out. The run's own count of prompt
tokens (its `usage`) is shown beside the log's: it counts only the calls whose replies the run
took. Exit status: 0, or 2 when the log cannot be read or a run did not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import table

_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
#: Seconds a run may take before it is given up on (a run is 10-20 calls on a CPU server).
RUN_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Call:
    """One completion as the server's log tells it."""

    #: Prompt tokens the server kept from what it held (its cache's share).
    reused: int
    #: Prompt tokens it processed.
    processed: int
    #: Milliseconds it spent processing them.
    prompt_ms: float

    @property
    def sent(self) -> int:
        return self.reused + self.processed


def read_calls(lines: Iterable[str]) -> list[Call]:
    """The calls in a llama-cpp-python server log, in order.

    A prefix-match line belongs to the prompt eval line that follows it; a prompt eval line
    without one is a call whose whole prompt was processed."""
    calls: list[Call] = []
    reused: int | None = None
    for line in lines:
        hit = _HIT.search(line)
        if hit:
            reused = int(hit.group(1))
            continue
        evaluated = _EVAL.search(line)
        if evaluated:
            processed = int(evaluated.group(2))
            calls.append(Call(reused or 0, processed, float(evaluated.group(1))))
            reused = None
    return calls


@dataclass(frozen=True)
class RunFigures:
    """One run's calls, summed."""

    name: str
    calls: int
    sent: int
    reused: int
    processed: int
    prompt_ms: float
    #: The run's own count of prompt tokens (`usage.prompt_tokens`), when it was run here.
    usage_prompt_tokens: int | None = None
    #: How the run ended (its result's `status`, and its answer's `reason` when it has one),
    #: when it was run here.
    status: str | None = None

    @property
    def share(self) -> float:
        """The cache's share: the prompt tokens the server did not process again."""
        return self.reused / self.sent if self.sent else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "calls": self.calls,
            "sent": self.sent,
            "reused": self.reused,
            "processed": self.processed,
            "share": round(self.share, 4),
            "prompt_s": round(self.prompt_ms / 1000, 2),
            "usage_prompt_tokens": self.usage_prompt_tokens,
            "status": self.status,
        }


def summed(
    name: str,
    calls: Sequence[Call],
    usage_prompt_tokens: int | None = None,
    status: str | None = None,
) -> RunFigures:
    return RunFigures(
        name=name,
        calls=len(calls),
        sent=sum(call.sent for call in calls),
        reused=sum(call.reused for call in calls),
        processed=sum(call.processed for call in calls),
        prompt_ms=sum(call.prompt_ms for call in calls),
        usage_prompt_tokens=usage_prompt_tokens,
        status=status,
    )


def render(runs: Sequence[RunFigures]) -> str:
    headers = ["run", "status", "calls", "sent", "reused", "processed", "cache share", "prompt s"]
    headers.append("usage")
    rows = [
        [
            run.name,
            run.status,
            run.calls,
            run.sent,
            run.reused,
            run.processed,
            f"{run.share:.1%}",
            round(run.prompt_ms / 1000, 1),
            run.usage_prompt_tokens,
        ]
        for run in runs
    ]
    return table(headers, rows)


def drain(base_url: str, model: str) -> None:
    """Return once the server has answered every call sent to it before: llama-cpp-python's
    server takes calls one at a time, in the order they came (a first-in, first-out lock), so a
    one-token call sent now is answered after them."""
    body = {"model": model, "messages": [{"role": "user", "content": "1"}], "max_tokens": 1}
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=RUN_TIMEOUT_S) as reply:
        reply.read()


def ask(log: Path, request: str, aeon: Sequence[str], timeout: float | None = None) -> RunFigures:
    """`aeon ask --json REQUEST` (with `--timeout`, when given), and the calls it added to
    `log` until the server had answered them all (`drain`; its own call left out)."""
    start = log.stat().st_size
    argv = [*aeon, "ask", "--json", *(["--timeout", f"{timeout:g}"] if timeout else []), request]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=(timeout or RUN_TIMEOUT_S) + RUN_TIMEOUT_S,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"aeon ask exited {done.returncode}: {done.stderr.strip()[-500:]}")
    result = json.loads(done.stdout)
    usage = result.get("usage") or {}
    drain(os.environ["AEON_LLM_BASE_URL"], os.environ["AEON_LLM_MODEL"])
    with log.open("rb") as handle:
        handle.seek(start)
        added = handle.read().decode("utf-8", "replace").splitlines()
    calls = read_calls(added)[:-1]  # the last is drain's
    return summed(request, calls, usage.get("prompt_tokens"), _ending(result))


def _ending(result: dict[str, Any]) -> str | None:
    """`status`, with the answer's `reason` (why it is degraded) when there is one."""
    status = result.get("status")
    metadata = (result.get("final_answer") or {}).get("metadata") or {}
    reason = metadata.get("reason")
    return f"{status} ({reason})" if status and reason else status


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.log.is_file():
        print(f"bench.prefix: no log at {args.log}: give the server's stderr", file=sys.stderr)
        return 2
    if args.ask and not all(map(os.environ.get, ("AEON_LLM_BASE_URL", "AEON_LLM_MODEL"))):
        print("bench.prefix: --ask needs AEON_LLM_BASE_URL and AEON_LLM_MODEL", file=sys.stderr)
        return 2
    try:
        if args.ask:
            aeon = args.aeon.split()
            runs = []
            for request in args.ask:  # minutes each on a CPU server: each said as it ends
                runs.append(ask(args.log, request, aeon, args.timeout))
                print(f"bench.prefix: {json.dumps(runs[-1].as_dict())}", file=sys.stderr)
        else:
            text = args.log.read_text(encoding="utf-8", errors="replace")
            runs = [summed(args.log.name, read_calls(text.splitlines()))]
    except (RuntimeError, OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as error:
        print(f"bench.prefix: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([run.as_dict() for run in runs], indent=2))
    else:
        print(render(runs))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.prefix",
        description="Prompt tokens sent, reused from the server's cache and processed, per run.",
        epilog="Exit status: 0, or 2 when the log cannot be read or a run did not answer.",
    )
    parser.add_argument("log", type=Path, help="the llama-cpp-python server's stderr (verbose)")
    parser.add_argument(
        "--ask",
        nargs="+",
        metavar="REQUEST",
        help="run each request through `aeon ask --json`, one at a time, and report each run",
    )
    parser.add_argument("--aeon", default="aeon", help="the aeon command (default: aeon)")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds each run may take (aeon's default)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


if __name__ == "__main__":
    sys.exit(main())
