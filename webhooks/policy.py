"""Which URLs a request may name as its webhook (AEON_WEBHOOK_*): checked by gateways when a
request comes in, and by the delivery when the answer is sent (aeonloop.webhooks says how)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from aeonloop.exceptions import BadInput
from aeonloop.settings import AeonSettings, bare_url

Rules = Annotated[tuple[str, ...], NoDecode]


class WebhookSettings(AeonSettings):
    #: The signing secret (`whsec_...`, base64), shared with receivers; unset: webhooks off.
    webhook_secret: Annotated[str, Field(repr=False)] = ""
    #: What may be called: host names (`*.example.com`, https) or origins (`http://h:port`).
    webhook_allowed_hosts: Rules = ()
    #: Seconds one try may take.
    webhook_timeout_s: Annotated[float, Field(gt=0, le=300, allow_inf_nan=False)] = 10.0
    #: Tries of one answer's POST before it goes to dead letters.
    webhook_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    #: Seconds between the first two tries; doubled after each further one.
    webhook_backoff_s: Annotated[float, Field(ge=0, le=60, allow_inf_nan=False)] = 1.0

    @field_validator("webhook_allowed_hosts", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip().lower() for part in value.split(",") if part.strip())
        return value

    @field_validator("webhook_allowed_hosts")
    @classmethod
    def _rules(cls, rules: tuple[str, ...]) -> tuple[str, ...]:
        for rule in rules:
            if "://" in rule:
                parts = urlsplit(rule)
                if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
                    raise ValueError(f"{rule!r} is not an origin like http://127.0.0.1:9000")
            elif "/" in rule or ":" in rule or not rule.removeprefix("*."):
                raise ValueError(f"{rule!r} is not a host name like hooks.example.com")
        return tuple(_origin(urlsplit(rule)) if "://" in rule else rule for rule in rules)

    @field_validator("webhook_secret")
    @classmethod
    def _secret(cls, secret: str) -> str:
        if secret:
            from standardwebhooks import Webhook

            try:
                Webhook(secret)
            except Exception:
                raise ValueError("is not a Standard Webhooks secret (whsec_ and base64)") from None
        return secret

    @property
    def enabled(self) -> bool:
        return bool(self.webhook_secret and self.webhook_allowed_hosts)

    def refusal(self, url: str) -> str | None:
        """Why `url` may not be called (None: it may), judged from the URL alone."""
        if not self.enabled:
            return (
                "webhooks are off here: set AEON_WEBHOOK_SECRET and AEON_WEBHOOK_ALLOWED_HOSTS "
                "where Aeon runs, or leave webhook_url out"
            )
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host:
            return f"{bare_url(url)[:200]!r} is not an http(s) URL"
        if "@" in parts.netloc:
            # urllib would take `user:password@host` for the host name, so it would never be
            # sent, and the password would be in every line that names the URL.
            return (
                "a webhook URL may not carry a user name or password (user:password@host): "
                "leave them out; the receiver checks the webhook-signature header instead"
            )
        if _origin(parts) in self.webhook_allowed_hosts:
            return None
        if parts.scheme != "https":  # name what is allowed: "unless it names" read as if unset
            origins = [rule for rule in self.webhook_allowed_hosts if "://" in rule]
            allowed = (
                f"the origins it allows are {', '.join(origins)}"
                if origins
                else "it names no origin (such as http://127.0.0.1:9000), only https hosts"
            )
            return (
                f"only https is allowed for {_origin(parts)}, an origin "
                f"AEON_WEBHOOK_ALLOWED_HOSTS does not name: {allowed}"
            )
        if not any(_host_matches(host, rule) for rule in self._names()):
            return f"{host} is not in AEON_WEBHOOK_ALLOWED_HOSTS"
        if _is_address(host) and not _public(host):
            return f"{host} is a private or loopback address; allow its origin to call it"
        return None

    def checked(self, url: str | None, name: str = "webhook_url") -> str | None:
        """`url` if a request may name it; BadInput saying why not, naming the field or
        option (`name`) it came in."""
        if url is None:
            return None
        reason = self.refusal(url)
        if reason is not None:
            raise BadInput(f"{name}: {reason}")
        return url

    def _names(self) -> list[str]:
        return [rule for rule in self.webhook_allowed_hosts if "://" not in rule]

    def refusal_now(self, url: str) -> str | None:
        """`refusal`, and, for a host name, that every address it resolves to now is public."""
        reason = self.refusal(url)
        parts = urlsplit(url)
        if reason is not None or _origin(parts) in self.webhook_allowed_hosts:
            return reason
        try:
            found = socket.getaddrinfo(parts.hostname, parts.port or 443, type=socket.SOCK_STREAM)
        except OSError as error:
            return f"{parts.hostname} does not resolve ({error})"
        private = [info[4][0] for info in found if not _public(info[4][0])]
        if private:
            return f"{parts.hostname} resolves to {private[0]}, a private or loopback address"
        return None


def _origin(parts: Any) -> str:
    default = 443 if parts.scheme == "https" else 80
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or default}"


def _host_matches(host: str, rule: str) -> bool:
    if rule.startswith("*."):
        return host.endswith(rule[1:]) and host != rule[2:]
    return host == rule


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _public(address: str) -> bool:
    return ipaddress.ip_address(address.split("%", 1)[0]).is_global
