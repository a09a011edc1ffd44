"""One settings layer: every AEON_* variable is read, typed and checked here.

Each group of settings (the bus, the LLM, the loop, logging) is a pydantic-settings class with
the `AEON_` prefix. pydantic-settings reads and converts the environment; this layer adds two
things it does not do:

- Constructing a settings class takes only what is passed (tests, `with_`): the environment is
  read by `from_env()` alone, so a developer's AEON_REDIS_URL never leaks into a test.
- A bad value becomes one `SettingsError` line naming the variable, the value and the rule,
  e.g. "AEON_CONCURRENCY='1.5': must be a whole number", which the CLI prints with exit 2.
"""

from __future__ import annotations

import contextvars
import re
from typing import Any, ClassVar, Literal, Self
from urllib.parse import urlsplit

from pydantic import ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from aeonloop.exceptions import SettingsError

__all__ = ["AeonSettings", "LogSettings", "SettingsError", "bare_url", "bare_urls", "redact"]

_CREDENTIALS = re.compile(r"(?<=://)[^@/]*@")
_QUERY_SECRET = re.compile(r"(?i)((?:password|username)=)[^&]*")
_URL = re.compile(r"(?i)https?://[^\s'\"<>]+")
_SECRET_FIELDS = ("key", "password", "token", "secret")
#: pydantic's bounds, said as a person would.
_BOUNDS = (
    ("greater than or equal to", "at least"),
    ("less than or equal to", "at most"),
    ("greater than", "more than"),
)

_READ_ENV: contextvars.ContextVar[bool] = contextvars.ContextVar("aeon_read_env", default=False)

#: pydantic's wording for the failures a person setting a variable makes, said plainly.
_PLAIN = {
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be 1, 0, true or false",
    "finite_number": "must be a finite number",
}


def redact(url: str) -> str:
    """The URL with any user:password part or ?password= masked, for logs and error messages."""
    return _QUERY_SECRET.sub(r"\1***", _CREDENTIALS.sub("***@", url))


def bare_url(url: str) -> str:
    """The URL without its user name, password, query and fragment: what a line may show of a
    URL a person gave, where any of those may hold a secret (a webhook's, an MCP server's)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def bare_urls(text: str) -> str:
    """`text` with every http(s) URL in it made a `bare_url`."""
    return _URL.sub(lambda found: bare_url(found.group(0)), text)


class AeonSettings(BaseSettings):
    """Base of every settings group: frozen, `AEON_`-prefixed, blank means unset."""

    model_config = SettingsConfigDict(
        env_prefix="AEON_",
        frozen=True,
        extra="ignore",
        env_ignore_empty=True,
        case_sensitive=False,
        validate_default=True,
        populate_by_name=True,
    )

    #: Variables named by their alias rather than AEON_<FIELD> (e.g. AEON_LLM for `kind`).
    variable_names: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        """A variable set to spaces means its default, and values lose stray spaces."""
        if not isinstance(data, dict):
            return data
        return {
            name: value.strip() if isinstance(value, str) else value
            for name, value in data.items()
            if not (isinstance(value, str) and not value.strip())
        }

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings) if _READ_ENV.get() else (init_settings,)

    @classmethod
    def from_env(cls) -> Self:
        """The settings the environment gives; SettingsError names the first bad variable."""
        token = _READ_ENV.set(True)
        try:
            return cls()
        except ValidationError as error:
            raise SettingsError(cls.describe(error)) from None
        finally:
            _READ_ENV.reset(token)

    @classmethod
    def variable(cls, field: str) -> str:
        """The environment variable that sets `field`."""
        prefix = cls.model_config.get("env_prefix", "")
        return cls.variable_names.get(field) or f"{prefix}{field}".upper()

    @classmethod
    def describe(cls, error: ValidationError) -> str:
        """One line for the first problem: the variable, the value given, what it must be."""
        problem = error.errors(include_url=False)[0]
        message = _PLAIN.get(problem["type"]) or problem["msg"]
        message = message.removeprefix("Value error, ")
        message = message.replace("Input should be", "must be")
        for theirs, ours in _BOUNDS:
            message = message.replace(theirs, ours)
        if not problem["loc"]:  # a check across variables names them in its message
            return message
        field = str(problem["loc"][0])
        name = cls.variable(field) if field in cls.model_fields else field.upper()
        given = problem["input"]
        if any(word in field for word in _SECRET_FIELDS):
            given = "***"
        elif isinstance(given, str):
            given = redact(given)
        return f"{name}={given!r}: {message}"

    def with_(self, **changes: Any) -> Self:
        """A copy with `changes`, checked like the original."""
        try:
            return type(self).model_validate({**self.model_dump(), **changes})
        except ValidationError as error:
            raise SettingsError(type(self).describe(error)) from None


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class LogSettings(AeonSettings):
    """AEON_LOG_LEVEL; unset, each command picks its own (`ask` is quiet, `worker` says more)."""

    log_level: LogLevel | None = None

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value
