"""Section 8, event sizes: the bytes each hop's event carries, in runs of three shapes.

Workers keep nothing between events, so whatever a later phase needs rides in an event; if
that is the run's whole state, every event carries the history of the run (each pass's
record, every step's output) and grows with it, which costs encoding, decoding, Redis memory
and network on every hop. Three runs, each alone on a fresh `aeon worker` with the scripted
LLM (its script written to the log directory, so each run takes the path it is meant to):

- `one_pass`: the assessment says converged on pass 1 (A, B, C, E: five events);
- `three_pass`: not converged on passes 1 and 2 (scores 0.7, 0.8: no stagnation), each time
  refined with one new step, converged on pass 3 (nine events);
- `long_output`: one pass of four steps, each answering with 8,000 characters (under
  AEON_MAX_STEP_OUTPUT_CHARS and, as four, far under AEON_MAX_EVENT_BYTES).

Each run's events are read back from the streams under its prefix and put in order by
`causation_id`, from the RequestSubmitted to the FinalAnswerReady; a run that ends without an
answer is reported with the events it got to. FinalAnswerReady carries the answer, which is
as long as the answer is, so the rule below leaves it out ("non-answer" events).

The rule for "an event is bounded by what changed in its hop, not by the run's history", as
two numbers (bench.targets):

- growth with passes: for each event type of the 1-pass and 3-pass runs taken in that order,
  its largest later size ÷ its first; the worst type is at most 1.5. Types are compared with
  themselves because the hops differ in what they carry: a PassCompleted has the pass's own
  record (validation, assessment, refinement), which the 1-pass run has no event for, so its
  largest event against the 1-pass run's largest (reported too, not judged) would count a
  pass hop's own news as growth. Two more passes may add a little (the plan's new steps, a
  note), not every earlier pass's record;
- growth with outputs: the long-output run's largest non-answer event is at most 4 KB. One
  step's output alone is twice that, so this holds only if no event carries the step outputs
  (they are kept once, out of the events, and read where needed): with them inside, every
  event after the pass carries all four.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aeonloop.bus.keys import Keys
from aeonloop.phases.events import FinalAnswerReady, RequestSubmitted
from aeonloop.prompts.registry import PromptId
from bench.context import BenchContext
from bench.pipeline import running_pipeline
from bench.stats import ratio
from bench.traffic import ALL_STREAMS

#: The long-output run: this many steps, each replying with this many characters.
LONG_STEPS = 4
LONG_OUTPUT_CHARS = 8000
#: The bound on the long-output run's largest non-answer event (module docstring).
LONG_OUTPUT_BOUND_BYTES = 4096
#: The bound on any event type's growth from the 1-pass run through the 3-pass run.
PASS_GROWTH_BOUND = 1.5
#: A run here takes well under a second; one that takes this long is not coming.
ANSWER_TIMEOUT_S = 60.0
ANSWER = FinalAnswerReady.__name__


def _assessment(converged: bool, completeness: float) -> str:
    """A pass evaluation, no issue found; the host's rubric (≥ 0.95, all aligned) decides, not
    the flag."""
    return json.dumps(
        {
            "converged": converged,
            "completeness_score": completeness,
            "coherence_score": 0.95 if converged else completeness,
            "consistency": {
                "plan_aligned": True,
                "step_aligned": True,
                "answer_aligned": converged,
            },
            "reason_codes": ["complete" if converged else "needs_more_work"],
            "summary": f"Scripted assessment: {'complete' if converged else 'more work is due'}.",
            "issues": [],
        }
    )


def _plan(steps: int) -> str:
    body = [
        {"step_id": f"s{n}", "description": f"Part {n} of the explanation of photosynthesis"}
        for n in range(1, steps + 1)
    ]
    return json.dumps({"plan": {"goal": "Explain how photosynthesis works", "steps": body}})


def _add_step(step_id: str) -> str:
    """A refinement adding one step, so the next pass has something to execute."""
    action = {
        "action_type": "ADD",
        "target_step_id": None,
        "new_step": {"step_id": step_id, "description": f"Deepen the explanation ({step_id})"},
        "reason": "Scripted: one more step for the next pass.",
    }
    return json.dumps({"actions": [action]})


def _long_output() -> str:
    line = "{:04d} Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.\n"
    text = "".join(line.format(n) for n in range(LONG_OUTPUT_CHARS // len(line.format(0)) + 1))
    return text[:LONG_OUTPUT_CHARS]


@dataclass(frozen=True)
class RunShape:
    """One kind of run: its name in the report, the passes it should take, its LLM script."""

    name: str
    passes: int
    script: Mapping[PromptId, str | list[str]]


SHAPES = (
    RunShape(
        "one_pass",
        1,
        {
            PromptId.PLAN_GENERATION_USER: _plan(2),
            PromptId.PASS_EVALUATION_USER: _assessment(True, 0.97),
        },
    ),
    RunShape(
        "three_pass",
        3,
        {
            PromptId.PLAN_GENERATION_USER: _plan(2),
            PromptId.PASS_EVALUATION_USER: [
                _assessment(False, 0.7),
                _assessment(False, 0.8),
                _assessment(True, 0.97),
            ],
            PromptId.RECURSIVE_REFINEMENT_USER: [_add_step("s3"), _add_step("s4")],
        },
    ),
    RunShape(
        "long_output",
        1,
        {
            PromptId.PLAN_GENERATION_USER: _plan(LONG_STEPS),
            PromptId.REASONING_STEP_USER: _long_output(),
            PromptId.PASS_EVALUATION_USER: _assessment(True, 0.97),
        },
    ),
)


async def run_events(ctx: BenchContext) -> dict[str, object]:
    """Each shape's run, hop by hop, and the two figures the event-size targets judge."""
    runs = {shape.name: await _measure(ctx, shape) for shape in SHAPES}
    one, three, long = (runs[name] for name in ("one_pass", "three_pass", "long_output"))
    growth = growth_by_type([one["hops"], three["hops"]])
    return {
        "long_output": {"steps": LONG_STEPS, "chars_per_step": LONG_OUTPUT_CHARS},
        "runs": runs,
        "growth_by_type_1_to_3_passes": growth,
        "max_growth_1_to_3_passes": max(growth.values(), default=math.nan),
        "largest_non_answer_3_passes_vs_1": round(
            ratio(
                three["largest_non_answer"]["body_bytes"], one["largest_non_answer"]["body_bytes"]
            ),
            3,
        ),
        "largest_non_answer_long_output_bytes": long["largest_non_answer"]["body_bytes"],
        "as_planned": all(runs[s.name]["passes"] == s.passes for s in SHAPES),
    }


def growth_by_type(runs: Iterable[Sequence[Mapping[str, Any]]]) -> dict[str, float]:
    """For each non-answer event type seen more than once over `runs` (in order): its largest
    later size ÷ its first size."""
    sizes: dict[str, list[int]] = defaultdict(list)
    for hops in runs:
        for hop in hops:
            if hop["type"] != ANSWER:
                sizes[hop["type"]].append(hop["body_bytes"])
    return {
        kind: round(ratio(max(seen[1:]), seen[0]), 3)
        for kind, seen in sizes.items()
        if len(seen) > 1
    }


async def _measure(ctx: BenchContext, shape: RunShape) -> dict[str, Any]:
    """One run of `shape` on a fresh worker; its events in order, with their sizes."""
    prefix = ctx.new_prefix(f"events-{shape.name.replace('_', '-')}")
    script = ctx.log_dir / f"{prefix}-script.json"
    script.write_text(json.dumps({key.value: value for key, value in shape.script.items()}))
    env = {"AEON_LLM": "scripted", "AEON_LLM_SCRIPT": str(script)}
    async with running_pipeline(ctx, prefix, env=env) as (_workers, gateway):
        try:
            result = await asyncio.wait_for(gateway.one_run(), ANSWER_TIMEOUT_S)
            status, passes = result.status, result.total_passes
        except TimeoutError:
            status, passes = f"no answer within {ANSWER_TIMEOUT_S:g} s", None
    hops = await _events_in_order(ctx, prefix)
    await ctx.clean(prefix)
    non_answer = [hop for hop in hops if hop["type"] != ANSWER]
    return {
        "status": status,
        "passes": passes,
        "complete": bool(hops) and hops[-1]["type"] == ANSWER,
        "hops": hops,
        "total_bytes": sum(hop["body_bytes"] for hop in hops),
        "largest": _largest(hops),
        "largest_non_answer": _largest(non_answer),
    }


async def _events_in_order(ctx: BenchContext, prefix: str) -> list[dict[str, Any]]:
    """The prefix's one run, from its RequestSubmitted along `causation_id`: type and size."""
    keys = Keys(prefix)
    children: dict[str | None, tuple[str, str, int]] = {}
    for stream in ALL_STREAMS:
        for _entry_id, fields in await ctx.redis.xrange(keys.stream(stream, 0)):
            body = fields[b"body"]
            head = orjson.loads(body)
            kind = fields[b"type"].decode()
            children[head.get("causation_id")] = (head["event_id"], kind, len(body))
    hops = []
    event = children.get(None)
    if event is None or event[1] != RequestSubmitted.__name__:
        raise RuntimeError(f"no RequestSubmitted found in the streams of prefix {prefix!r}")
    while event is not None:
        event_id, kind, size = event
        hops.append({"type": kind, "body_bytes": size})
        event = children.get(event_id)
    return hops


def _largest(hops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return dict(
        max(hops, key=lambda hop: hop["body_bytes"], default={"type": None, "body_bytes": 0})
    )
