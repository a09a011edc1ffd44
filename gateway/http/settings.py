"""Settings of `aeon serve`, the HTTP API and run page: AEON_HTTP_*, checked like every other
group (settings.py). Lists are comma-separated, as a person writes them in an environment."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from aeonloop.settings import ANONYMOUS, TENANT_NAME, AeonSettings, SettingsError

#: The shortest bearer token accepted: guessing one must be hopeless (`openssl rand -hex 32`).
MIN_TOKEN_CHARS = 16

CommaList = Annotated[tuple[str, ...], NoDecode]


class HttpSettings(AeonSettings):
    #: Where `aeon serve` listens (`--host`, `--port`): this machine only, unless told otherwise.
    #: Port 0 takes any free one (the log says which).
    http_host: str = Field("127.0.0.1", min_length=1)
    http_port: Annotated[int, Field(ge=0, le=65535)] = 8080
    #: Bearer tokens the API accepts, each `name:token` (the tenant it stands for,
    #: aeonloop.tenants) or a bare token (a tenant of its own, named by a hash of it); none
    #: configured, the API is open (to whoever can reach the host and port). Never logged.
    http_tokens: Annotated[CommaList, Field(repr=False)] = ()
    #: A file of more tokens, one a line, written as in AEON_HTTP_TOKENS (`#` starts a comment).
    http_tokens_file: Path | None = None
    #: The largest request body accepted (a request of 20,000 characters and 100 rules fit).
    http_max_body_bytes: Annotated[int, Field(ge=1024)] = 1_000_000
    #: Per client address: requests a second to the API, sustained, and the burst allowed above
    #: it; 0 turns the limit off.
    http_rate_per_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 20.0
    http_rate_burst: Annotated[int, Field(ge=1)] = 60
    #: Origins whose pages may call the API from a browser (CORS); none, the browser allows
    #: only the run page served here. `*` allows any.
    http_cors_origins: CommaList = ()
    #: Host names the server answers to (the Host header), besides this machine's own names
    #: and the address it listens on: a page on another site that resolves its name to this
    #: address (DNS rebinding) is then refused. `*` allows any.
    http_allowed_hosts: CommaList = ()
    #: Addresses of the reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are
    #: believed (the rate limit then counts the address they name); none, the headers are
    #: ignored, as anyone can send them. `*` believes any peer.
    http_trusted_proxies: CommaList = ()
    #: Seconds a request's head (its request line and headers) may take to arrive, from the
    #: connection's start or its next request's first byte; a connection past it is closed.
    http_header_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 10.0
    #: Seconds a request's body may take to arrive: past it, 408.
    http_body_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 30.0
    #: Connections and requests at once; past it, a new request is answered 503 by the server
    #: (a thousand readers of event streams fit).
    http_max_connections: Annotated[int, Field(ge=1)] = 4096
    #: A chat completion whose client goes before its answer (a stream closed, a request
    #: dropped) has its run cancelled, as nobody will read the answer; true lets the run finish,
    #: its answer kept like any run's (`aeon answer ID`, the run page).
    chat_finish_on_disconnect: bool = False

    @field_validator(
        "http_tokens",
        "http_cors_origins",
        "http_allowed_hosts",
        "http_trusted_proxies",
        mode="before",
    )
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("http_tokens")
    @classmethod
    def _long_enough(cls, tokens: tuple[str, ...]) -> tuple[str, ...]:
        _named_tokens(tokens)
        return tokens

    def tenants(self) -> dict[str, str]:
        """Each token the API accepts, with the tenant it stands for: AEON_HTTP_TOKENS's, then
        its file's; SettingsError naming the variable for a file that cannot be read or a
        token too short."""
        named = _named_tokens(self.http_tokens)
        if self.http_tokens_file is None:
            return named
        variable = self.variable("http_tokens_file")
        try:
            text = self.http_tokens_file.read_text(encoding="utf-8")
        except OSError as error:
            raise SettingsError(
                f"{variable}={str(self.http_tokens_file)!r}: cannot read it ({error.strerror}); "
                "name a readable file of tokens, one a line"
            ) from None
        lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
        try:
            return named | _named_tokens([line for line in lines if line])
        except ValueError as error:
            raise SettingsError(f"{variable}={str(self.http_tokens_file)!r}: {error}") from None

    @field_validator("http_cors_origins")
    @classmethod
    def _origins(cls, origins: tuple[str, ...]) -> tuple[str, ...]:
        for origin in origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(
                    f"{origin!r} is not an origin; origins look like https://app.example.com"
                )
        return tuple(origin.rstrip("/") for origin in origins)

    @field_validator("http_allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        for host in hosts:
            if host != "*" and ("*" in host[1:] or (host[0] == "*" and host[:2] != "*.")):
                raise ValueError(
                    f"{host!r} is not a host name; host names look like aeon.example.com or "
                    "*.example.com"
                )
        return hosts

    def allowed_hosts(self) -> list[str]:
        """The Host header values served: this machine's names, the listening address and
        AEON_HTTP_ALLOWED_HOSTS, IPv6 addresses in brackets as a Host header writes them."""
        names = ("localhost", "127.0.0.1", "::1", self.http_host, *self.http_allowed_hosts)
        return list(dict.fromkeys(f"[{name}]" if ":" in name else name for name in names))


def _named_tokens(entries: Iterable[str]) -> dict[str, str]:
    """Token by token, its tenant: `name:token` names it; a bare token is a tenant of its own,
    named `t-` and the start of its SHA-256, which says nothing of the token. ValueError
    counting the tokens too short (naming none: a short token's hash could give it away)."""
    named: dict[str, str] = {}
    for entry in entries:
        name, colon, token = entry.partition(":")
        if not (colon and token and TENANT_NAME.fullmatch(name)):
            token = entry
            name = "t-" + hashlib.sha256(entry.encode()).hexdigest()[:12]
        if name == ANONYMOUS:
            raise ValueError(
                f"{ANONYMOUS} is the tenant of an API with no tokens; give the token another name"
            )
        named[token] = name
    short = sum(len(token) < MIN_TOKEN_CHARS for token in named)
    if short:
        raise ValueError(
            f"{short} token(s) shorter than {MIN_TOKEN_CHARS} characters; make them long "
            "and random, e.g. `openssl rand -hex 32`"
        )
    return named
