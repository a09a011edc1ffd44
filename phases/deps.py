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

from llm.base import LLMAdapter
from phases.events import Usage
from phases.llm_calls import DictMemo, LLMSession, Memo
from prompts.registry import PromptRegistry


@dataclass(frozen=True)
class LoopSettings:
    """Bounds of the C-loop; every one is an environment setting (README, Configuration)."""

    max_passes: int = 8
    max_actions_per_pass: int = 5
    max_refinements_per_run: int = 20
    stagnation_epsilon: float = 0.02
    allow_executable_checks: bool = False
    executable_check_timeout: float = 10.0

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
        )


@dataclass
class PhaseDeps:
    llm: LLMAdapter
    registry: PromptRegistry
    memo: Memo = field(default_factory=DictMemo)
    settings: LoopSettings = field(default_factory=LoopSettings)

    def session(self, run_key: str, usage: Usage) -> LLMSession:
        """LLM access for one run; `usage` is the run's running total, updated in place."""
        return LLMSession(self.llm, self.registry, self.memo, run_key, usage)
