"""The one async interface every LLM adapter implements.

A call carries the PromptId and the validated prompt input beside the rendered UnifiedPrompt:
real adapters send only the XML, while the offline and scripted adapters answer from the id and
the typed input, which is what lets them fit every contract without parsing prose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from prompts.registry import PromptId, PromptInput
from prompts.unified import UnifiedPrompt


@dataclass(frozen=True)
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True)
class LLMCall:
    prompt_id: PromptId
    input: PromptInput
    prompt: UnifiedPrompt


@dataclass(frozen=True)
class LLMReply:
    text: str
    usage: TokenUsage
    model: str


class LLMError(Exception):
    """An LLM call failed for good (after the adapter's own retries, or not worth retrying)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@runtime_checkable
class LLMAdapter(Protocol):
    #: Model family, used to pick `prompts/templates/system/<family>-<phase>.md` before BASE.
    family: str

    async def complete(self, call: LLMCall) -> LLMReply:
        """Send one prompt; raise LLMError when no usable reply can be had."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
