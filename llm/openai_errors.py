"""What an OpenAI-compatible server's error says: the context window, an option it refuses, when
to come back, and the line Aeon raises for it, with the API key never in it.

Read by the OpenAI adapter's transport (llm.openai_transport), step-downs
(llm.openai_stepdowns) and retries (llm.openai_retry). Errors are raised without the client's
exception chained, since that exception's text is exactly what may echo the key.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import openai

from aeonloop.exceptions import ContextLengthError, LLMError
from aeonloop.llm.base import LLMCall

#: The logger of every part of the OpenAI adapter, named as the adapter's module: the step-downs
#: and retries it says are the adapter's, as a logging configuration names them.
log = logging.getLogger("aeonloop.llm.openai_adapter")

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


class RetryLater(LLMError):
    """A transient failure whose server said when to come back (never leaves the adapter)."""

    def __init__(self, message: str, retry_after: float | None, *, unreachable: bool) -> None:
        super().__init__(message, transient=True, unreachable=unreachable)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Endpoint:
    """The model an error names, and the key no text may carry."""

    family: str
    model: str
    #: The base URL with any credentials in it redacted.
    where: str
    secret: str

    def describe(self, call: LLMCall, detail: str) -> str:
        return f"{self.family} model {self.model!r}, prompt {call.prompt_id.value}: {detail}"

    def scrub(self, text: str) -> str:
        return text.replace(self.secret, "***") if self.secret else text

    def status_error(self, call: LLMCall, exc: openai.APIStatusError) -> LLMError:
        """An HTTP error as Aeon raises it: the context window (ContextLengthError), a 429 or
        5xx to retry (RetryLater, with the wait the server asked for), else a failure."""
        status = exc.status_code
        detail = f"HTTP {status}: {self.scrub(exc.message)}"
        if is_context_error(exc):
            return ContextLengthError(
                self.describe(call, detail), limit_tokens=_context_limit(error_text(exc))
            )
        if status == 429 or status >= 500:
            return RetryLater(
                self.describe(call, detail),
                retry_after(exc.response.headers),
                unreachable=status >= 500,
            )
        return LLMError(self.describe(call, detail), transient=False)

    def stream_error(self, call: LLMCall, exc: openai.APIError) -> LLMError:
        """An error the server sent as an event of a stream it had begun (llama.cpp, Ollama and
        vLLM do, for what they find wrong once the reply is under way): the streamed
        counterpart of an HTTP error, transient (as a 5xx is) unless it is the context window."""
        detail = f"the server ended the stream with an error: {self.scrub(exc.message)}"
        text = f"{exc.message} {exc.body!r}"
        if _CONTEXT_ERROR.search(text):
            return ContextLengthError(
                self.describe(call, detail), limit_tokens=_context_limit(text)
            )
        return LLMError(self.describe(call, detail), transient=True)


def error_text(exc: openai.APIStatusError) -> str:
    return f"{exc.message} {exc.body!r}"


def is_context_error(exc: openai.APIStatusError) -> bool:
    return exc.status_code in (400, 413, 422) and bool(_CONTEXT_ERROR.search(error_text(exc)))


def _context_limit(text: str) -> int | None:
    limit = _CONTEXT_LIMIT.search(text)
    return int(limit.group(1)) if limit else None


def retry_after(headers: Any) -> float | None:
    """Seconds the server asked to wait (`retry-after-ms`, else `retry-after` in seconds), else
    when the provider's exhausted limit resets (`x-ratelimit-reset-requests` or `-tokens`,
    OpenAI's durations such as `1s`, `6m0s`, `20ms`, where its `x-ratelimit-remaining-` says
    0)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        try:
            seconds = float(raw) / scale if raw is not None else None
        except ValueError:
            continue  # an HTTP date: rare from LLM servers; the backoff covers it
        if seconds is not None and seconds >= 0:
            return min(seconds, RETRY_AFTER_MAX_S)
    resets = [
        _duration(headers.get(f"x-ratelimit-reset-{kind}") or "")
        for kind in ("requests", "tokens")
        if str(headers.get(f"x-ratelimit-remaining-{kind}", "")).strip() == "0"
    ]
    found = [seconds for seconds in resets if seconds is not None]
    return min(max(found), RETRY_AFTER_MAX_S) if found else None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _duration(text: str) -> float | None:
    """A provider's reset duration (`1s`, `6m0s`, `20ms`, `1h2m3.5s`) in seconds; None when it
    is none."""
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text:
        return None
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def cause(exc: BaseException) -> str:
    """What a connection error comes down to (refused, a name that does not resolve, ...): the
    client's own text is only "Connection error."."""
    found = exc.__cause__ or exc.__context__
    while found is not None and (found.__cause__ or found.__context__) is not None:
        found = found.__cause__ or found.__context__
    text = str(found) if found is not None else ""
    return text or str(exc)
