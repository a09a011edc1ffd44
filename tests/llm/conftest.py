"""The fake OpenAI-compatible server as a fixture, and helpers to build LLM calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from openai_fake import FakeOpenAI, serve

from llm.base import LLMCall
from prompts.registry import PromptId, PromptInput
from prompts.unified import ContextItem, UnifiedPrompt


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with serve() as fake:
        yield fake


def build_call(prompt_id: PromptId, data: PromptInput, instructions: str = "Do it.") -> LLMCall:
    """An LLMCall with a small rendered prompt beside the typed input."""
    prompt = UnifiedPrompt(
        system_prompt="System text.",
        instructions=instructions,
        context=(ContextItem("artifact", "request", "the request <text>"),),
    )
    return LLMCall(prompt_id=prompt_id, input=data, prompt=prompt)


@pytest.fixture
def make_call() -> Callable[..., LLMCall]:
    """`make_call(prompt_id, input, instructions="Do it.")`; a fixture so tests import nothing."""
    return build_call
