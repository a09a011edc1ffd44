"""Any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp server).

How a UnifiedPrompt is sent: one user message carrying the whole `prompt.to_xml()`. Seed 003 has
the orchestrator send the XML prompt as is ("Send XML Prompt"), with `<system_prompt>`,
`<context>` and `<instructions>` telling the parts apart, so no adapter carries per-agent
formatting logic and every family sees the same bytes. Splitting the system prompt into a chat
"system" message as well would repeat it, paying its tokens twice per call.

Retry policy is ours, not the client's: the openai client runs with `max_retries=0`, and this
adapter retries only transient failures (connection errors, timeouts, 429, 5xx) with exponential
backoff and full jitter. Any other 4xx fails at once. Every call has an overall deadline
(`timeout`), which also bounds a server that trickles bytes slowly enough to dodge read timeouts.

The API key never reaches an error message or a log line: every text taken from the client or
the server is scrubbed of it, and errors are raised without the client exception chained, since
that exception's text is exactly what may echo the key.
"""

from __future__ import annotations

import asyncio
import logging
import random

import openai

from llm.base import LLMCall, LLMError, LLMReply, TokenUsage

log = logging.getLogger(__name__)

#: Sent when no key is configured: local servers (Ollama, llama.cpp) ignore it, and the client
#: refuses to start without one.
PLACEHOLDER_KEY = "no-key"


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
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._secret = api_key or ""
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or PLACEHOLDER_KEY,
            timeout=timeout,
            max_retries=0,
        )

    async def complete(self, call: LLMCall) -> LLMReply:
        """Send the prompt, retrying transient failures; raise LLMError when none succeeds."""
        for attempt in range(self.max_retries + 1):
            try:
                return await self._attempt(call)
            except LLMError as error:
                if not error.transient:
                    raise
                if attempt == self.max_retries:
                    attempts = f"gave up after {attempt + 1} attempt(s)"
                    raise LLMError(f"{error} ({attempts})", transient=True) from None
                delay = self._backoff(attempt)
                log.warning(
                    "LLM call %s failed (attempt %d of %d), retrying in %.2fs: %s",
                    call.prompt_id.value,
                    attempt + 1,
                    self.max_retries + 1,
                    delay,
                    error,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    async def _attempt(self, call: LLMCall) -> LLMReply:
        messages = [{"role": "user", "content": call.prompt.to_xml()}]
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._client.chat.completions.create(
                    model=self.model, messages=messages
                )
        except TimeoutError:
            detail = f"timed out after {self.timeout}s"
            raise LLMError(self._describe(call, detail), transient=True) from None
        except openai.APIConnectionError as exc:  # includes the client's APITimeoutError
            raise LLMError(self._describe(call, self._scrub(str(exc))), transient=True) from None
        except openai.APIStatusError as exc:
            raise self._status_error(call, exc) from None
        except openai.OpenAIError as exc:
            detail = f"{type(exc).__name__}: {self._scrub(str(exc))}"
            raise LLMError(self._describe(call, detail), transient=False) from None
        return self._reply(call, response)

    def _reply(self, call: LLMCall, response: object) -> LLMReply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError(self._describe(call, "the reply had no choices"), transient=False)
        text = choices[0].message.content
        if not text or not text.strip():
            reason = choices[0].finish_reason
            detail = f"the reply was empty (finish_reason={reason})"
            raise LLMError(self._describe(call, detail), transient=False)
        usage = getattr(response, "usage", None)
        return LLMReply(
            text=text,
            usage=TokenUsage(
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            ),
            model=getattr(response, "model", None) or self.model,
        )

    def _status_error(self, call: LLMCall, exc: openai.APIStatusError) -> LLMError:
        status = exc.status_code
        transient = status == 429 or status >= 500
        detail = f"HTTP {status}: {self._scrub(exc.message)}"
        return LLMError(self._describe(call, detail), transient=transient)

    def _backoff(self, attempt: int) -> float:
        """Full jitter: spreads the retries of many workers hit by the same outage."""
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))

    def _describe(self, call: LLMCall, detail: str) -> str:
        return f"{self.family} model {self.model!r}, prompt {call.prompt_id.value}: {detail}"

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text
