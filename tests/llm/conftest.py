"""The fake OpenAI-compatible server as a fixture, and helpers to build LLM calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

import pytest
from openai_fake import SECRET, FakeOpenAI, serve

from aeonloop.llm.base import LLMCall
from aeonloop.llm.openai_adapter import OpenAIAdapter
from aeonloop.prompts.registry import PromptId, PromptInput
from aeonloop.prompts.unified import ContextItem, UnifiedPrompt


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with serve() as fake:
        yield fake


@pytest.fixture
async def adapter_for(fake_openai: FakeOpenAI):
    """`adapter_for(**overrides)`: an OpenAIAdapter on the fake server with quick retries."""
    adapters: list[OpenAIAdapter] = []

    def build(**overrides: object) -> OpenAIAdapter:
        options = {
            "base_url": fake_openai.base_url,
            "model": "fake-model",
            "api_key": SECRET,
            "timeout": 2.0,
            "max_retries": 2,
            "backoff_base": 0.01,
            "backoff_max": 0.02,
        }
        adapter = OpenAIAdapter(**{**options, **overrides})
        adapters.append(adapter)
        return adapter

    yield build
    for adapter in adapters:
        await adapter.aclose()


def build_call(
    prompt_id: PromptId,
    data: PromptInput,
    instructions: str = "Do it.",
    deadline: datetime | None = None,
) -> LLMCall:
    """An LLMCall with a small rendered prompt beside the typed input."""
    prompt = UnifiedPrompt(
        system_prompt="System text.",
        instructions=instructions,
        context=(ContextItem("artifact", "request", "the request <text>"),),
    )
    return LLMCall(prompt_id=prompt_id, input=data, prompt=prompt, deadline=deadline)


@pytest.fixture
def make_call() -> Callable[..., LLMCall]:
    """`make_call(prompt_id, input, instructions="Do it.", deadline=None)`; a fixture so tests
    import nothing."""
    return build_call
