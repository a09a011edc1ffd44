"""Any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp server, reasoning models).

`OpenAIAdapter` is the LLMAdapter; it composes the parts that each do one thing:

- the start-up check and the outage probe (here): the endpoint answers, and lists the model;
- one request, judged by its progress and made into a reply (llm.openai_transport);
- what the server has shown it refuses, stepped down once per adapter (llm.openai_stepdowns:
  structured output, streaming, the reply budget's name, one call at a time);
- when a failed call is sent again (llm.openai_retry), and what a server's error says
  (llm.openai_errors);
- a server away on every attempt closes the adapter's outage gate (llm.outage): calls wait for
  it to answer again instead of failing.

A call (`complete`) waits out an outage, sends its attempt, retries transient failures within
the call's deadline, and asks once more with twice the token budget when the reply was cut at
the length limit (a reply still cut is returned marked `truncated` for the caller to refuse).
Every call sends a reply budget, the prompt contract's own (`LLMCall.max_tokens`) unless
AEON_LLM_MAX_TOKENS sets one for all.

Retry policy and time limits are ours, not the client's: the openai client runs with
`max_retries=0` and no timeout of its own (an HTTP read timeout would cut a long prompt's
processing, or a slow steady reply); llm.streaming's bounds govern every call.

The API key never reaches an error message or a log line: every text taken from the client or
the server is scrubbed of it (`Endpoint.scrub`), and errors are raised without the client
exception chained, since that exception's text is exactly what may echo the key.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from urllib.parse import urlsplit

import openai

from aeonloop.exceptions import LLMError, LLMNotReady
from aeonloop.llm.base import LLMCall, LLMReply, StructuredOutput
from aeonloop.llm.limiter import RateLimiter
from aeonloop.llm.openai_errors import Endpoint, RetryLater, cause, log
from aeonloop.llm.openai_retry import Retries
from aeonloop.llm.openai_stepdowns import ResponseFormat, StepDowns, Streaming
from aeonloop.llm.openai_transport import Bounds, Transport
from aeonloop.llm.outage import Outage, OutagePolicy
from aeonloop.llm.streaming import Relay
from aeonloop.settings import redact

#: Sent when no key is configured: local servers (Ollama, llama.cpp) ignore it, and the client
#: refuses to start without one.
PLACEHOLDER_KEY = "no-key"
#: Seconds the start-up check waits for the model list.
CHECK_TIMEOUT_S = 5.0
#: The smallest token budget asked for when a truncated reply is requested again.
MIN_RETRY_TOKENS = 1024


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
        outage: OutagePolicy | None = None,
    ) -> None:
        self.family = family
        self.model = model
        #: The time a call's reply may take (llm.openai_transport).
        self.bounds = Bounds(timeout, idle_timeout, first_token_per_1k, whole_reply_per_1k)
        self.max_tokens = max_tokens
        self.where = redact(base_url)
        #: When a failed call is sent again (llm.openai_retry).
        self.retries = Retries(model, self.where, max_retries, backoff_base, backoff_max)
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or PLACEHOLDER_KEY,
            timeout=None,  # llm.streaming's bounds, not the client's, cut a call
            max_retries=0,
        )
        self._steps = StepDowns(model, self.where, structured_output)
        self._transport = Transport(
            self._client,
            Endpoint(family, model, self.where, api_key or ""),
            self._steps,
            self.bounds,
        )
        #: The gate's backoff starts once a call has failed every attempt (it closes the gate).
        policy = replace(outage or OutagePolicy(), grace=max_retries + 1)
        self.outage = Outage(self._probe, self.where, policy)

    @property
    def limiter(self) -> RateLimiter | None:
        """The rate limit shared with other workers, where one is set (llm.factory builds it;
        each request takes a slot of it: llm.openai_transport)."""
        return self._transport.limiter

    @limiter.setter
    def limiter(self, value: RateLimiter | None) -> None:
        self._transport.limiter = value

    @property
    def response_format(self) -> ResponseFormat:
        """The response_format JSON prompts ask for now (llm.openai_stepdowns)."""
        return self._steps.response_format

    @property
    def streaming(self) -> Streaming:
        """How calls stream now (llm.openai_stepdowns)."""
        return self._steps.streaming

    @streaming.setter
    def streaming(self, value: Streaming) -> None:
        self._steps.streaming = value

    def first_token_s(self, call: LLMCall) -> float:
        """The first-token bound of `call` (llm.openai_transport)."""
        return self._transport.first_token_s(call)

    def whole_reply_s(self, call: LLMCall, max_tokens: int | None) -> float:
        """The bound of `call` sent whole, not streamed (llm.openai_transport)."""
        return self._transport.whole_reply_s(call, max_tokens)

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
                f"the LLM server {self.where} does not answer ({cause(exc)}): start it, or "
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
        """While the outage gate is closed: a one-token completion, a real call, since a server
        may list its models while every chat call fails (issue 41, finding 1). Any answer but a
        5xx means the server is back (a 4xx is the server answering, about the probe's own
        options); no answer within AEON_LLM_TIMEOUT is not yet."""
        seconds = self.bounds.timeout
        try:
            async with asyncio.timeout(seconds):
                await self._client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": "1"}],  # the shortest prompt, not text
                    max_tokens=1,
                    timeout=seconds,
                )
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise

    async def complete(self, call: LLMCall) -> LLMReply:
        """Send the prompt, retrying transient failures and waiting out an outage; raise
        LLMError when no reply can be had (LLMUnreachable when the deadline comes first).

        A call that finds the server away on every attempt closes the outage gate, unless the
        server has answered other calls since this one first found it away: then the fault is
        this call's (a prompt the server drops the connection on, issue 41 finding 9), and it
        fails as a failed call does instead of holding every call until the deadline."""
        max_tokens = self.max_tokens or call.max_tokens
        enlarged = False
        failures = 0
        answers: int | None = None  # the endpoint's answers when this call first found it away
        relay = Relay(call.sink, self._transport.opens_in_prompt)
        while True:
            await self.outage.wait(call.deadline)
            try:
                reply = await self._transport.attempt(call, max_tokens, relay)
            except LLMError as error:
                await self._judged(error)
                if not error.transient:
                    raise
                failures += 1
                if error.unreachable:
                    answers = self.outage.answers if answers is None else answers
                if error.unreachable and failures > self.retries.max_retries:
                    if self.outage.answers > (answers or 0):
                        raise LLMError(
                            f"{error} (gave up after {failures} attempt(s) while the server "
                            "answered other calls)",
                            transient=True,
                        ) from None
                    self.outage.close(str(error))
                    failures = 0
                    continue
                await self.retries.wait(call, error, failures)
                continue
            self.outage.answered()
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

    async def _judged(self, error: LLMError) -> None:
        """What a failed attempt tells the gate: the server away, or asking every call to wait
        (every call of this process, and with a shared limit, of every worker)."""
        if error.unreachable:
            self.outage.failed()
        if isinstance(error, RetryLater) and error.retry_after is not None:
            if self.limiter is not None:
                await self.limiter.pause(error.retry_after)
            else:
                self.outage.pause(error.retry_after)

    async def aclose(self) -> None:
        """Stop probing, and close the HTTP connection pool."""
        await self.outage.aclose()
        await self._client.close()


def _not_found(where: str) -> str:
    """The line for a server that answers 404 at both the model list and the chat endpoint."""
    said = (
        f"the LLM server {where} answers 404 Not Found at /models and /chat/completions, so "
        "AEON_LLM_BASE_URL does not name its OpenAI-compatible API"
    )
    if not urlsplit(where).path.rstrip("/").endswith("/v1"):
        return f"{said}: most servers serve it under /v1 (try {where.rstrip('/')}/v1)"
    return f"{said}: set it to the URL the server's docs give for that API"
