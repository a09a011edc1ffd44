"""Choose and build the LLM adapter from the environment.

| variable              | meaning                                                 | default  |
| --------------------- | ------------------------------------------------------- | -------- |
| AEON_LLM              | offline, openai or scripted                             | offline  |
| AEON_LLM_BASE_URL     | OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 | (none) |
| AEON_LLM_MODEL        | model name sent to the endpoint                         | (none)   |
| AEON_LLM_API_KEY      | key for the endpoint; falls back to OPENAI_API_KEY      | (none)   |
| AEON_LLM_TIMEOUT      | seconds per call attempt                                | 60       |
| AEON_LLM_MAX_RETRIES  | retries of transient failures after the first attempt   | 3        |
| AEON_LLM_STRUCTURED_OUTPUT | auto (json_schema, stepping down), json_object, off | auto     |
| AEON_LLM_MAX_TOKENS   | reply token budget sent to the server (unset: its own)  | (none)   |
| AEON_LLM_DELAY_MS     | offline/scripted stand-in latency per call              | 0        |
| AEON_LLM_SCRIPT       | JSON script file for `scripted`                         | (none)   |

Offline is the default so that `aeon ask` works on a fresh machine with no key and no network.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from llm.base import STRUCTURED_OUTPUTS, LLMAdapter, StructuredOutput
from llm.offline import OfflineLLM
from llm.scripted import ScriptedLLM

if TYPE_CHECKING:
    from llm.openai_adapter import OpenAIAdapter

AdapterKind = Literal["offline", "openai", "scripted"]
KINDS: tuple[AdapterKind, ...] = ("offline", "openai", "scripted")


class LLMSettings(BaseModel):
    """Which adapter to build and how; the key is a SecretStr so no repr or log can show it."""

    model_config = ConfigDict(frozen=True)

    kind: AdapterKind = "offline"
    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    timeout: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0)
    structured_output: StructuredOutput = "auto"
    max_tokens: int | None = Field(None, ge=1)
    delay_ms: float = Field(0.0, ge=0)
    script: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> LLMSettings:
        """Read AEON_LLM_* (see the module doc); ValueError names the variable that is wrong."""
        kind = _get(env, "AEON_LLM", "offline").lower()
        if kind not in KINDS:
            raise ValueError(f"AEON_LLM must be one of {', '.join(KINDS)}; got {kind!r}")
        api_key = _get(env, "AEON_LLM_API_KEY") or _get(env, "OPENAI_API_KEY")
        script = _get(env, "AEON_LLM_SCRIPT")
        structured = _get(env, "AEON_LLM_STRUCTURED_OUTPUT", "auto").lower()
        if structured not in STRUCTURED_OUTPUTS:
            choices = ", ".join(STRUCTURED_OUTPUTS)
            raise ValueError(
                f"AEON_LLM_STRUCTURED_OUTPUT must be one of {choices}; got {structured!r}"
            )
        max_tokens = env_number(env, "AEON_LLM_MAX_TOKENS", 0, minimum=1, integer=True)
        return cls(
            kind=kind,
            base_url=_get(env, "AEON_LLM_BASE_URL") or None,
            model=_get(env, "AEON_LLM_MODEL") or None,
            api_key=SecretStr(api_key) if api_key else None,
            timeout=env_number(env, "AEON_LLM_TIMEOUT", 60.0, minimum=0.0, exclusive=True),
            max_retries=int(env_number(env, "AEON_LLM_MAX_RETRIES", 3, minimum=0, integer=True)),
            structured_output=structured,
            max_tokens=int(max_tokens) or None,
            delay_ms=env_number(env, "AEON_LLM_DELAY_MS", 0.0, minimum=0.0),
            script=Path(script) if script else None,
        )


def build_adapter(settings: LLMSettings) -> LLMAdapter:
    """The adapter `settings` ask for; ValueError says which setting is missing."""
    delay = settings.delay_ms / 1000
    if settings.kind == "offline":
        return OfflineLLM(delay=delay)
    if settings.kind == "scripted":
        if settings.script is None:
            raise ValueError("AEON_LLM=scripted needs AEON_LLM_SCRIPT, the JSON script file")
        return ScriptedLLM.from_file(settings.script, delay=delay)
    return _openai(settings)


def _openai(settings: LLMSettings) -> OpenAIAdapter:
    required = {"AEON_LLM_BASE_URL": settings.base_url, "AEON_LLM_MODEL": settings.model}
    if not settings.base_url or not settings.model:
        missing = [name for name, value in required.items() if not value]
        raise ValueError(
            f"AEON_LLM=openai needs {' and '.join(missing)} "
            "(e.g. AEON_LLM_BASE_URL=http://localhost:11434/v1 AEON_LLM_MODEL=llama3.1)"
        )
    # Imported here: the openai client costs ~0.25 s of start-up the offline default never needs.
    from llm.openai_adapter import OpenAIAdapter

    return OpenAIAdapter(
        base_url=settings.base_url,
        model=settings.model,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        structured_output=settings.structured_output,
        max_tokens=settings.max_tokens,
    )


def _get(env: Mapping[str, str], name: str, default: str = "") -> str:
    return env.get(name, "").strip() or default


def env_number(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    minimum: float,
    exclusive: bool = False,
    integer: bool = False,
) -> float:
    """`name` from `env` as a number at or above `minimum`; ValueError names the variable."""
    raw = _get(env, name)
    if not raw:
        return default
    kind = "a whole number" if integer else "a number"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ValueError(f"{name} must be {kind}; got {raw!r}") from None
    too_small = value <= minimum if exclusive else value < minimum
    if too_small or value != value:  # NaN compares unequal to itself
        bound = f"more than {minimum:g}" if exclusive else f"at least {minimum:g}"
        raise ValueError(f"{name} must be {bound}; got {raw!r}")
    return value
