"""Helpers for the phase tests: scripted replies, deps, run states and a loop driver.

Every test talks to the real PromptRegistry through a ScriptedLLM with no fallback, so an
unscripted prompt fails loudly (as an LLMError the phase must handle) instead of being answered
by the offline model behind the test's back.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from aeonloop.bus.delivery import Delivery
from aeonloop.bus.route import RunRecord
from aeonloop.limits import Effort, LoopSettings
from aeonloop.llm.base import LLMCall
from aeonloop.phases import history
from aeonloop.phases.deps import PhaseDeps
from aeonloop.phases.events import (
    Event,
    LoopExited,
    PlanReady,
    RequestSubmitted,
    RunState,
    utcnow,
)
from aeonloop.phases.models import Plan, PlanStep, Rule, TaskProfile
from aeonloop.phases.worker import build_routes
from aeonloop.prompts.registry import PromptRegistry
from aeonloop.testing import DictMemo, ScriptedLLM

REQUEST = "Compare two ways to cache web pages, then recommend one."


@pytest.fixture
def delivered() -> Callable[[Event], Event]:
    """A fresh decode of an event, as the bus makes for every delivery and every retry.

    Handlers own the event they are given and may change its run in place (a deep copy per hop
    cost 12% of a worker's CPU), so a redelivery is modelled by decoding the bytes again.
    """
    return lambda event: type(event).model_validate_json(event.model_dump_json())


class Replies:
    """LLM replies (JSON text) that fit each prompt's output model."""

    @staticmethod
    def profile(
        depth: int = 3,
        info: float = 0.5,
        tool: str = "moderate",
        breadth: str = "moderate",
        confidence: str = "medium",
    ) -> str:
        return json.dumps(
            {
                "reasoning_depth": depth,
                "information_sufficiency": info,
                "expected_tool_usage": tool,
                "output_breadth": breadth,
                "confidence_requirement": confidence,
                "raw_inference": "scripted",
            }
        )

    @staticmethod
    def plan(*descriptions: str, ids: list[str] | None = None, goal: str = "a goal") -> str:
        ids = ids or [f"s{n}" for n in range(1, len(descriptions) + 1)]
        steps = [{"step_id": i, "description": d} for i, d in zip(ids, descriptions, strict=True)]
        return json.dumps({"plan": {"goal": goal, "steps": steps}})

    @staticmethod
    def validation(*issues: tuple[str, str]) -> str:
        """Issues as (severity, description)."""
        found = [{"severity": sev, "description": text} for sev, text in issues]
        return json.dumps({"issues": found, "summary": "scripted"})

    @staticmethod
    def assessment(
        completeness: float = 0.97,
        coherence: float = 0.95,
        answer_aligned: bool = True,
        converged: bool = True,
        reasons: tuple[str, ...] = (),
        issues: tuple[tuple[str, str], ...] = (),
    ) -> str:
        """A pass evaluation (PASS_EVALUATION_USER): the assessment, with the validation's
        `issues` as (severity, description); it fits CONVERGENCE_ASSESSMENT_USER too."""
        return json.dumps(
            {
                "issues": [{"severity": sev, "description": text} for sev, text in issues],
                "converged": converged,
                "completeness_score": completeness,
                "coherence_score": coherence,
                "consistency": {
                    "plan_aligned": True,
                    "step_aligned": True,
                    "answer_aligned": answer_aligned,
                },
                "reason_codes": list(reasons),
                "summary": "scripted",
            }
        )

    @staticmethod
    def weak(completeness: float = 0.8, issues: tuple[tuple[str, str], ...] = ()) -> str:
        """An assessment that misses the default rubric."""
        return Replies.assessment(
            completeness,
            0.9,
            answer_aligned=False,
            converged=False,
            reasons=("incomplete",),
            issues=issues,
        )

    @staticmethod
    def refinement(*actions: dict[str, Any]) -> str:
        return json.dumps({"actions": list(actions)})

    @staticmethod
    def action(kind: str, target: str | None, step_id: str, description: str) -> dict[str, Any]:
        """One refinement action whose new step is `step_id: description`."""
        return {
            "action_type": kind,
            "target_step_id": target,
            "new_step": {"step_id": step_id, "description": description},
            "reason": "scripted",
        }

    @staticmethod
    def add(step_id: str, description: str) -> dict[str, Any]:
        return Replies.action("ADD", None, step_id, description)

    @staticmethod
    def modify(target: str, description: str) -> dict[str, Any]:
        return Replies.action("MODIFY", target, target, description)

    @staticmethod
    def critique(*rule_ids: str) -> str:
        issues = [
            {"rule_id": r, "problem": f"{r} fails", "fix_instruction": f"fix {r}"} for r in rule_ids
        ]
        return json.dumps({"issues": issues})

    @staticmethod
    def step_output(call: LLMCall) -> str:
        """A step's output that repeats its description, so content checks can target it."""
        return f"[{call.input.step_id}] done: {call.input.step_description}"


@dataclass
class Harness:
    llm: ScriptedLLM
    deps: PhaseDeps


HarnessFactory = Callable[..., Harness]


@pytest.fixture
def replies() -> type[Replies]:
    return Replies


@pytest.fixture
def harness() -> HarnessFactory:
    """`harness(script, **loop_settings)`: a ScriptedLLM (no fallback) wired into PhaseDeps."""

    def make(script: Mapping[Any, Any], **settings: Any) -> Harness:
        llm = ScriptedLLM(script, fallback=None)
        deps = PhaseDeps(
            llm=llm, registry=PromptRegistry(), memo=DictMemo(), settings=LoopSettings(**settings)
        )
        return Harness(llm, deps)

    return make


def submitted(
    rules: list[Rule] | None = None, max_ttl: int | None = None, effort: Effort | None = None
) -> RequestSubmitted:
    return RequestSubmitted.new(REQUEST, timeout=600, rules=rules, max_ttl=max_ttl, effort=effort)


def plan_ready(
    *descriptions: str,
    rules: list[Rule] | None = None,
    ttl: int = 4,
    threshold: float = 0.8,
) -> PlanReady:
    """C's input: a run with a profile, TTL and a plan of pending steps s1..sN."""
    steps = [PlanStep(step_id=f"s{n}", description=d) for n, d in enumerate(descriptions, 1)]
    run = RunState(
        request=REQUEST,
        rules=rules or [],
        threshold=threshold,
        profile=TaskProfile.default(),
        ttl_remaining=ttl,
        plan=Plan(goal="a goal", steps=steps),
    )
    return PlanReady(correlation_id="run-1", deadline=utcnow() + timedelta(hours=1), run=run)


@pytest.fixture
def make_request() -> Callable[..., RequestSubmitted]:
    return submitted


@pytest.fixture
def make_plan_ready() -> Callable[..., PlanReady]:
    return plan_ready


async def drive_loop(event: Event, deps: PhaseDeps, max_hops: int = 40) -> list[Event]:
    """Feed each phase's single output to the next phase, routed as the worker app wires
    phases A-D, until the loop exits. Each event goes on as the bus hands it over: decoded
    from its JSON, with the run records its hop wrote kept in `deps.records`. Then each one's
    run is given its history back, as Phase E loads it, for the tests to look at."""
    handlers = {kind: route.handle for route in build_routes(deps, "abcd") for kind in route.types}
    trail: list[Event] = []
    while not isinstance(event, LoopExited):
        assert len(trail) < max_hops, "the loop did not end"
        outputs = await handlers[type(event).__name__](event, Delivery())
        deps.records.write([out for out in outputs if isinstance(out, RunRecord)])
        (made,) = [out for out in outputs if not isinstance(out, RunRecord)]
        event = type(made).model_validate_json(made.model_dump_json())
        trail.append(event)
    for made in trail:
        await history.load(deps.records, made.correlation_id, made.run)
    return trail


@pytest.fixture
def drive() -> Callable[..., Awaitable[list[Event]]]:
    return drive_loop
