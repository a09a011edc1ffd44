"""The LLM rate limit's end-to-end tests (issue 42): a stand-in provider and the slots it holds.

Shared by the limit tests under load and kills (test_llm_limit.py) and across a Redis restart
(test_redis_restart.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from e2e_support import Bus
from openai_fake import FakeOpenAI, Planned, Seen
from openai_styles import CASES, PipelineModel

from aeonloop.bus.keys import Keys
from aeonloop.settings import redact

#: The model the stand-in lists and the workers ask for.
MODEL = "stand-in"


def stand_in_env(server: FakeOpenAI) -> dict[str, str]:
    """A worker's settings for the stand-in provider."""
    return {
        "AEON_LLM": "openai",
        "AEON_LLM_BASE_URL": server.base_url,
        "AEON_LLM_MODEL": MODEL,
        "AEON_LLM_TIMEOUT": "20",
    }


def slowed(seconds: float) -> Callable[[Seen], Planned]:
    """The pipeline's replies, each taking at least `seconds`: long enough to be mid-call when
    a worker is killed or Redis goes."""
    model = PipelineModel(CASES["plain"])

    def slow(seen: Seen) -> Planned:
        planned = model(seen)
        return replace(planned, sleep=max(planned.sleep, seconds))

    return slow


def slots_held(bus: Bus, server: FakeOpenAI) -> int:
    """Slots of the calls-in-flight limit whose lease has not ended by Redis's clock (an ended
    one is dropped lazily, at the next call's take)."""
    in_flight = Keys(bus.prefix).llm_limit(redact(server.base_url), MODEL)[2]
    seconds, micros = bus.redis.time()
    return bus.redis.zcount(in_flight, f"({seconds * 1000 + micros // 1000}", "+inf")


def slots_taken(bus: Bus, server: FakeOpenAI) -> int:
    """Slots in the calls-in-flight set, their leases ended or not."""
    return bus.redis.zcard(Keys(bus.prefix).llm_limit(redact(server.base_url), MODEL)[2])
