"""The one async interface every LLM adapter implements.

A call carries the PromptId and the validated prompt input beside the rendered UnifiedPrompt:
real adapters send only the XML, while the offline and scripted adapters answer from the id and
the typed input, which is what lets them fit every contract without parsing prose.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from aeonloop.prompts.registry import PromptId, PromptInput
from aeonloop.prompts.unified import UnifiedPrompt


@dataclass(frozen=True)
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: No server counted these tokens (one sent no usage, or no server was called, as with the
    #: offline model), so the counts are estimated from the text's length.
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.estimated or other.estimated,
        )


#: How JSON prompts ask a server for structured output: `auto` starts at json_schema and steps
#: down (json_object, then none) when the server refuses; `json_object` starts there.
StructuredOutput = Literal["auto", "json_object", "off"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("auto", "json_object", "off")


def approx_tokens(length: int) -> int:
    """About four characters per token: what a usage report without a tokenizer can say."""
    return max(1, length // 4)


@dataclass(frozen=True)
class LLMCall:
    prompt_id: PromptId
    input: PromptInput
    prompt: UnifiedPrompt
    #: JSON schema of the reply, for JSON prompts: adapters that can ask the server for
    #: structured output send it; the reply is validated by the caller either way.
    response_schema: dict[str, Any] | None = None
    #: No attempt or retry starts after this moment (the request's deadline).
    deadline: datetime | None = None


@dataclass(frozen=True)
class LLMReply:
    """The answer part of a reply: reasoning blocks and fields are never in `text`."""

    text: str
    usage: TokenUsage
    model: str
    #: The server stopped at its length limit (finish_reason "length"): `text` is incomplete.
    truncated: bool = False
    #: The model refused (the server's `refusal` field); `text` holds its words.
    refused: bool = False


class LLMError(Exception):
    """An LLM call failed for good (after the adapter's own retries, or not worth retrying).

    `transient` says the cause was the transport or the server's load (connection, timeout,
    429, 5xx, empty reply), not the prompt or the model's judgement: the same call may work
    later, and a failure like this is no evidence about the task.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class ContextLengthError(LLMError):
    """The server refused the prompt as longer than its context window.

    `limit_tokens` is the window the server named in its message, when it named one; the caller
    may fit the prompt to a tighter budget and try once more.
    """

    def __init__(self, message: str, *, limit_tokens: int | None = None) -> None:
        super().__init__(message, transient=False)
        self.limit_tokens = limit_tokens


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
