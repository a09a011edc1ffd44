"""The chat endpoint's bodies, as OpenAI's Chat Completions API has them: what
`POST /v1/chat/completions` takes, the completion and the stream's chunks it answers with, and
`GET /v1/models`. One definition serves the endpoint (gateway.http.chat) and its OpenAPI
document (gateway.http.openapi).

What a request asks that Aeon cannot honour is refused, one line naming the field (`n` above
1, a JSON response format, log probabilities, audio, functions of the client to call); the
standard fields that tune one model call (`temperature`, `max_tokens`, ...) are taken and
ignored, as a run makes many calls of the server's own model (IGNORED_FIELDS); any other field
is refused, as OpenAI refuses a field it does not know.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_serializer,
    model_validator,
)

from aeonloop.contracts import Usage
from aeonloop.gateway.http.models import Links, RunOptions, WholeNumber, links
from aeonloop.gateway.http.run_steps import checks_not_held, degraded_because
from aeonloop.limits import Effort
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import ExitReason

#: The one model the endpoint serves: Aeon's whole loop, on the server's own model.
MODEL_ID = "aeon"
#: Standard fields that tune a single model call: taken, and ignored (a run makes many calls,
#: with the server's settings).
IGNORED_FIELDS = frozenset(
    {
        "frequency_penalty",
        "logit_bias",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "moderation",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "temperature",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
#: About how many characters each `content` chunk of a streamed answer holds (cut after a
#: space, so a word is never split).
ANSWER_PIECE_CHARS = 64
_WORD = re.compile(r"\S+\s*|\s+")

FinishReason = Literal["stop", "length"]
#: OpenAI's `reasoning_effort` values, and the run's effort each asks for (limits.Effort).
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
EFFORT_OF: dict[str, Effort] = {
    "none": "low",
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = Field(
        False, strict=True, description="send the run's usage in a last chunk, `choices` empty"
    )


class OpenAIFields(BaseModel):
    """The fields of OpenAI's Chat Completions API that Aeon reads (IGNORED_FIELDS aside), each
    refused where it asks what a run cannot do."""

    model: str = Field(description=f"`{MODEL_ID}`, the one model `GET /v1/models` lists")
    messages: list[dict[str, Any]] = Field(
        min_length=1,
        description="the conversation, oldest first: the last message is the user's request "
        "to answer, the ones before it its earlier turns (system and developer messages as "
        "user turns). Content is a string or a list of `text` parts",
    )
    stream: bool = Field(
        False,
        strict=True,
        description="send `chat.completion.chunk` events: the run's progress as "
        "`reasoning_content`, then the answer as `content`, then `data: [DONE]`",
    )
    stream_options: StreamOptions | None = None
    n: WholeNumber | None = Field(None, description="1: Aeon makes one answer per request")
    response_format: dict[str, Any] | None = Field(
        None, description='`{"type": "text"}` only: the answer is text'
    )
    logprobs: bool | None = Field(None, description="false only: a run has no log probabilities")
    top_logprobs: WholeNumber | None = Field(None, description="0 only")
    modalities: list[str] | None = Field(None, description='`["text"]` only')
    audio: dict[str, Any] | None = Field(None, description="null only: the answer is text")
    functions: list[Any] | None = Field(None, description="none: Aeon calls its own tools")
    function_call: Any = Field(None, description='none, or "none" or "auto"')
    tool_choice: Any = Field(None, description='none, or "none" or "auto"')
    reasoning_effort: ReasoningEffort | None = Field(
        None,
        description="how hard the run works (AEON_EFFORT, docs/configuration.md): `none`, "
        "`minimal` or `low` run the draft path only (one call's answer, repaired, rewritten "
        "once); `medium` the loop where it adds something; `high` or `xhigh` the loop always; "
        "omitted or null: the server's AEON_EFFORT",
    )

    def effort(self) -> Effort | None:
        """The run's effort for `reasoning_effort` (None: the workers' AEON_EFFORT)."""
        return None if self.reasoning_effort is None else EFFORT_OF[self.reasoning_effort]

    @field_validator("messages", mode="before")
    @classmethod
    def _some(cls, messages: Any) -> Any:
        # Before min_length's own check, whose words are pydantic's ("List should have at least
        # 1 item after validation, not 0"), not a caller's.
        if isinstance(messages, list) and not messages:
            raise ValueError("holds no message: give at least one, the last the request to answer")
        return messages

    @field_validator("n")
    @classmethod
    def _one(cls, n: int | None) -> int | None:
        if n not in (None, 1):
            raise ValueError(f"must be 1 or left out: Aeon makes one answer per request (got {n})")
        return n

    @field_validator("response_format")
    @classmethod
    def _text(cls, given: dict[str, Any] | None) -> dict[str, Any] | None:
        if given is not None and given.get("type") != "text":
            raise ValueError(
                'must be {"type": "text"} or left out: Aeon answers in text and cannot promise '
                "JSON; ask for the shape you want in the request, or as rules (extra_body)"
            )
        return given

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _no_logprobs(cls, given: bool | int | None) -> bool | int | None:
        if given:
            raise ValueError("must be left out: a run's answer has no log probabilities")
        return given

    @field_validator("modalities", "audio")
    @classmethod
    def _no_audio(cls, given: Any) -> Any:
        if given not in (None, ["text"]):
            raise ValueError('must be left out (or ["text"] for modalities): Aeon answers in text')
        return given

    @field_validator("functions")
    @classmethod
    def _no_functions(cls, given: list[Any] | None) -> list[Any] | None:
        if given:
            raise ValueError(f"must be left out: {_NO_FUNCTIONS}")
        return given

    @field_validator("function_call", "tool_choice")
    @classmethod
    def _no_call(cls, given: Any) -> Any:
        if given not in (None, "none", "auto"):
            raise ValueError(f'must be "none", "auto" or left out: {_NO_FUNCTIONS}')
        return given

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


# Inherited in this order so OpenAI's fields come first, as its clients' users look for them.
class ChatRequest(RunOptions, OpenAIFields):
    """A chat completion request: OpenAI's fields, and a run's own options as extra fields (the
    OpenAI SDKs' `extra_body`), checked as `POST /v1/runs` checks them."""

    model_config = ConfigDict(extra="ignore")  # IGNORED_FIELDS; unknown_field refuses others

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_names(cls, given: Any) -> Any:
        """OpenAI's `tools` are functions for the client to run; Aeon's are the names of its
        own tools (RunOptions.tools), which its steps call themselves."""
        if isinstance(given, list) and any(isinstance(tool, Mapping) for tool in given):
            raise ValueError(
                "must be a list of Aeon's own tools by name (AEON_MCP_CONFIG's), not functions: "
                + _NO_FUNCTIONS
            )
        return given


_NO_FUNCTIONS = (
    "Aeon does not hand function calls back to the client, its steps call the server's own "
    "tools; leave functions, function_call and tool_choice out"
)


def unknown_field(data: Any) -> str | None:
    """The first field of a request body that is neither OpenAI's nor a run's, if any."""
    if not isinstance(data, Mapping):
        return None  # the model says what the body must be
    known = ChatRequest.model_fields.keys() | IGNORED_FIELDS
    return next((name for name in data if name not in known), None)


def unknown_field_reason() -> str:
    aeon = ", ".join(RunOptions.model_fields)
    return (
        "is not a field of a chat completion request here: Aeon takes OpenAI's standard "
        f"fields and, as extra fields, a run's own: {aeon} (docs/chat.md)"
    )


# -- what it answers ---------------------------------------------------------------------------


class PromptTokensDetails(BaseModel):
    """Of the prompt tokens, those the LLM servers' prompt caches reused."""

    cached_tokens: int


class CompletionUsage(BaseModel):
    """The run's token counts, over every LLM call it made (Aeon's `usage` has the rest).
    `prompt_tokens_details` is null where no server reported its cache: "not reported", not 0
    cached tokens."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, usage: Usage) -> CompletionUsage:
        cached = usage.cached_tokens
        details = None if cached is None else PromptTokensDetails(cached_tokens=cached)
        return cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
            prompt_tokens_details=details,
        )


class ChatOutcome(BaseModel):
    """How the run ended, beside OpenAI's fields (the `aeon` field of a completion and of a
    stream's last choice chunk): what a chat client cannot say in `finish_reason`."""

    correlation_id: str = Field(description="the run's id (also the completion's `id`)")
    status: ExitReason = Field(description="how the loop ended: converged, cancelled, ...")
    degraded: bool = Field(description="the answer was made short of a converged loop")
    degraded_because: list[str] = Field(description="why, one plain line each")
    checks_not_held: list[str] = Field(description="each check of the answer that did not hold")
    notes: str | None = Field(
        None,
        description="the answer's notes: the host's account of a run that did not go well, "
        "beside the model's text, which the completion's content is alone",
    )
    total_passes: int
    usage: Usage = Field(description="the run's usage in full: calls, estimated, budget")
    links: Links


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str = Field(description="the answer's text, as the run published it")


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    """The answer of a run asked with `stream: false`."""

    id: str = Field(description="the run's correlation id")
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(description="when the run was asked (Unix seconds)")
    model: str = MODEL_ID
    choices: list[Choice]
    usage: CompletionUsage
    aeon: ChatOutcome


class Delta(BaseModel):
    """What one chunk adds; only the fields it carries are sent. The reasoning goes under both
    names clients read it by: `reasoning_content`, and `reasoning`, vLLM's name for it since
    January 2026."""

    role: Literal["assistant"] | None = None
    reasoning_content: str | None = Field(
        None, description="a line of the run's progress, as `aeon ask` prints it"
    )
    reasoning: str | None = Field(
        None, description="the same as `reasoning_content`, under vLLM's name for it"
    )
    content: str | None = Field(None, description="the next piece of the answer's text")

    @model_validator(mode="after")
    def _both_names(self) -> Self:
        if self.reasoning is None:
            self.reasoning = self.reasoning_content
        return self

    # No return annotation: the schema stays this model's, each field optional.
    @model_serializer(mode="wrap")
    def _carried(self, handler):  # type: ignore[no-untyped-def]
        return {name: value for name, value in handler(self).items() if value is not None}


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    logprobs: None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    """One `data:` event of a streamed completion."""

    id: str = Field(description="the run's correlation id")
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str = MODEL_ID
    choices: list[ChunkChoice] = Field(description="one; none in the usage chunk")
    usage: CompletionUsage | None = Field(
        None, description="with `stream_options.include_usage`: null but in the last chunk"
    )
    aeon: ChatOutcome | None = Field(None, description="in the chunk with `finish_reason`")


class Model(BaseModel):
    id: str = MODEL_ID
    object: Literal["model"] = "model"
    created: int = Field(description="when this server started (Unix seconds)")
    owned_by: str = "aeon"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class OpenAIErrorDetail(BaseModel):
    message: str = Field(description="what is wrong, and what to do")
    type: str = Field(description="invalid_request_error, authentication_error, ...")
    param: str | None = Field(description="the field, parameter or header at fault")
    code: str | None = Field(description="Aeon's word for it: bad_input, unauthorized, ...")


class OpenAIError(BaseModel):
    """A refusal on the endpoints that speak OpenAI's API, in its shape."""

    error: OpenAIErrorDetail


# -- made from a run ---------------------------------------------------------------------------


def finish_reason(result: ExecutionResult) -> FinishReason:
    """`length` when the run's token budget ended it (as a reply cut short by `max_tokens`),
    else `stop`: every other ending, degraded, failed, cancelled or past its deadline
    included, publishes one answer, and its text is the completion's; `aeon.status` says how
    the run ended."""
    return "length" if result.status is ExitReason.BUDGET_EXHAUSTED else "stop"


def outcome(correlation_id: str, result: ExecutionResult) -> ChatOutcome:
    return ChatOutcome(
        correlation_id=correlation_id,
        status=result.status,
        degraded=result.degraded,
        degraded_because=degraded_because(result),
        checks_not_held=checks_not_held(result),
        notes=result.final_answer.notes,
        total_passes=result.total_passes,
        usage=result.usage,
        links=links(correlation_id),
    )


def completion(correlation_id: str, created: int, result: ExecutionResult) -> ChatCompletion:
    message = AssistantMessage(content=result.final_answer.answer_text)
    return ChatCompletion(
        id=correlation_id,
        created=created,
        choices=[Choice(message=message, finish_reason=finish_reason(result))],
        usage=CompletionUsage.of(result.usage),
        aeon=outcome(correlation_id, result),
    )


def answer_pieces(text: str, size: int = ANSWER_PIECE_CHARS) -> list[str]:
    """`text` in pieces of about `size` characters, each cut after a space (a longer word is a
    piece of its own): the stream's `content` deltas, which join to `text` exactly."""
    pieces: list[str] = []
    piece = ""
    for word in _WORD.findall(text):
        if piece and len(piece) + len(word) > size:
            pieces.append(piece)
            piece = ""
        piece += word
    return [*pieces, piece] if piece else pieces


class Chunks:
    """The chunks of one streamed completion, each as the JSON of a `data:` line."""

    def __init__(self, correlation_id: str, created: int, include_usage: bool) -> None:
        self.correlation_id = correlation_id
        self.created = created
        self.include_usage = include_usage

    def delta(self, **fields: str) -> str:
        return self._json([ChunkChoice(delta=Delta(**fields))])

    def finish(self, result: ExecutionResult) -> str:
        """The last choice chunk: why it finished, and how the run ended."""
        choice = ChunkChoice(delta=Delta(), finish_reason=finish_reason(result))
        return self._json([choice], aeon=outcome(self.correlation_id, result))

    def usage(self, result: ExecutionResult) -> str:
        """The usage chunk, after the last choice chunk, as OpenAI sends it."""
        return self._json([], usage=CompletionUsage.of(result.usage))

    def _json(self, choices: list[ChunkChoice], **extra: Any) -> str:
        chunk = ChatCompletionChunk(
            id=self.correlation_id, created=self.created, choices=choices, **extra
        )
        # `usage` is null in every chunk but the last when it is asked for, else left out.
        left_out = {"aeon"} if chunk.aeon is None else set()
        if not self.include_usage:
            left_out.add("usage")
        return chunk.model_dump_json(exclude=left_out)
