"""What every phase handler is given: the LLM, the registry, the memo and the loop's limits.

Handlers are plain async functions `(event, deps) -> list[Event]`; the bus runtime decodes the
event, calls the handler, and publishes what it returns. Keeping the bus out of handlers lets the
loop's logic be tested with a scripted LLM and no Redis at all. A handler owns the event it is
given and may grow its run in place: the bus decodes a fresh copy for every delivery and retry,
which is cheaper than a deep copy per hop (measured at 12% of a worker's CPU).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from llm.base import LLMAdapter
from llm.factory import env_number
from phases.events import Usage
from phases.llm_calls import (
    DEFAULT_CONTEXT_TOKENS,
    DictMemo,
    LLMSession,
    Memo,
    prompt_budget_chars,
)
from prompts.registry import PromptRegistry


@dataclass(frozen=True)
class LoopSettings:
    """Bounds of a run; every one is an environment setting (README, Configuration)."""

    max_passes: int = 8
    max_actions_per_pass: int = 5
    max_refinements_per_run: int = 20
    stagnation_epsilon: float = 0.02
    allow_executable_checks: bool = False
    executable_check_timeout: float = 10.0
    #: The model's context window in tokens: every prompt is fitted to it (AEON_LLM_CONTEXT_TOKENS).
    llm_context_tokens: int = DEFAULT_CONTEXT_TOKENS
    #: Characters of a step's output kept in the run; the rest is cut with a marker, so model
    #: verbosity cannot grow an event past AEON_MAX_EVENT_BYTES.
    max_step_output_chars: int = 20_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> LoopSettings:
        return cls(
            max_passes=int(env.get("AEON_MAX_PASSES", cls.max_passes)),
            max_actions_per_pass=int(
                env.get("AEON_MAX_ACTIONS_PER_PASS", cls.max_actions_per_pass)
            ),
            max_refinements_per_run=int(
                env.get("AEON_MAX_REFINEMENTS_PER_RUN", cls.max_refinements_per_run)
            ),
            stagnation_epsilon=float(env.get("AEON_STAGNATION_EPSILON", cls.stagnation_epsilon)),
            allow_executable_checks=env.get("AEON_ALLOW_EXECUTABLE_CHECKS", "0") == "1",
            executable_check_timeout=float(
                env.get("AEON_EXECUTABLE_CHECK_TIMEOUT", cls.executable_check_timeout)
            ),
            llm_context_tokens=_whole(env, "AEON_LLM_CONTEXT_TOKENS", cls.llm_context_tokens),
            max_step_output_chars=_whole(
                env, "AEON_MAX_STEP_OUTPUT_CHARS", cls.max_step_output_chars
            ),
        )


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    return int(env_number(env, name, default, minimum=1, integer=True))


@dataclass
class PhaseDeps:
    llm: LLMAdapter
    registry: PromptRegistry
    memo: Memo = field(default_factory=DictMemo)
    settings: LoopSettings = field(default_factory=LoopSettings)

    def session(self, run_key: str, usage: Usage, deadline: datetime | None = None) -> LLMSession:
        """LLM access for one run; `usage` is the run's running total, updated in place."""
        return LLMSession(
            self.llm,
            self.registry,
            self.memo,
            run_key,
            usage,
            deadline=deadline,
            prompt_chars=prompt_budget_chars(self.settings.llm_context_tokens),
        )
