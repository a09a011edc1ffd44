"""Any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp server, reasoning models).

How a UnifiedPrompt is sent: one user message (`LLMCall.message`) carrying the whole
`prompt.to_xml()` (a plain call with nothing to carry: the request alone), with
`<system_prompt>`, `<context>` and `<instructions>` telling the parts apart, so no adapter carries
per-agent formatting logic and every family sees the same bytes. Splitting the system prompt
into a chat "system" message as well would repeat it, paying its tokens twice per call.

Every call streams (`stream: true`, asking for the usage with `stream_options` where the server
takes it), and is judged by its progress, not its length (llm.streaming): it is cut only when no
first token comes within the first-token bound (AEON_LLM_TIMEOUT, plus
AEON_LLM_FIRST_TOKEN_PER_1K_S for each 1,000 tokens of prompt the server must process first, and
run again whenever the server writes for another of this adapter's calls: queued behind it, a
call is waiting, not stalled), no further token within AEON_LLM_IDLE_TIMEOUT, or the request's
deadline passes. A server that refuses `stream_options` (an HTTP 4xx naming it) gets streaming
without it; one that refuses streaming (a 4xx naming `stream`), or answers it with something
other than an event stream, gets whole replies from then on (an answer it sent whole is used,
not asked for again). Each step down
happens once per adapter and is logged once, at INFO, as structured output's are. A stream that
ends with no finish reason was cut short (llama-cpp-python's server, by default, cuts the one it
serves when another request comes): no reply, so it is sent again at once, and calls go one at
a time from then on, still streamed (none of ours then cuts another's); said once, as a WARNING
naming the server's setting that undoes it. Only if a stream sent alone is cut even so (another
client's requests) are calls sent whole (`_cut_short`). A call
sent whole has one "token", its reply, so its bound is the first-token bound plus
AEON_LLM_WHOLE_REPLY_PER_1K_S for each 1,000 tokens of its reply budget.

A call that carries a sink (`LLMCall.sink`) gets its answer written to it as it streams, never
its reasoning, reset before a later attempt writes (llm.streaming.Relay).

What comes back is made into an answer the caller can trust to be one:

- Structured output: a JSON prompt asks for its schema (`response_format` json_schema). A server
  that refuses it (by what it says, whatever the status: llama-cpp-python answers HTTP 500) gets
  `json_object` with the schema attached, which llama.cpp's and llama-cpp-python's servers turn
  into a grammar (with ranges it can enforce: llm.schemas), then plain `json_object`, then no
  `response_format`. Each step down happens once per adapter (one per model per process) and is
  logged once, at INFO: it is how such a server works (llama-cpp-python refuses json_schema on
  every run), not a fault to warn about on every `aeon ask`.
- Bounded replies: every call sends a reply budget, the prompt contract's own
  (`LLMCall.max_tokens`) unless AEON_LLM_MAX_TOKENS sets one for all.
- Reasoning is not the answer: `<think>` blocks in the content (llm.reasoning) and the separate
  `reasoning_content` / `reasoning` fields never reach `LLMReply.text`.
- `finish_reason: "length"` marks the reply truncated; the adapter asks once more with twice the
  token budget, and a reply still cut is returned marked `truncated` for the caller to refuse.
- The server's `refusal` field (and `finish_reason: "content_filter"`) marks the reply refused.
- Transient failures (connection errors, 429, 5xx, an empty reply, a stall: no first token or
  no further token in time) are retried with exponential backoff and full jitter, or after the
  `Retry-After` / `retry-after-ms` the server asked for, and never past the call's deadline; the
  retry's log line names the bound a stall broke and how long it was. Any other 4xx fails at
  once; a context-length refusal raises ContextLengthError so the caller can fit the prompt
  tighter. A call cut by the request's deadline is not sent again.
- A server that cannot be reached (or answers only 5xx) on every attempt closes the adapter's
  outage gate (llm.outage): calls wait for it to answer again instead of failing.
- Usage comes from the server's `usage`; where it sends none, it is estimated and marked so.

Retry policy is ours, not the client's: the openai client runs with `max_retries=0`, because its
own retries know neither the request's deadline nor which failures are the model's fault. Time
limits are ours too: the client has none of its own (an HTTP read timeout would cut a long
prompt's processing, or a slow steady reply), and llm.streaming's bounds govern every call.

The API key never reaches an error message or a log line: every text taken from the client or
the server is scrubbed of it, and errors are raised without the client exception chained, since
that exception's text is exactly what may echo the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion

from aeonloop.exceptions import ContextLengthError, LLMError, LLMNotReady, LLMUnreachable
from aeonloop.llm import observed
from aeonloop.llm.base import LLMCall, LLMReply, StructuredOutput, TokenUsage, approx_tokens
from aeonloop.llm.outage import Outage
from aeonloop.llm.reasoning import opened_in_prompt, split_reasoning
from aeonloop.llm.schemas import enforceable
from aeonloop.llm.streaming import Assembled, Relay, Watch
from aeonloop.settings import redact

log = logging.getLogger(__name__)

#: Sent when no key is configured: local servers (Ollama, llama.cpp) ignore it, and the client
#: refuses to start without one.
PLACEHOLDER_KEY = "no-key"

ResponseFormat = Literal["json_schema", "json_object_schema", "json_object", "off"]
#: Each step down the ladder, taken when the server refuses the step above.
_DOWNGRADE: dict[ResponseFormat, ResponseFormat] = {
    "json_schema": "json_object_schema",
    "json_object_schema": "json_object",
    "json_object": "off",
}
_SAID: dict[ResponseFormat, str] = {
    "json_schema": "json_schema",
    "json_object_schema": "json_object with the schema",
    "json_object": "json_object",
    "off": "no response_format",
}
Streaming = Literal["with_usage", "without_usage", "off"]
#: How calls are sent after each step down of streaming, as the log line says it.
_STREAMING_SAID: dict[Streaming, str] = {
    "without_usage": "stream without stream_options (usage is estimated where none comes)",
    "off": "are sent whole, not streamed",
}
#: Statuses a server refuses an option with: 400/422 by the book, 404/415/501 from servers that
#: do not know the option, 500 from llama-cpp-python, whose request validation fails that way.
_REFUSAL_STATUSES = (400, 404, 415, 422, 500, 501)
#: Seconds the start-up check waits for the model list.
CHECK_TIMEOUT_S = 5.0

#: The reply budget a whole call's bound allows for when the call sends none (the server's own
#: applies): generous, since a reply's length is then unknown.
UNBUDGETED_REPLY_TOKENS = 4_096
#: The smallest token budget asked for when a truncated reply is requested again.
MIN_RETRY_TOKENS = 1024
#: The longest `Retry-After` honoured; a server asking for more is waited on this long.
RETRY_AFTER_MAX_S = 60.0

_CONTEXT_ERROR = re.compile(
    r"context.?length|context.?window|context size|maximum context|n_ctx|too many tokens"
    r"|prompt is too long|input is too long|exceeds? the (?:model's )?(?:maximum|context)",
    re.IGNORECASE,
)
_CONTEXT_LIMIT = re.compile(
    r"(?:context(?:[ _]length| window| size)?|n_ctx)\D{0,40}?(\d{3,7})", re.IGNORECASE
)
_FORMAT_ERROR = re.compile(r"response_format|json_schema|json_object|structured|grammar", re.I)
_MAX_TOKENS_NAME_ERROR = re.compile(r"max_completion_tokens", re.IGNORECASE)
#: A refusal naming streaming (`stream`, `streaming`, `stream_options`; not "upstream").
_STREAM_ERROR = re.compile(r"\bstream", re.IGNORECASE)


class _RetryLater(LLMError):
    """A transient failure whose server said when to come back."""

    def __init__(self, message: str, retry_after: float | None, *, unreachable: bool) -> None:
        super().__init__(message, transient=True, unreachable=unreachable)
        self.retry_after = retry_after


class OpenAIAdapter:
    """LLMAdapter for one model on one OpenAI-compatible endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout: float = 60.0,
        max_retries: int = 3,
        family: str = "openai",
        *,
        idle_timeout: float = 30.0,
        first_token_per_1k: float = 30.0,
        whole_reply_per_1k: float = 120.0,
        structured_output: StructuredOutput = "auto",
        max_tokens: int | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        if idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive seconds, got {idle_timeout!r}")
        if first_token_per_1k < 0:
            raise ValueError(f"first_token_per_1k must be 0 or more, got {first_token_per_1k!r}")
        if whole_reply_per_1k < 0:
            raise ValueError(f"whole_reply_per_1k must be 0 or more, got {whole_reply_per_1k!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries!r}")
        self.family = family
        self.model = model
        #: Seconds to a call's first token, before the prompt's share (first_token_per_1k).
        self.timeout = timeout
        #: Seconds a streaming reply may go without a token once it has begun.
        self.idle_timeout = idle_timeout
        #: More seconds to the first token for each 1,000 tokens of prompt.
        self.first_token_per_1k = first_token_per_1k
        #: More seconds a whole (not streamed) reply may take for each 1,000 tokens of its budget.
        self.whole_reply_per_1k = whole_reply_per_1k
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        #: The response_format JSON prompts ask for now; only ever steps down.
        self.response_format: ResponseFormat = (
            "json_schema" if structured_output == "auto" else structured_output
        )
        #: How calls stream now; only ever steps down.
        self.streaming: Streaming = "with_usage"
        #: Set once the server has shown it cuts a stream when another call comes: each call
        #: waits its turn here, not at the server (`_turn`).
        self._one_at_a_time: asyncio.Lock | None = None
        #: Attempts at the server sent before the turns began (their streams may be cut).
        self._out_of_turn = 0
        #: The watches of the attempts at the server: what one gets tells the others the server
        #: is working (Watch.elsewhere).
        self._watches: set[Watch] = set()
        #: The model's replies begin inside a thinking block its prompt opened (learnt from a
        #: reply): streamed answers are held back until the block closes (llm.streaming.Relay).
        self.opens_in_prompt = False
        self._max_tokens_name = "max_tokens"
        self._secret = api_key or ""
        self.where = redact(base_url)
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or PLACEHOLDER_KEY,
            timeout=None,  # llm.streaming's bounds, not the client's, cut a call
            max_retries=0,
        )
        self.outage = Outage(self._probe, self.where)

    async def check(self) -> None:
        """The endpoint answers within CHECK_TIMEOUT_S and, where it lists models, lists ours."""
        try:
            listed = await self._models(CHECK_TIMEOUT_S)
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise LLMNotReady(
                    f"the LLM server {self.where} refuses the key (HTTP {exc.status_code}): "
                    "set AEON_LLM_API_KEY to a key it accepts"
                ) from None
            if exc.status_code == 404:  # no model list: is the chat endpoint there at least?
                await self._chat_endpoint_found()
            return  # it answers, and lists no models: nothing to compare
        except (TimeoutError, openai.APITimeoutError):
            # Connected, but no answer in time: a local server busy with another request (one
            # slot, on a CPU) answers nothing else until it is done. Its calls have bounds of
            # their own; failing here would refuse a server that works.
            log.warning(
                "the LLM server %s took its connection but did not list its models within "
                "%g s (busy?); going on without checking AEON_LLM_MODEL",
                self.where,
                CHECK_TIMEOUT_S,
            )
            return
        except openai.APIConnectionError as exc:
            raise LLMNotReady(
                f"the LLM server {self.where} does not answer ({_cause(exc)}): start it, or "
                "point AEON_LLM_BASE_URL at one (e.g. http://localhost:11434/v1)"
            ) from None
        if listed and self.model not in listed:
            raise LLMNotReady(
                f"the LLM server {self.where} does not serve AEON_LLM_MODEL={self.model!r}; "
                f"it serves: {', '.join(sorted(listed))}"
            )

    async def _models(self, timeout: float) -> list[str]:
        """The model ids the server lists; none when its answer is no model list (some proxies
        and older servers answer 200 with another body)."""
        async with asyncio.timeout(timeout):
            page = await self._client.models.list(timeout=timeout)
        data = getattr(page, "data", None)
        if not isinstance(data, list):
            return []
        return [model.id for model in data if isinstance(getattr(model, "id", None), str)]

    async def _chat_endpoint_found(self) -> None:
        """A one-token completion, for a server that lists no models: a 404 there too means
        AEON_LLM_BASE_URL does not name an OpenAI-compatible API (most often, `/v1` left off),
        which would fail every call of every run. Anything else (an answer, another status, no
        answer in time: a CPU server may take a while) leaves the calls to say more."""
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                await self._client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": "1"}],  # the shortest prompt, not text
                    max_tokens=1,
                    timeout=CHECK_TIMEOUT_S,
                )
        except openai.APIStatusError as exc:
            if exc.status_code == 404:
                raise LLMNotReady(_not_found(self.where)) from None
        except (openai.OpenAIError, TimeoutError):
            return

    async def _probe(self) -> None:
        """While the outage gate is closed: any answer but a 5xx means the server is back."""
        try:
            await self._models(CHECK_TIMEOUT_S)
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise

    async def complete(self, call: LLMCall) -> LLMReply:
        """Send the prompt, retrying transient failures and waiting out an outage; raise
        LLMError when no reply can be had (LLMUnreachable when the deadline comes first)."""
        max_tokens = self.max_tokens or call.max_tokens
        enlarged = False
        failures = 0
        relay = Relay(call.sink, self.opens_in_prompt)
        while True:
            await self.outage.wait(call.deadline)
            try:
                reply = await self._attempt(call, max_tokens, relay)
            except LLMError as error:
                if not error.transient:
                    raise
                failures += 1
                if error.unreachable and failures > self.max_retries:
                    self.outage.close(str(error))
                    failures = 0
                    continue
                await self._wait_to_retry(call, error, failures)
                continue
            if reply.truncated and not enlarged:
                enlarged = True
                used = max(reply.usage.completion_tokens, max_tokens or 0, MIN_RETRY_TOKENS // 2)
                max_tokens = 2 * used
                log.info(
                    "LLM reply to %s was cut at the length limit; asking again with max %d tokens",
                    call.prompt_id.value,
                    max_tokens,
                )
                continue
            await relay.settle(reply.text)
            return reply

    async def aclose(self) -> None:
        """Stop probing, and close the HTTP connection pool."""
        await self.outage.aclose()
        await self._client.close()

    # -- one request ---------------------------------------------------------------------------

    async def _attempt(self, call: LLMCall, max_tokens: int | None, relay: Relay) -> LLMReply:
        """One answered request; a refused option (response_format, streaming) is stepped down
        and the request sent again, as is a stream the server cut short."""
        while True:
            sent_format, sent_streaming = self.response_format, self.streaming
            options = self._options(call, max_tokens)
            streamed = "stream" in options
            first = self.first_token_s(call) if streamed else self.whole_reply_s(call, max_tokens)
            relay.next_attempt()
            try:
                async with self._turn(call) as alone, asyncio.timeout(None) as timer:
                    watch = Watch(timer, first, self.idle_timeout, self._left_to_send(call))
                    reply = await self._watched(call, options, watch, relay, sent_streaming)
            except TimeoutError:
                if not timer.expired():
                    raise
                raise self._cut(call, watch, max_tokens, streamed=streamed) from None
            except openai.APIConnectionError as exc:
                detail = f"cannot reach {self.where} ({self._scrub(_cause(exc))})"
                raise LLMError(self._describe(call, detail), unreachable=True) from None
            except openai.APIStatusError as exc:
                if self._step_down(exc, options, sent_format, sent_streaming):
                    continue
                raise self._status_error(call, exc) from None
            except openai.APIError as exc:  # an error event in the middle of a stream
                raise self._stream_error(call, exc) from None
            except openai.OpenAIError as exc:
                detail = f"{type(exc).__name__}: {self._scrub(str(exc))}"
                raise LLMError(self._describe(call, detail), transient=False) from None
            if reply is None:  # no event stream, and no answer in what came: send it whole
                continue
            if reply.cut_short:
                self._cut_short(sent_streaming, alone=alone)
                continue
            return self._reply(call, reply)

    @contextlib.asynccontextmanager
    async def _turn(self, call: LLMCall) -> AsyncIterator[bool]:
        """The call's turn at the server; True when it is sent alone: in its turn, with no call
        sent before the turns began still at the server. Every call has its turn at once,
        unless the server has shown it cuts a stream when another call comes (`_cut_short`):
        then calls are sent one at a time, so none of ours cuts another's stream. Such a server
        serves one call at a time anyway, and a call queued there would have its bound running
        while the calls before it are served; waiting here, it runs none, and never waits past
        its deadline. (Other processes' calls still queue there.)"""
        turn = self._one_at_a_time
        if turn is None:
            self._out_of_turn += 1
            try:
                yield False
            finally:
                self._out_of_turn -= 1
            return
        try:
            async with asyncio.timeout(_seconds_left(call)):
                await turn.acquire()
        except TimeoutError:
            detail = "the request's deadline passed while the call waited its turn at the server"
            raise LLMError(self._describe(call, detail)) from None
        try:
            yield self._out_of_turn == 0
        finally:
            turn.release()

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
        messages = [{"role": "user", "content": call.message}]
        if not options.get("stream"):
            completion = await self._client.chat.completions.create(
                model=self.model, messages=messages, **options
            )
            return Assembled.whole(completion)
        stream = await self._client.chat.completions.create(
            model=self.model, messages=messages, **options
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
        self._stop_streaming("off", said, sent)
        try:
            data = json.loads(body)
        except ValueError:
            return None
        if not (isinstance(data, dict) and isinstance(data.get("choices"), list)):
            return None
        return Assembled.whole(ChatCompletion.construct(**data))

    def _options(self, call: LLMCall, max_tokens: int | None) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.streaming != "off":
            options["stream"] = True
            if self.streaming == "with_usage":
                options["stream_options"] = {"include_usage": True}
        if max_tokens:
            options[self._max_tokens_name] = max_tokens
        schema = call.response_schema
        if schema is None or self.response_format == "off":
            return options
        if self.response_format == "json_schema":
            named = {"name": call.prompt_id.value, "schema": schema}
            options["response_format"] = {"type": "json_schema", "json_schema": named}
        elif self.response_format == "json_object_schema":
            options["response_format"] = {"type": "json_object", "schema": enforceable(schema)}
        else:
            options["response_format"] = {"type": "json_object"}
        return options

    def _step_down(
        self,
        exc: openai.APIStatusError,
        options: dict[str, Any],
        sent: ResponseFormat,
        sent_streaming: Streaming,
    ) -> bool:
        """Adapt to a server that refuses an option we sent; True to send the request again.

        `sent` and `sent_streaming` are what the refused request carried: calls in flight at once
        are all refused, and only the first steps down; the others are sent again as it left it.
        """
        if exc.status_code not in _REFUSAL_STATUSES or _is_context_error(exc):
            return False
        text = _error_text(exc)
        if "stream" in options and exc.status_code < 500 and _STREAM_ERROR.search(text):
            without_options = "stream_options" in options and "stream_options" in text.lower()
            lower: Streaming = "without_usage" if without_options else "off"
            said = f"refused {'stream_options' if without_options else 'streaming'}"
            self._stop_streaming(lower, f"{said} (HTTP {exc.status_code})", sent_streaming)
            return True
        if "response_format" in options and _FORMAT_ERROR.search(text):
            if sent != self.response_format:
                return True
            lower = _DOWNGRADE[self.response_format]
            log.info(
                "%r at %s refused response_format %s (HTTP %d); JSON prompts use %s from now on",
                self.model,
                self.where,
                _SAID[self.response_format],
                exc.status_code,
                _SAID[lower],
            )
            self.response_format = lower
            return True
        if "max_tokens" in options and _MAX_TOKENS_NAME_ERROR.search(text):
            self._max_tokens_name = "max_completion_tokens"
            return True
        return False

    def _stop_streaming(self, lower: Streaming, said: str, sent: Streaming) -> None:
        """Step streaming down to `lower`, saying so once; a call that was sent before another
        stepped down (`sent` is no longer how calls go) changes nothing."""
        if sent != self.streaming:
            return
        log.info(
            "%r at %s %s; calls %s from now on",
            self.model,
            self.where,
            said,
            _STREAMING_SAID[lower],
        )
        self.streaming = lower

    def _cut_short(self, sent: Streaming, *, alone: bool) -> None:
        """A stream the server ended with no finish reason: the attempt is void, and the caller
        sends it again at once, as no failure. llama-cpp-python's server ends a stream so
        whenever another request comes while it serves it (its setting `interrupt_requests`,
        on by default), which Aeon's calls in parallel make happen on every run.

        The first such stream makes calls go one at a time (`_turn`): none of ours then cuts
        another's, and calls keep streaming, judged by their progress as whole calls cannot be.
        Said once, at INFO as the other step downs are (a warning would print on every `aeon
        ask` against such a server at its defaults, issue 35), naming the server's setting,
        which the user can turn off (docs/llm-servers.md says so too). A
        stream cut short even so, sent `alone` (in its turn, no call of ours sent before the
        turns began still at the server), was cut by another client's request (more processes
        on one server): calls are sent whole from then on, which such a server never cuts, said
        at INFO as the other step downs are."""
        if alone:
            said = "cut short a stream sent alone (another client's request came?)"
            self._stop_streaming("off", said, sent)
            return
        if self._one_at_a_time is not None:
            return
        self._one_at_a_time = asyncio.Lock()
        log.info(
            "%r at %s ended a stream with no finish reason: it cuts a stream short when "
            "another request comes (llama-cpp-python's server does, unless started with "
            "--interrupt_requests false); calls are sent one at a time from now on",
            self.model,
            self.where,
        )

    def _reply(self, call: LLMCall, reply: Assembled) -> LLMReply:
        if not reply.answered:
            raise LLMError(self._describe(call, "the reply had no choices"), transient=True)
        answer, thinking = split_reasoning(reply.content)
        self.opens_in_prompt = self.opens_in_prompt or bool(opened_in_prompt(reply.content))
        usage = self._usage(call, reply)
        model = reply.model or self.model
        refusal = reply.refusal.strip()
        if (refusal and not answer) or reply.finish_reason == "content_filter":
            text = answer or refusal or "(the server filtered the reply)"
            return LLMReply(text=text, usage=usage, model=model, refused=True)
        truncated = reply.finish_reason == "length"
        if not answer and not truncated:
            what = "only reasoning" if (thinking or reply.reasoning) else "no content"
            detail = f"the reply was empty ({what}, finish_reason={reply.finish_reason})"
            raise LLMError(self._describe(call, detail), transient=True)
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
        )

    def _status_error(self, call: LLMCall, exc: openai.APIStatusError) -> LLMError:
        status = exc.status_code
        detail = f"HTTP {status}: {self._scrub(exc.message)}"
        if _is_context_error(exc):
            limit = _CONTEXT_LIMIT.search(_error_text(exc))
            return ContextLengthError(
                self._describe(call, detail), limit_tokens=int(limit.group(1)) if limit else None
            )
        if status == 429 or status >= 500:
            return _RetryLater(
                self._describe(call, detail),
                _retry_after(exc.response.headers),
                unreachable=status >= 500,
            )
        return LLMError(self._describe(call, detail), transient=False)

    def _stream_error(self, call: LLMCall, exc: openai.APIError) -> LLMError:
        """An error the server sent as an event of a stream it had begun (llama.cpp, Ollama and
        vLLM do, for what they find wrong once the reply is under way): the streamed
        counterpart of an HTTP error, transient (as a 5xx is) unless it is the context window."""
        detail = f"the server ended the stream with an error: {self._scrub(exc.message)}"
        text = f"{exc.message} {exc.body!r}"
        if _CONTEXT_ERROR.search(text):
            limit = _CONTEXT_LIMIT.search(text)
            return ContextLengthError(
                self._describe(call, detail), limit_tokens=int(limit.group(1)) if limit else None
            )
        return LLMError(self._describe(call, detail), transient=True)

    # -- retries -------------------------------------------------------------------------------

    async def _wait_to_retry(self, call: LLMCall, error: LLMError, failures: int) -> None:
        """Sleep before the next attempt, or raise when retries or the deadline are used up."""
        if failures > self.max_retries:
            raise LLMError(f"{error} (gave up after {failures} attempt(s))", transient=True)
        asked = error.retry_after if isinstance(error, _RetryLater) else None
        delay = self._backoff(failures - 1) if asked is None else _jitter(asked)
        left = _seconds_left(call)
        if left is not None and delay >= left:
            if error.unreachable:
                raise LLMUnreachable(
                    f"the request's deadline passed while the LLM server {self.where} could not "
                    f"be reached ({error})"
                )
            raise LLMError(
                f"{error} (no retry: the request's deadline is {max(left, 0):.1f}s away)",
                transient=True,
            )
        # An unreachable server is said once, by the outage gate its last retry closes.
        log.log(
            logging.DEBUG if error.unreachable else logging.WARNING,
            "LLM call %s failed (attempt %d of %d), retrying in %.2fs: %s",
            call.prompt_id.value,
            failures,
            self.max_retries + 1,
            delay,
            error,
        )
        observed.retry(self.model, failures, error)
        await asyncio.sleep(delay)

    def first_token_s(self, call: LLMCall) -> float:
        """The first-token bound of `call`: AEON_LLM_TIMEOUT, plus AEON_LLM_FIRST_TOKEN_PER_1K_S
        for each 1,000 tokens of its prompt (estimated from its length), which the server
        processes before it writes a token."""
        return self.timeout + self.first_token_per_1k * self._prompt_tokens(call) / 1000

    def whole_reply_s(self, call: LLMCall, max_tokens: int | None) -> float:
        """The bound of `call` sent whole, not streamed: its one "token" is the whole reply, so
        its first-token bound, plus AEON_LLM_WHOLE_REPLY_PER_1K_S for each 1,000 tokens of the
        reply budget (UNBUDGETED_REPLY_TOKENS where none is sent): time to write all of it."""
        budget = max_tokens or UNBUDGETED_REPLY_TOKENS
        return self.first_token_s(call) + self.whole_reply_per_1k * budget / 1000

    def _prompt_tokens(self, call: LLMCall) -> int:
        return approx_tokens(len(call.message))

    def _left_to_send(self, call: LLMCall) -> float | None:
        """Seconds to the request's deadline (None: it has none); past it, nothing is sent."""
        left = _seconds_left(call)
        if left is not None and left <= 0:
            raise LLMError(self._describe(call, "the request's deadline has passed"))
        return left

    def _cut(
        self, call: LLMCall, watch: Watch, max_tokens: int | None, *, streamed: bool
    ) -> LLMError:
        """The error for an attempt `watch` cut: a stall (no first token, or no further token,
        in time) is transient and retried; the deadline ends the call."""
        if watch.bound == "deadline":
            detail = "the request's deadline passed before the reply came"
            return LLMError(self._describe(call, detail))
        if watch.bound == "idle":
            detail = (
                f"the reply stalled: no token for {_seconds(watch.seconds)}s after {watch.tokens} "
                f"streamed chunk(s) (AEON_LLM_IDLE_TIMEOUT={_seconds(self.idle_timeout)}s)"
            )
        else:
            what = "first token" if streamed else "reply (sent whole, not streamed)"
            detail = (
                f"no {what} within {_seconds(watch.seconds)}s "
                f"(AEON_LLM_TIMEOUT={_seconds(self.timeout)}s + AEON_LLM_FIRST_TOKEN_PER_1K_S="
                f"{_seconds(self.first_token_per_1k)}s for each 1,000 of the prompt's "
                f"~{self._prompt_tokens(call):,} tokens"
            )
            if not streamed:
                budget = max_tokens or UNBUDGETED_REPLY_TOKENS
                detail += (
                    f" + AEON_LLM_WHOLE_REPLY_PER_1K_S={_seconds(self.whole_reply_per_1k)}s for "
                    f"each 1,000 of the reply's budget of {budget:,} tokens"
                )
            detail += ")"
        return LLMError(self._describe(call, detail), transient=True)

    def _backoff(self, attempt: int) -> float:
        """Full jitter: spreads the retries of many workers hit by the same outage."""
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))

    def _describe(self, call: LLMCall, detail: str) -> str:
        return f"{self.family} model {self.model!r}, prompt {call.prompt_id.value}: {detail}"

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def _not_found(where: str) -> str:
    """The line for a server that answers 404 at both the model list and the chat endpoint."""
    said = (
        f"the LLM server {where} answers 404 Not Found at /models and /chat/completions, so "
        "AEON_LLM_BASE_URL does not name its OpenAI-compatible API"
    )
    if not urlsplit(where).path.rstrip("/").endswith("/v1"):
        return f"{said}: most servers serve it under /v1 (try {where.rstrip('/')}/v1)"
    return f"{said}: set it to the URL the server's docs give for that API"


def _cause(exc: BaseException) -> str:
    """What a connection error comes down to (refused, a name that does not resolve, ...): the
    client's own text is only "Connection error."."""
    cause = exc.__cause__ or exc.__context__
    while cause is not None and (cause.__cause__ or cause.__context__) is not None:
        cause = cause.__cause__ or cause.__context__
    text = str(cause) if cause is not None else ""
    return text or str(exc)


def _error_text(exc: openai.APIStatusError) -> str:
    return f"{exc.message} {exc.body!r}"


def _is_context_error(exc: openai.APIStatusError) -> bool:
    return exc.status_code in (400, 413, 422) and bool(_CONTEXT_ERROR.search(_error_text(exc)))


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asked to wait (`retry-after-ms`, else `retry-after` in seconds)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        try:
            seconds = float(raw) / scale if raw is not None else None
        except ValueError:
            continue  # an HTTP date: rare from LLM servers; the backoff covers it
        if seconds is not None and seconds >= 0:
            return min(seconds, RETRY_AFTER_MAX_S)
    return None


def _jitter(seconds: float) -> float:
    """At least what the server asked for, plus up to 10% so many workers do not return at once."""
    return seconds * (1 + random.uniform(0, 0.1))


def _seconds(value: float) -> str:
    """Seconds as a bound is said: 0.8, 61.2, 105, 1234 (never 1.23e+03)."""
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _seconds_left(call: LLMCall) -> float | None:
    if call.deadline is None:
        return None
    return (call.deadline - datetime.now(UTC)).total_seconds()
