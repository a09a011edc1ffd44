"""The one async interface every LLM adapter implements.

A call carries the PromptId and the validated prompt input beside the rendered UnifiedPrompt:
real adapters send only the XML, while the offline and scripted adapters answer from the id and
the typed input, which is what lets them fit every contract without parsing prose.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from aeonloop.prompts.registry import PromptId, PromptInput
from aeonloop.prompts.unified import UnifiedPrompt

if TYPE_CHECKING:
    from aeonloop.llm.outage import Outage


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
    #: The reply's token budget: the prompt contract's (PromptDefinition.reply_tokens), sent
    #: to the server unless AEON_LLM_MAX_TOKENS overrides it.
    max_tokens: int | None = None


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

    `transient` says the cause was the transport or the server's load (429, 5xx, an empty
    reply, a connection that failed), not the prompt or the model's judgement: the same call may
    work later, and a failure like this is no evidence about the task. `unreachable` says the
    server itself could not be reached or answered only 5xx: retried, it closes the adapter's
    outage gate (llm.outage) instead of failing the call.
    """

    def __init__(self, message: str, *, transient: bool = False, unreachable: bool = False) -> None:
        super().__init__(message)
        self.transient = transient or unreachable
        self.unreachable = unreachable


class ContextLengthError(LLMError):
    """The server refused the prompt as longer than its context window.

    `limit_tokens` is the window the server named in its message, when it named one; the caller
    may fit the prompt to a tighter budget and try once more.
    """

    def __init__(self, message: str, *, limit_tokens: int | None = None) -> None:
        super().__init__(message, transient=False)
        self.limit_tokens = limit_tokens


class LLMUnreachable(Exception):
    """The LLM server stayed unreachable until the request's deadline (llm.outage).

    Not an LLMError on purpose: the phases count an LLMError as a failed call, while this says
    nothing about the run but that its time ran out, so it ends as `deadline_exceeded`.
    """


class LLMNotReady(Exception):
    """At start, the configured LLM endpoint does not answer or does not serve the model.

    Its text is the one line the CLI prints (exit 6): the URL, what went wrong, what to do.
    """


@runtime_checkable
class LLMAdapter(Protocol):
    #: Model family, used to pick `prompts/templates/system/<family>-<phase>.md` before BASE.
    family: str
    #: The server's outage gate (llm.outage.Outage), for adapters that talk to one; workers
    #: read no new work while it is closed. None for in-process models.
    outage: Outage | None

    async def complete(self, call: LLMCall) -> LLMReply:
        """Send one prompt; raise LLMError when no usable reply can be had."""
        ...

    async def check(self) -> None:
        """At start: raise LLMNotReady unless the endpoint answers and serves the model."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
