"""The one async interface every LLM adapter implements.

A call carries the PromptId and the validated prompt input beside the rendered UnifiedPrompt:
real adapters send only the XML, while the offline and scripted adapters answer from the id and
the typed input, which is what lets them fit every contract without parsing prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from aeonloop.exceptions import ContextLengthError as ContextLengthError
from aeonloop.exceptions import LLMError as LLMError
from aeonloop.exceptions import LLMNotReady as LLMNotReady
from aeonloop.exceptions import LLMUnreachable as LLMUnreachable
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
    #: Prompt tokens the server's prompt cache reused, as it reported them; None: it reported
    #: nothing (never 0 for "not reported").
    cached_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.estimated or other.estimated,
            _reported_sum(self.cached_tokens, other.cached_tokens),
        )


def _reported_sum(one: int | None, other: int | None) -> int | None:
    """The sum of two counts a server may not report: None only when neither was."""
    if one is None and other is None:
        return None
    return (one or 0) + (other or 0)


#: How JSON prompts ask a server for structured output: `auto` starts at json_schema and steps
#: down (json_object, then none) when the server refuses; `json_object` starts there.
StructuredOutput = Literal["auto", "json_object", "off"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("auto", "json_object", "off")


def approx_tokens(length: int) -> int:
    """About four characters per token: what a usage report without a tokenizer can say."""
    return max(1, length // 4)


class TextSink(Protocol):
    """Where a call's answer text goes as the model writes it (the answer's deltas, issue 34).

    An adapter that streams writes each piece of the answer (never reasoning) as it arrives; one
    that gets its reply whole writes it once. When an attempt is void (cut, then sent again),
    the adapter calls `reset` before the next attempt writes: what was written is not the reply.
    The reply the call returns stays the truth; the pieces written since the last reset join to
    its text.
    """

    async def write(self, text: str) -> None: ...

    async def reset(self) -> None: ...


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
    #: Sent as one plain call sends it: the instructions alone (the request itself), not the
    #: prompt's XML, unless it has context to carry (llm.session.PLAIN).
    plain: bool = False
    #: Where the answer's text is written as it comes, for a call whose reply may be published;
    #: None for every other call. Not part of what the call is (equality, memo keys).
    sink: TextSink | None = field(default=None, compare=False)

    @property
    def message(self) -> str:
        """The user message a server is sent: the instructions alone for a plain call with no
        context, else the whole prompt as XML."""
        if self.plain and not self.prompt.context:
            return self.prompt.instructions
        return self.prompt.to_xml()


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
