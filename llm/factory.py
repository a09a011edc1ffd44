"""Choose and build the LLM adapter from the environment.

| variable              | meaning                                                 | default  |
| --------------------- | ------------------------------------------------------- | -------- |
| AEON_LLM              | offline, openai or scripted                             | offline  |
| AEON_LLM_BASE_URL     | OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 | (none) |
| AEON_LLM_MODEL        | model name sent to the endpoint                         | (none)   |
| AEON_LLM_API_KEY      | key for the endpoint; falls back to OPENAI_API_KEY      | (none)   |
| AEON_LLM_TIMEOUT      | seconds to a call's first token (with the next setting) | 60       |
| AEON_LLM_FIRST_TOKEN_PER_1K_S | more seconds to it per 1,000 prompt tokens      | 30       |
| AEON_LLM_IDLE_TIMEOUT | seconds a streaming reply may go without a token        | 30       |
| AEON_LLM_WHOLE_REPLY_PER_1K_S | more seconds per 1,000 reply tokens, sent whole | 120      |
| AEON_LLM_MAX_RETRIES  | retries of transient failures after the first attempt   | 3        |
| AEON_LLM_STRUCTURED_OUTPUT | auto (json_schema, stepping down), json_object, off | auto     |
| AEON_LLM_MAX_TOKENS   | reply token budget sent to the server (unset: its own)  | (none)   |
| AEON_LLM_OUTAGE_CALLS_PER_MINUTE | calls a minute to an endpoint away in the last minute | 20 |
| AEON_LLM_REQUESTS_PER_MINUTE | requests a minute the deployment sends the endpoint | (none) |
| AEON_LLM_TOKENS_PER_MINUTE | tokens a minute the deployment sends the endpoint | (none) |
| AEON_LLM_MAX_IN_FLIGHT | calls in flight to the endpoint across the deployment | (none) |
| AEON_LLM_LIMIT_LEASE_S | seconds a killed worker's slot in flight stays taken | 60 |
| AEON_LLM_LIMIT_WINDOW_S | seconds the two limits "a minute" count over         | 60 |
| AEON_LLM_DELAY_MS     | offline/scripted stand-in latency per call              | 0        |
| AEON_LLM_SCRIPT       | JSON script file for `scripted`                         | (none)   |

Offline is the default so that `aeon ask` works on a fresh machine with no key and no network.

The three time limits judge a call by its progress (llm.streaming): a call that keeps producing
tokens is never cut for its length, only one whose first token, or next token, does not come in
time (a stall, retried within AEON_LLM_MAX_RETRIES), or whose request's deadline passes. A
call sent whole (to a server that does not stream, or whose streams others cut short) has one
"token", its whole reply: its bound is the first-token bound plus
AEON_LLM_WHOLE_REPLY_PER_1K_S for each 1,000 tokens of its reply budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator

from aeonloop.exceptions import SettingsError
from aeonloop.llm.base import LLMAdapter, StructuredOutput
from aeonloop.llm.limiter import Limits, LocalLimit, RateLimiter, RedisLimit
from aeonloop.llm.offline import OfflineLLM
from aeonloop.llm.scripted import ScriptedLLM
from aeonloop.settings import AeonSettings, core, redact

if TYPE_CHECKING:
    from aeonloop.bus.keys import Keys
    from aeonloop.llm.openai_adapter import OpenAIAdapter

AdapterKind = Literal["offline", "openai", "scripted"]
KINDS: tuple[AdapterKind, ...] = ("offline", "openai", "scripted")


class LLMSettings(AeonSettings, env_prefix="AEON_LLM_"):
    """Which adapter to build and how; the key is a SecretStr so no repr or log can show it."""

    kind: Annotated[
        AdapterKind,
        core("offline (the default, no model), openai (any OpenAI-compatible server) or scripted"),
    ] = Field("offline", validation_alias="AEON_LLM")
    base_url: Annotated[
        str | None, core("the server's OpenAI-compatible API, e.g. http://localhost:11434/v1")
    ] = None
    model: Annotated[str | None, core("the model name the server serves, e.g. llama3.1")] = None
    api_key: Annotated[
        SecretStr | None, core("the server's API key (else OPENAI_API_KEY); never shown")
    ] = Field(None, validation_alias=AliasChoices("AEON_LLM_API_KEY", "OPENAI_API_KEY"))
    #: Seconds a call may wait for its first token, for a prompt of no length: the server's
    #: queue, the connection, and a reply's start. A server that does not stream sends its
    #: whole reply as its first token.
    timeout: Annotated[
        float,
        Field(gt=0, allow_inf_nan=False),
        core("seconds an LLM call may wait for its first token (60; more for long prompts)"),
    ] = 60.0
    #: More seconds to the first token for each 1,000 prompt tokens (estimated at 4 characters
    #: each), the server's processing of the prompt: 30 s is ~33 prompt tokens a second, what a
    #: few-billion-parameter model on a busy 2-core CPU manages. Its variable is named for what
    #: it bounds, the first token.
    prompt_s_per_1k: Annotated[
        float, Field(ge=0, allow_inf_nan=False, validation_alias="AEON_LLM_FIRST_TOKEN_PER_1K_S")
    ] = 30.0
    #: Seconds a streaming reply may go without a token once its first has come.
    idle_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 30.0
    #: More seconds a call sent whole (not streamed) may take, beyond its first-token bound, for
    #: each 1,000 tokens of its reply budget: the server writes all the reply before it sends a
    #: byte. 120 s is ~8 tokens a second, what a few-billion-parameter model writes on a busy
    #: 2-core CPU; a reply is most often shorter than its budget, which leaves time for calls
    #: queued before it.
    reply_s_per_1k: Annotated[
        float, Field(ge=0, allow_inf_nan=False, validation_alias="AEON_LLM_WHOLE_REPLY_PER_1K_S")
    ] = 120.0
    max_retries: Annotated[int, Field(ge=0)] = 3
    structured_output: StructuredOutput = "auto"
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    #: Calls (attempts and one-token probes) a minute to an endpoint whose outage gate has
    #: closed within the last minute (llm.outage): a server that flaps, or lists its models while
    #: every chat call fails, is not sent a storm.
    outage_calls_per_minute: Annotated[int, Field(ge=1)] = 20
    #: The rate limit every worker of a deployment shares for this endpoint and model
    #: (llm.limiter), kept in Redis: requests and tokens a minute, and calls in flight. Unset:
    #: no limit of that kind.
    requests_per_minute: Annotated[int, Field(ge=1)] | None = None
    tokens_per_minute: Annotated[int, Field(ge=1)] | None = None
    max_in_flight: Annotated[int, Field(ge=1)] | None = None
    #: Seconds a slot in flight is held without renewal (renewed while its call runs): a killed
    #: worker's slots come back after it.
    limit_lease_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    #: Seconds the requests and tokens "a minute" count over: 60, as providers publish their
    #: limits; shorter for a provider that counts per second (a limit of 10 a second is
    #: AEON_LLM_REQUESTS_PER_MINUTE=10 with AEON_LLM_LIMIT_WINDOW_S=1).
    limit_window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    delay_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    script: Path | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        """A URL the client can call: without its scheme (`localhost:8080/v1`) it would be taken
        for a server that does not answer (exit 6) where it is a setting to fix (exit 2)."""
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            example = "http://localhost:11434/v1" if "://" in url else redact(f"http://{url}")
            raise ValueError(f"must be an http:// or https:// URL naming a host, e.g. {example}")
        return url

    @field_validator("kind", "structured_output", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _complete(self) -> LLMSettings:
        """What each adapter needs, asked for when the settings are read, not at the first call."""
        if self.kind == "scripted" and self.script is None:
            raise ValueError("AEON_LLM=scripted needs AEON_LLM_SCRIPT, the JSON script file")
        if self.kind == "openai" and not (self.base_url and self.model):
            missing = [
                name
                for name, value in (
                    ("AEON_LLM_BASE_URL", self.base_url),
                    ("AEON_LLM_MODEL", self.model),
                )
                if not value
            ]
            raise ValueError(
                f"AEON_LLM=openai needs {' and '.join(missing)} "
                "(e.g. AEON_LLM_BASE_URL=http://localhost:11434/v1 AEON_LLM_MODEL=llama3.1)"
            )
        return self

    @property
    def limits(self) -> Limits:
        """The shared rate limit these settings ask for (llm.limiter)."""
        return Limits(
            self.requests_per_minute,
            self.tokens_per_minute,
            self.max_in_flight,
            self.limit_lease_s,
            self.limit_window_s,
        )


def share_limit(adapter: LLMAdapter, redis: Any, keys: Keys) -> None:
    """The seam a worker uses: an adapter with a rate limit keeps it in Redis from now on,
    shared with every worker of the deployment (without a bus, it stays in this process)."""
    limiter = getattr(adapter, "limiter", None)
    if isinstance(limiter, RateLimiter):
        endpoint = getattr(adapter, "where", "")
        model = getattr(adapter, "model", "")
        limiter.shared = RedisLimit(redis, keys.llm_limit(endpoint, model), limiter.limits)


def build_adapter(settings: LLMSettings) -> LLMAdapter:
    """The adapter `settings` ask for (LLMSettings has checked it has what it needs)."""
    delay = settings.delay_ms / 1000
    if settings.kind == "openai":
        return _openai(settings)
    if settings.kind == "scripted" and settings.script is not None:
        try:
            return ScriptedLLM.from_file(settings.script, delay=delay)
        except ValueError as error:
            raise SettingsError(f"AEON_LLM_SCRIPT: {error}") from None
    return OfflineLLM(delay=delay)


async def ready_adapter(settings: LLMSettings) -> LLMAdapter:
    """The adapter, checked at start: an endpoint that does not answer within seconds, or does
    not serve the model, raises LLMNotReady (one line; the CLI exits 6) before any work is
    taken, instead of every run failing minutes later."""
    adapter = build_adapter(settings)
    try:
        await adapter.check()
    except BaseException:
        await adapter.aclose()
        raise
    return adapter


def _openai(settings: LLMSettings) -> OpenAIAdapter:
    # Imported here: the openai client costs ~0.25 s of start-up the offline default never needs.
    from aeonloop.llm.openai_adapter import OpenAIAdapter
    from aeonloop.llm.outage import OutagePolicy

    adapter = OpenAIAdapter(
        base_url=settings.base_url,
        model=settings.model,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        idle_timeout=settings.idle_timeout,
        first_token_per_1k=settings.prompt_s_per_1k,
        whole_reply_per_1k=settings.reply_s_per_1k,
        structured_output=settings.structured_output,
        max_tokens=settings.max_tokens,
        outage=OutagePolicy(calls_per_window=settings.outage_calls_per_minute),
    )
    limits = settings.limits
    if limits.enabled:
        adapter.limiter = RateLimiter(LocalLimit(limits), limits, adapter.where)
    return adapter
