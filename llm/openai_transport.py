"""One request to an OpenAI-compatible chat endpoint, judged by its progress, made into a reply
the caller can trust to be one.

How a UnifiedPrompt is sent: one user message (`LLMCall.message`) carrying the whole
`prompt.to_xml()` (a plain call with nothing to carry: the request alone), with
`<system_prompt>`, `<context>` and `<instructions>` telling the parts apart, so no adapter carries
per-agent formatting logic and every family sees the same bytes. Splitting the system prompt
into a chat "system" message as well would repeat it, paying its tokens twice per call.

Every call streams (`stream: true`, asking for the usage with `stream_options` where the server
takes it; the options as the server takes them now: llm.openai_stepdowns), and is judged by its
progress, not its length (llm.streaming): it is cut only when no first token comes within the
first-token bound (AEON_LLM_TIMEOUT, plus AEON_LLM_FIRST_TOKEN_PER_1K_S for each 1,000 tokens of
prompt the server must process first, and run again whenever the server writes for another of
this adapter's calls: queued behind it, a call is waiting, not stalled), no further token within
AEON_LLM_IDLE_TIMEOUT, or the request's deadline passes. A call sent whole has one "token", its
reply, so its bound is the first-token bound plus AEON_LLM_WHOLE_REPLY_PER_1K_S for each 1,000
tokens of its reply budget. A stream that ends with no finish reason was cut short: the request
is sent again at once, one at a time from then on (`StepDowns.cut_short`).

A call that carries a sink (`LLMCall.sink`) gets its answer written to it as it streams, never
its reasoning, reset before a later attempt writes (llm.streaming.Relay).

What comes back: reasoning is not the answer (`<think>` blocks in the content, llm.reasoning, and
the separate `reasoning_content` / `reasoning` fields never reach `LLMReply.text`);
`finish_reason: "length"` marks the reply truncated; the server's `refusal` field (and
`finish_reason: "content_filter"`) marks it refused; an empty reply is a transient failure;
usage comes from the server's `usage`, and where it sends none, it is estimated and marked so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, replace
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from aeonloop.exceptions import LLMError
from aeonloop.llm.base import LLMCall, LLMReply, TokenUsage, approx_tokens
from aeonloop.llm.limiter import RateLimiter, Slot
from aeonloop.llm.openai_errors import Endpoint, cause
from aeonloop.llm.openai_retry import seconds_left
from aeonloop.llm.openai_stepdowns import StepDowns, Streaming, schema_sent
from aeonloop.llm.reasoning import opened_in_prompt, split_reasoning
from aeonloop.llm.streaming import Assembled, Relay, Watch
from aeonloop.prompts.registry import schema_in_text

#: The reply budget a whole call's bound allows for when the call sends none (the server's own
#: applies): generous, since a reply's length is then unknown.
UNBUDGETED_REPLY_TOKENS = 4_096


@dataclass(frozen=True)
class Bounds:
    """The time a call's reply may take, judged by its progress (llm.streaming)."""

    #: Seconds to a call's first token, before the prompt's share (first_token_per_1k).
    timeout: float = 60.0
    #: Seconds a streaming reply may go without a token once it has begun.
    idle_timeout: float = 30.0
    #: More seconds to the first token for each 1,000 tokens of prompt.
    first_token_per_1k: float = 30.0
    #: More seconds a whole (not streamed) reply may take for each 1,000 tokens of its budget.
    whole_reply_per_1k: float = 120.0

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {self.timeout!r}")
        if self.idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive seconds, got {self.idle_timeout!r}")
        for name in ("first_token_per_1k", "whole_reply_per_1k"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)!r}")


class Transport:
    """Sends one call's requests to one model, as its step-downs say, within its time bounds."""

    def __init__(
        self, client: openai.AsyncOpenAI, names: Endpoint, steps: StepDowns, bounds: Bounds
    ) -> None:
        self._client = client
        self._names = names
        self._steps = steps
        self._bounds = bounds
        #: The watches of the attempts at the server: what one gets tells the others the server
        #: is working (Watch.elsewhere).
        self._watches: set[Watch] = set()
        #: The model's replies begin inside a thinking block its prompt opened (learnt from a
        #: reply): streamed answers are held back until the block closes (llm.streaming.Relay).
        self.opens_in_prompt = False
        #: The rate limit shared with other workers, where one is set (llm.limiter).
        self.limiter: RateLimiter | None = None

    def _slot(
        self, call: LLMCall, max_tokens: int | None
    ) -> contextlib.AbstractAsyncContextManager[Slot | None]:
        """A slot of the shared limit for one request: its prompt's estimate and its reply
        budget, settled when the reply comes to what the server counted; none without a limit."""
        if self.limiter is None:
            return contextlib.nullcontext()
        estimate = self._prompt_tokens(call) + (max_tokens or UNBUDGETED_REPLY_TOKENS)
        return self.limiter.slot(estimate, call.deadline)

    async def attempt(self, call: LLMCall, max_tokens: int | None, relay: Relay) -> LLMReply:
        """One answered request; a refused option (response_format, streaming) is stepped down
        and the request sent again, as is a stream the server cut short. Each request takes a
        slot of the shared rate limit first, where one is set (`limiter`), before its time
        bounds start: waiting for the limit is no stall."""
        while True:
            sent_format, sent_streaming = self._steps.response_format, self._steps.streaming
            options = self._steps.options(call, max_tokens)
            streamed = "stream" in options
            first = self.first_token_s(call) if streamed else self.whole_reply_s(call, max_tokens)
            relay.next_attempt()
            async with self._slot(call, max_tokens) as slot:
                try:
                    async with (
                        self._steps.turn(call, self._names.describe) as alone,
                        asyncio.timeout(None) as timer,
                    ):
                        left = self._left_to_send(call)
                        watch = Watch(timer, first, self._bounds.idle_timeout, left)
                        reply = await self._watched(call, options, watch, relay, sent_streaming)
                except TimeoutError:
                    if not timer.expired():
                        raise
                    raise self._cut(call, watch, max_tokens, streamed=streamed) from None
                except openai.APIConnectionError as exc:
                    detail = f"cannot reach {self._names.where} ({self._names.scrub(cause(exc))})"
                    raise LLMError(self._names.describe(call, detail), unreachable=True) from None
                except openai.APIStatusError as exc:
                    if self._steps.step_down(exc, options, sent_format, sent_streaming):
                        continue
                    raise self._names.status_error(call, exc) from None
                except openai.APIError as exc:  # an error event in the middle of a stream
                    raise self._names.stream_error(call, exc) from None
                except openai.OpenAIError as exc:
                    detail = f"{type(exc).__name__}: {self._names.scrub(str(exc))}"
                    raise LLMError(self._names.describe(call, detail), transient=False) from None
                if reply is None:  # no event stream, and no answer in what came: send it whole
                    continue
                if reply.cut_short:
                    self._steps.cut_short(sent_streaming, alone=alone)
                    continue
                answer = self._reply(call, reply)
                if slot is not None:
                    await slot.settle(answer.usage.total_tokens)
                return answer

    async def _watched(
        self,
        call: LLMCall,
        options: dict[str, Any],
        watch: Watch,
        relay: Relay,
        sent: Streaming,
    ) -> Assembled | None:
        """`_send`, with its watch among those of the attempts at the server, and its answer,
        when one comes, said to the others as the server's work (`_progressed`)."""
        self._watches.add(watch)
        try:
            reply = await self._send(call, options, watch, relay, sent)
        finally:
            self._watches.discard(watch)
        self._progressed(watch)
        return reply

    def _progressed(self, watch: Watch) -> None:
        """The server wrote for the attempt `watch` watches: the others still waiting for a
        first token are queued behind it, not stalled (Watch.elsewhere)."""
        for other in self._watches:
            if other is not watch:
                other.elsewhere()

    async def _send(
        self,
        call: LLMCall,
        options: dict[str, Any],
        watch: Watch,
        relay: Relay,
        sent: Streaming,
    ) -> Assembled | None:
        """The reply to one request, streamed when `options` ask for it: each chunk that carries
        some of it tells `watch` the call is making progress, and its answer goes to `relay`."""
        messages = [{"role": "user", "content": _message(call, options)}]
        if not options.get("stream"):
            completion = await self._client.chat.completions.create(
                model=self._names.model, messages=messages, **options
            )
            return Assembled.whole(completion)
        stream = await self._client.chat.completions.create(
            model=self._names.model, messages=messages, **options
        )
        async with stream:
            kind = stream.response.headers.get("content-type", "")
            if not kind.startswith("text/event-stream"):
                return await self._unstreamed(stream.response, kind, sent)
            reply = Assembled()
            async for chunk in stream:
                written = len(reply.content)
                if reply.add(chunk):
                    watch.token()
                    self._progressed(watch)
                if len(reply.content) > written:
                    await relay.show(reply.content)
            return reply

    async def _unstreamed(self, response: Any, kind: str, sent: Streaming) -> Assembled | None:
        """A server that answered `stream: true` with no event stream ignores streaming: calls
        are sent whole from now on. What it sent is the answer when it is a chat completion (a
        server that ignores the option answers as if it had not been sent); else None."""
        body = await response.aread()
        said = f"answered a streamed call with {kind or 'no content type'}, not an event stream"
        self._steps.stop_streaming("off", said, sent)
        try:
            data = json.loads(body)
        except ValueError:
            return None
        if not (isinstance(data, dict) and isinstance(data.get("choices"), list)):
            return None
        return Assembled.whole(ChatCompletion.construct(**data))

    def _reply(self, call: LLMCall, reply: Assembled) -> LLMReply:
        if not reply.answered:
            raise LLMError(self._names.describe(call, "the reply had no choices"), transient=True)
        answer, thinking = split_reasoning(reply.content)
        self.opens_in_prompt = self.opens_in_prompt or bool(opened_in_prompt(reply.content))
        usage = self._usage(call, reply)
        model = reply.model or self._names.model
        refusal = reply.refusal.strip()
        if (refusal and not answer) or reply.finish_reason == "content_filter":
            text = answer or refusal or "(the server filtered the reply)"
            return LLMReply(text=text, usage=usage, model=model, refused=True)
        truncated = reply.finish_reason == "length"
        if not answer and not truncated:
            what = "only reasoning" if (thinking or reply.reasoning) else "no content"
            detail = f"the reply was empty ({what}, finish_reason={reply.finish_reason})"
            raise LLMError(self._names.describe(call, detail), transient=True)
        return LLMReply(text=answer, usage=usage, model=model, truncated=truncated)

    def _usage(self, call: LLMCall, reply: Assembled) -> TokenUsage:
        """The server's count, or where it sent none, an estimate, marked so.

        A stream with no usage is estimated, not stepped down to whole calls to get the count:
        llama-cpp-python's server sends none in a stream, `stream_options.include_usage` or not,
        and stepping down for it would give up, on every such server, what streaming is for (a
        slow server judged by its progress, the answer shown as it is written) for an exact
        count. Budgets stay enforced on the estimate (llm.session counts it as it counts the
        server's, as for the offline model), and the run's usage says it is estimated. The
        estimate of the reply is never below the chunks that carried text, each at least a
        token (one each, from llama.cpp's servers)."""
        usage = reply.usage
        if usage is None:
            chars = len(reply.content) + len(reply.reasoning) + len(reply.refusal)
            written = max(approx_tokens(chars), reply.pieces)
            return TokenUsage(approx_tokens(len(call.message)), written, estimated=True)
        return TokenUsage(
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cached_tokens=_cached_tokens(reply),
        )

    def first_token_s(self, call: LLMCall) -> float:
        """The first-token bound of `call`: AEON_LLM_TIMEOUT, plus AEON_LLM_FIRST_TOKEN_PER_1K_S
        for each 1,000 tokens of its prompt (estimated from its length), which the server
        processes before it writes a token."""
        return (
            self._bounds.timeout
            + self._bounds.first_token_per_1k * self._prompt_tokens(call) / 1000
        )

    def whole_reply_s(self, call: LLMCall, max_tokens: int | None) -> float:
        """The bound of `call` sent whole, not streamed: its one "token" is the whole reply, so
        its first-token bound, plus AEON_LLM_WHOLE_REPLY_PER_1K_S for each 1,000 tokens of the
        reply budget (UNBUDGETED_REPLY_TOKENS where none is sent): time to write all of it."""
        budget = max_tokens or UNBUDGETED_REPLY_TOKENS
        return self.first_token_s(call) + self._bounds.whole_reply_per_1k * budget / 1000

    def _prompt_tokens(self, call: LLMCall) -> int:
        return approx_tokens(len(call.message))

    def _left_to_send(self, call: LLMCall) -> float | None:
        """Seconds to the request's deadline (None: it has none); past it, nothing is sent."""
        left = seconds_left(call)
        if left is not None and left <= 0:
            raise LLMError(self._names.describe(call, "the request's deadline has passed"))
        return left

    def _cut(
        self, call: LLMCall, watch: Watch, max_tokens: int | None, *, streamed: bool
    ) -> LLMError:
        """The error for an attempt `watch` cut: a stall (no first token, or no further token,
        in time) is transient and retried; the deadline ends the call."""
        bounds = self._bounds
        if watch.bound == "deadline":
            detail = "the request's deadline passed before the reply came"
            return LLMError(self._names.describe(call, detail))
        if watch.bound == "idle":
            detail = (
                f"the reply stalled: no token for {_seconds(watch.seconds)}s after {watch.tokens} "
                f"streamed chunk(s) (AEON_LLM_IDLE_TIMEOUT={_seconds(bounds.idle_timeout)}s)"
            )
        else:
            what = "first token" if streamed else "reply (sent whole, not streamed)"
            detail = (
                f"no {what} within {_seconds(watch.seconds)}s "
                f"(AEON_LLM_TIMEOUT={_seconds(bounds.timeout)}s + AEON_LLM_FIRST_TOKEN_PER_1K_S="
                f"{_seconds(bounds.first_token_per_1k)}s for each 1,000 of the prompt's "
                f"~{self._prompt_tokens(call):,} tokens"
            )
            if not streamed:
                budget = max_tokens or UNBUDGETED_REPLY_TOKENS
                detail += (
                    f" + AEON_LLM_WHOLE_REPLY_PER_1K_S={_seconds(bounds.whole_reply_per_1k)}s for "
                    f"each 1,000 of the reply's budget of {budget:,} tokens"
                )
            detail += ")"
        return LLMError(self._names.describe(call, detail), transient=True)


def _cached_tokens(reply: Assembled) -> int | None:
    """Prompt tokens the server's cache reused, where it says: OpenAI's and vLLM's
    `usage.prompt_tokens_details.cached_tokens`, else llama.cpp's server's `timings.cache_n`;
    None where it says nothing (a server without a prompt cache, or one that does not tell)."""
    details = _field(reply.usage, "prompt_tokens_details")
    for found in (_field(details, "cached_tokens"), _field(reply.timings, "cache_n")):
        if isinstance(found, int) and not isinstance(found, bool) and found >= 0:
            return found
    return None


def _field(value: Any, name: str) -> Any:
    """`name` of an object the client parsed, or of a dict (a field it does not know)."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _message(call: LLMCall, options: dict[str, Any]) -> str:
    """The user message of `call` sent with `options`: `call.message`, with the reply's schema
    written into its system prompt where `options` do not send it to the server (its
    `response_format` stepped down to json_object or none): the schema goes once, by
    `response_format` where the server takes it, else as text (issue 40)."""
    schema = call.response_schema
    if schema is None or schema_sent(options):
        return call.message
    system = schema_in_text(call.prompt.system_prompt, schema)
    return replace(call, prompt=replace(call.prompt, system_prompt=system)).message


def _seconds(value: float) -> str:
    """Seconds as a bound is said: 0.8, 61.2, 105, 1234 (never 1.23e+03)."""
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"
