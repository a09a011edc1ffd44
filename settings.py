"""One settings layer: every AEON_* variable is read, typed and checked here.

Each group of settings (the bus, the LLM, the loop, logging) is a pydantic-settings class with
the `AEON_` prefix. pydantic-settings reads and converts the environment; this layer adds two
things it does not do:

- Constructing a settings class takes only what is passed (tests, `with_`): the environment is
  read by `from_env()` alone, so a developer's AEON_REDIS_URL never leaks into a test.
- A bad value becomes one `SettingsError` line naming the variable, the value and the rule,
  e.g. "AEON_CONCURRENCY='1.5': must be a whole number", which the CLI prints with exit 2.
  Only a secret's value (a SecretStr or a field kept out of reprs: the LLM key, the bearer
  tokens, the webhook secret) is masked there, and a URL's password (`redact`).

The variables come in two groups (docs/configuration.md): the core, what a user sets (a field
marked `core("one line")`, which `aeon --help` lists with that line), and the advanced rest. A
variable renamed keeps its old name for a while (`renamed`), and `notices` says, once at the
start of a command, which old names and which unknown AEON_* variables (a typo) are set.
"""

from __future__ import annotations

import contextvars
import difflib
import re
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from aeonloop.exceptions import SettingsError

__all__ = [
    "AeonSettings",
    "LogSettings",
    "SettingsError",
    "bare_url",
    "bare_urls",
    "core",
    "core_lines",
    "notices",
    "redact",
    "renamed",
    "variables",
]

#: A URL's user:password@, also in one written without its scheme (user:pw@host:8080/v1).
_CREDENTIALS = re.compile(r"(?:(?<=://)|^)[^@/\s]*@")
_QUERY_SECRET = re.compile(r"(?i)((?:password|username)=)[^&]*")
_URL = re.compile(r"(?i)https?://[^\s'\"<>]+")
#: AEON_* variables that are no setting of Aeon's own, so never taken for a typo: the test
#: suite's and the benchmark's, and the Redis binary the embedded server runs
#: (servers/embedded.py, docs/gateway.md).
OTHER_TOOLS_PREFIXES = ("AEON_TEST_", "AEON_BENCH_")
OTHER_TOOLS_VARIABLES = frozenset({"AEON_REDIS_SERVER_BIN"})
_CORE = "core"
_RENAMED_FROM = "renamed_from"
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


def core(line: str) -> Any:
    """Marks a field as a core setting, one a user sets, with the line `aeon --help` gives it
    (in `Annotated[type, core("...")]`)."""
    return Field(description=line, json_schema_extra={_CORE: True})


def renamed(new: str, old: str) -> Any:
    """A field read from the variable `new`, and from `old`, its former name, until that goes:
    setting `old` still works, and `notices` says to use `new` (in `Annotated[type, ...]`)."""
    return Field(validation_alias=AliasChoices(new, old), json_schema_extra={_RENAMED_FROM: old})


def _extra(info: FieldInfo, key: str) -> Any:
    extra = info.json_schema_extra
    return extra.get(key) if isinstance(extra, dict) else None


def _mentions(annotation: Any, kind: type) -> bool:
    """Whether `annotation` is `kind` or holds it (`SecretStr | None`, `Annotated[...]`)."""
    return annotation is kind or any(_mentions(arg, kind) for arg in typing.get_args(annotation))


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
        """The environment variable that sets `field` (its first alias, when it has aliases)."""
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, AliasChoices):
            alias = alias.choices[0]
        if isinstance(alias, str):
            return alias.upper()
        prefix = cls.model_config.get("env_prefix", "")
        return f"{prefix}{field}".upper()

    @classmethod
    def other_names(cls, field: str) -> list[str]:
        """The other variables `field` is read from: a former name, OPENAI_API_KEY."""
        alias = cls.model_fields[field].validation_alias
        if not isinstance(alias, AliasChoices):
            return []
        return [str(name).upper() for name in alias.choices[1:]]

    @classmethod
    def is_secret(cls, field: str) -> bool:
        """Whether `field` holds a secret (a SecretStr, or a field kept out of reprs): its
        value is never shown, even when it is wrong."""
        info = cls.model_fields[field]
        return not info.repr or _mentions(info.annotation, SecretStr)

    @classmethod
    def _field_of(cls, name: str) -> str | None:
        """The field an error's location names: a field's name, or one of its variables."""
        if name in cls.model_fields:
            return name
        for field in cls.model_fields:
            if name.upper() in (cls.variable(field), *cls.other_names(field)):
                return field
        return None

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
        location = str(problem["loc"][0])
        field = cls._field_of(location)
        name = cls.variable(field) if field else location.upper()
        given = problem["input"]
        if field is None or cls.is_secret(field):
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

    log_level: Annotated[
        LogLevel | None,
        core("DEBUG, INFO, WARNING, ERROR or CRITICAL (unset: WARNING for ask, INFO for worker)"),
    ] = None

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value


def variables(classes: Iterable[type[AeonSettings]]) -> dict[str, str]:
    """Every variable the settings `classes` read, each with the name to use: itself, or the
    new name of a variable that was renamed."""
    names: dict[str, str] = {}
    for cls in classes:
        for field, info in cls.model_fields.items():
            variable = cls.variable(field)
            names[variable] = variable
            old = _extra(info, _RENAMED_FROM)
            for other in cls.other_names(field):
                names[other] = variable if other == old else other
    return names


def core_lines(classes: Iterable[type[AeonSettings]]) -> list[tuple[str, str]]:
    """The core settings of `classes`, in their order: (variable, its one line)."""
    return [
        (cls.variable(field), info.description or "")
        for cls in classes
        for field, info in cls.model_fields.items()
        if _extra(info, _CORE)
    ]


def notices(environ: Mapping[str, str], classes: Iterable[type[AeonSettings]]) -> list[str]:
    """One line for each AEON_* variable in `environ` that no setting of `classes` reads (a
    typo, naming the closest known variable) and each set by a former name (naming the new)."""
    known = variables(classes)
    lines = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("AEON_") or upper in OTHER_TOOLS_VARIABLES:
            continue
        if upper.startswith(OTHER_TOOLS_PREFIXES):
            continue
        if upper not in known:
            closest = difflib.get_close_matches(upper, sorted(set(known.values())), n=1, cutoff=0.6)
            hint = f": did you mean {closest[0]}?" if closest else ""
            lines.append(f"{upper} is not a setting of Aeon's and is ignored{hint}")
        elif known[upper] != upper:
            lines.append(f"{upper} is a former name: set {known[upper]} instead")
    return lines


#: A tenant's name, as AEON_HTTP_TOKENS and its file give it (`name:token`): safe in a Redis
#: key's hash tag, a Prometheus label and a log line.
TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: The tenant of every request to an API with no tokens (AEON_HTTP_TOKENS unset).
ANONYMOUS = "anonymous"


class Price(BaseModel):
    """What a model's tokens cost, in any one currency, per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    cached_input: Annotated[float | None, Field(ge=0, allow_inf_nan=False)] = None
    output: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class TenantSettings(AeonSettings):
    """Quotas of each tenant (a named API token, AEON_HTTP_TOKENS) and the price table of the
    cost ledger (aeonloop.tenants): every `aeon serve` of a deployment reads them alike, and
    Redis keeps the counts they are held to."""

    #: Runs a tenant may have in flight at once, over every `aeon serve`; 0: no limit.
    tenant_max_runs: Annotated[int, Field(ge=0)] = 0
    #: Tokens (prompt and completion) a tenant's runs may spend in a UTC day; 0: no limit.
    tenant_daily_tokens: Annotated[int, Field(ge=0)] = 0
    #: The price of each model's tokens per million, as JSON: {"model": {"input": 2.5,
    #: "cached_input": 1.25, "output": 10}}; a model left out has no cost.
    prices: dict[str, Price] = Field(default_factory=dict)
    #: A JSON file with the same table; a model in both takes AEON_PRICES's price.
    prices_file: Path | None = None

    def price_table(self) -> dict[str, Price]:
        """AEON_PRICES_FILE's table, with AEON_PRICES over it; SettingsError for a file that
        cannot be read or is not such a table."""
        if self.prices_file is None:
            return dict(self.prices)
        variable = self.variable("prices_file")
        try:
            text = self.prices_file.read_text(encoding="utf-8")
        except OSError as error:
            raise SettingsError(
                f"{variable}={str(self.prices_file)!r}: cannot read it ({error.strerror}); "
                "name a readable JSON file"
            ) from None
        try:
            table = _PRICE_TABLE.validate_json(text)
        except ValidationError as error:
            problem = error.errors(include_url=False)[0]
            where = ".".join(str(part) for part in problem["loc"]) or "the file"
            raise SettingsError(
                f"{variable}={str(self.prices_file)!r}: {where}: {problem['msg']}; write "
                '{"model": {"input": 2.5, "cached_input": 1.25, "output": 10}}'
            ) from None
        return {**table, **self.prices}


_PRICE_TABLE = TypeAdapter(dict[str, Price])
