"""Any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp server, reasoning models).

How a UnifiedPrompt is sent: one user message carrying the whole `prompt.to_xml()`, with
`<system_prompt>`, `<context>` and `<instructions>` telling the parts apart, so no adapter carries
per-agent formatting logic and every family sees the same bytes. Splitting the system prompt
into a chat "system" message as well would repeat it, paying its tokens twice per call.

What comes back is made into an answer the caller can trust to be one:

- Structured output: a JSON prompt asks for its schema (`response_format` json_schema). A server
  that refuses it gets json_object, then no `response_format`; each step down happens once per
  adapter (one per model per process) and is logged once.
- Reasoning is not the answer: `<think>` blocks in the content (llm.reasoning) and the separate
  `reasoning_content` / `reasoning` fields never reach `LLMReply.text`.
- `finish_reason: "length"` marks the reply truncated; the adapter asks once more with twice the
  token budget, and a reply still cut is returned marked `truncated` for the caller to refuse.
- The server's `refusal` field (and `finish_reason: "content_filter"`) marks the reply refused.
- Transient failures (connection errors, timeouts, 429, 5xx, an empty reply) are retried with
  exponential backoff and full jitter, or after the `Retry-After` / `retry-after-ms` the server
  asked for, and never past the call's deadline. Any other 4xx fails at once; a context-length
  refusal raises ContextLengthError so the caller can fit the prompt tighter.
- Usage comes from the server's `usage`; where it sends none, it is estimated and marked so.

Retry policy is ours, not the client's: the openai client runs with `max_retries=0`, because its
own retries know neither the request's deadline nor which failures are the model's fault.

The API key never reaches an error message or a log line: every text taken from the client or
the server is scrubbed of it, and errors are raised without the client exception chained, since
that exception's text is exactly what may echo the key.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from datetime import UTC, datetime
from typing import Any, Literal

import openai

from aeonloop.llm import observed
from aeonloop.llm.base import (
    ContextLengthError,
    LLMCall,
    LLMError,
    LLMReply,
    StructuredOutput,
    TokenUsage,
    approx_tokens,
)
from aeonloop.llm.reasoning import split_reasoning

log = logging.getLogger(__name__)

#: Sent when no key is configured: local servers (Ollama, llama.cpp) ignore it, and the client
#: refuses to start without one.
PLACEHOLDER_KEY = "no-key"

ResponseFormat = Literal["json_schema", "json_object", "off"]
#: Each step down the ladder, taken when the server refuses the step above.
_DOWNGRADE: dict[ResponseFormat, ResponseFormat] = {
    "json_schema": "json_object",
    "json_object": "off",
}

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


class _RetryLater(LLMError):
    """A transient failure whose server said when to come back."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message, transient=True)
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
        structured_output: StructuredOutput = "auto",
        max_tokens: int | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries!r}")
        self.family = family
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        #: The response_format JSON prompts ask for now; only ever steps down.
        self.response_format: ResponseFormat = (
            "json_schema" if structured_output == "auto" else structured_output
        )
        self._max_tokens_name = "max_tokens"
        self._secret = api_key or ""
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or PLACEHOLDER_KEY,
            timeout=timeout,
            max_retries=0,
        )

    async def complete(self, call: LLMCall) -> LLMReply:
        """Send the prompt, retrying transient failures; raise LLMError when none succeeds."""
        max_tokens = self.max_tokens
        enlarged = False
        failures = 0
        while True:
            try:
                reply = await self._attempt(call, max_tokens)
            except LLMError as error:
                if not error.transient:
                    raise
                failures += 1
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
            return reply

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    # -- one request ---------------------------------------------------------------------------

    async def _attempt(self, call: LLMCall, max_tokens: int | None) -> LLMReply:
        """One answered request; a refused response_format is stepped down and sent again."""
        while True:
            options = self._options(call, max_tokens)
            try:
                timeout = self._attempt_timeout(call)
                async with asyncio.timeout(timeout):
                    response = await self._client.chat.completions.create(
                        model=self.model,
                        messages=[{"role": "user", "content": call.prompt.to_xml()}],
                        **options,
                    )
            except TimeoutError:
                detail = f"timed out after {timeout:.3g}s"
                raise LLMError(self._describe(call, detail), transient=True) from None
            except openai.APIConnectionError as exc:  # includes the client's APITimeoutError
                detail = self._scrub(str(exc))
                raise LLMError(self._describe(call, detail), transient=True) from None
            except openai.APIStatusError as exc:
                if self._step_down(exc, options):
                    continue
                raise self._status_error(call, exc) from None
            except openai.OpenAIError as exc:
                detail = f"{type(exc).__name__}: {self._scrub(str(exc))}"
                raise LLMError(self._describe(call, detail), transient=False) from None
            return self._reply(call, response)

    def _options(self, call: LLMCall, max_tokens: int | None) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if max_tokens:
            options[self._max_tokens_name] = max_tokens
        if call.response_schema is None or self.response_format == "off":
            return options
        if self.response_format == "json_schema":
            schema = {"name": call.prompt_id.value, "schema": call.response_schema}
            options["response_format"] = {"type": "json_schema", "json_schema": schema}
        else:
            options["response_format"] = {"type": "json_object"}
        return options

    def _step_down(self, exc: openai.APIStatusError, options: dict[str, Any]) -> bool:
        """Adapt to a server that refuses an option we sent; True to send the request again."""
        if exc.status_code not in (400, 404, 415, 422, 501) or _is_context_error(exc):
            return False
        text = _error_text(exc)
        if "response_format" in options and _FORMAT_ERROR.search(text):
            lower = _DOWNGRADE[self.response_format]
            log.warning(
                "%r refused response_format %s (HTTP %d); JSON prompts use %s from now on",
                self.model,
                self.response_format,
                exc.status_code,
                "no response_format" if lower == "off" else lower,
            )
            self.response_format = lower
            return True
        if self._max_tokens_name in options and _MAX_TOKENS_NAME_ERROR.search(text):
            self._max_tokens_name = "max_completion_tokens"
            return True
        return False

    def _reply(self, call: LLMCall, response: Any) -> LLMReply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError(self._describe(call, "the reply had no choices"), transient=True)
        choice = choices[0]
        message = choice.message
        content = getattr(message, "content", None) or ""
        answer, thinking = split_reasoning(content)
        reasoning = _reasoning_field(message)
        usage = self._usage(call, response, len(content) + len(reasoning))
        model = getattr(response, "model", None) or self.model
        refusal = (getattr(message, "refusal", None) or "").strip()
        if (refusal and not answer) or choice.finish_reason == "content_filter":
            text = answer or refusal or "(the server filtered the reply)"
            return LLMReply(text=text, usage=usage, model=model, refused=True)
        truncated = choice.finish_reason == "length"
        if not answer and not truncated:
            what = "only reasoning" if (thinking or reasoning) else "no content"
            detail = f"the reply was empty ({what}, finish_reason={choice.finish_reason})"
            raise LLMError(self._describe(call, detail), transient=True)
        return LLMReply(text=answer, usage=usage, model=model, truncated=truncated)

    def _usage(self, call: LLMCall, response: Any, reply_chars: int) -> TokenUsage:
        usage = getattr(response, "usage", None)
        if usage is None:
            prompt_chars = len(call.prompt.to_xml())
            return TokenUsage(approx_tokens(prompt_chars), approx_tokens(reply_chars), True)
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
            return _RetryLater(self._describe(call, detail), _retry_after(exc.response.headers))
        return LLMError(self._describe(call, detail), transient=False)

    # -- retries -------------------------------------------------------------------------------

    async def _wait_to_retry(self, call: LLMCall, error: LLMError, failures: int) -> None:
        """Sleep before the next attempt, or raise when retries or the deadline are used up."""
        if failures > self.max_retries:
            raise LLMError(f"{error} (gave up after {failures} attempt(s))", transient=True)
        asked = error.retry_after if isinstance(error, _RetryLater) else None
        delay = self._backoff(failures - 1) if asked is None else _jitter(asked)
        left = _seconds_left(call)
        if left is not None and delay >= left:
            raise LLMError(
                f"{error} (no retry: the request's deadline is {max(left, 0):.1f}s away)",
                transient=True,
            )
        log.warning(
            "LLM call %s failed (attempt %d of %d), retrying in %.2fs: %s",
            call.prompt_id.value,
            failures,
            self.max_retries + 1,
            delay,
            error,
        )
        observed.retry(self.model, failures, error)
        await asyncio.sleep(delay)

    def _attempt_timeout(self, call: LLMCall) -> float:
        left = _seconds_left(call)
        if left is not None and left <= 0:
            raise LLMError(self._describe(call, "the request's deadline has passed"))
        return self.timeout if left is None else min(self.timeout, left)

    def _backoff(self, attempt: int) -> float:
        """Full jitter: spreads the retries of many workers hit by the same outage."""
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))

    def _describe(self, call: LLMCall, detail: str) -> str:
        return f"{self.family} model {self.model!r}, prompt {call.prompt_id.value}: {detail}"

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def _reasoning_field(message: Any) -> str:
    """The thinking a server split out of the content (vLLM, DeepSeek, llama.cpp, OpenRouter)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


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


def _seconds_left(call: LLMCall) -> float | None:
    if call.deadline is None:
        return None
    return (call.deadline - datetime.now(UTC)).total_seconds()
