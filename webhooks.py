"""Webhooks: when a run ends, its answer POSTed to the URL its request named, signed.

- A request may carry `webhook_url`. Gateways refuse it (HTTP 422, exit 2) unless webhooks are
  on (AEON_WEBHOOK_SECRET and AEON_WEBHOOK_ALLOWED_HOSTS both set) and the URL is allowed
  (`WebhookSettings.refusal`).
- Delivery is a consumer group of its own on the answers stream (`route`), so it scales with
  the workers and survives their kills like any hop: an answer whose run named a URL is POSTed,
  `{"correlation_id", "result"}`, signed by the Standard Webhooks spec (the `standardwebhooks`
  package: `webhook-id`, the answer's event id, the same on every try; `webhook-timestamp`;
  `webhook-signature`). A try that fails (no 2xx, a redirect, which is never followed, no
  answer within AEON_WEBHOOK_TIMEOUT_S) raises, and the bus tries again, AEON_WEBHOOK_ATTEMPTS
  tries in all, waiting AEON_WEBHOOK_BACKOFF_S after the first and twice as long after each
  next (the route's own bound: a receiver that is down is not the pipeline's failure, and
  deserves longer than a phase's retries); after the last try the answer goes to dead
  letters, the reason named. At least once: a worker killed mid-delivery leaves the entry to
  be claimed and sent again.
- The outcome is kept on the run, and told: the commit that acks the answer's entry writes
  the run record `webhook` (keys.WEBHOOK_RECORD, kept as long as the answer) and publishes a
  `WebhookSettled` (delivered or failed, with the tries) that gateways follow, in one script:
  exactly one outcome per run, however often the entry was delivered.
- Allowed: host names (`hooks.example.com`, `*.example.com`), over https only, whose addresses
  are all public; or origins (`http://127.0.0.1:9000`), exactly: the only way to allow plain
  http, or a private or loopback address. The addresses are checked when the answer is sent,
  so a name that later resolves to a private address is refused then. A URL with a user name
  or password (`user:password@host`) is never allowed, and no line Aeon writes shows one, nor
  a URL's query (`settings.bare_url`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import orjson
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import NoDecode

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.consumer import Route
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import ANSWERS, WEBHOOK_RECORD, WEBHOOK_TRIES_RECORD, Keys
from aeonloop.bus.records import RedisRunRecords, RunRecord
from aeonloop.bus.worker import BusWorker
from aeonloop.exceptions import BadInput, WebhookFailed
from aeonloop.phases.events import FinalAnswerReady, WebhookSettled
from aeonloop.settings import AeonSettings, bare_url

#: The group that delivers webhooks (Keys.group names it `phase-webhooks`).
GROUP = "webhooks"

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


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is then an HTTPError: the try failed


_OPENER = urllib.request.build_opener(_NoRedirects)


def worker_routes(worker: BusWorker) -> list[Route]:
    """What a worker runs beside its phases (phases.worker.make_worker's `routes`): the
    webhooks group, on the worker's Redis, when webhooks are on (AEON_WEBHOOK_*), else nothing."""
    hooks = WebhookSettings.from_env()
    return [route(hooks, worker.redis, worker.keys)] if hooks.enabled else []


def route(settings: WebhookSettings, redis: RedisClient, keys: Keys) -> Route:
    """The webhooks group's route on the answers stream.

    Every POST is counted before it is made, in the run's records (WEBHOOK_TRIES_RECORD, with
    HINCRBY, so the count survives the worker: a worker killed mid-delivery may have made
    several). No POST is made past AEON_WEBHOOK_ATTEMPTS, however often the answer is
    delivered, and the outcome's `tries` is that count: what the receiver can have been sent.
    A count raised for a POST the worker died before making is counted all the same, so the
    bound holds at the price of a try."""
    from standardwebhooks import Webhook

    signer = Webhook(settings.webhook_secret)
    bound = settings.webhook_attempts
    #: POSTs counted for an answer (by its event id) whose delivery this process holds, for
    #: its give_up; dropped once it is settled.
    made: dict[str, int] = {}

    async def deliver(event: FinalAnswerReady, delivery: Delivery) -> list[Any]:
        url = event.webhook_url
        if not url:
            return []
        reason = await asyncio.to_thread(settings.refusal_now, url)
        if reason is not None:
            raise WebhookFailed(f"webhook of {event.correlation_id} not sent: {reason}")
        counted = await redis.hincrby(
            keys.run_records(event.correlation_id), WEBHOOK_TRIES_RECORD, 1
        )
        made[event.event_id] = min(counted, bound)
        if counted > bound:
            raise WebhookFailed(
                f"webhook of {event.correlation_id} not sent again: all {bound} tries "
                "(AEON_WEBHOOK_ATTEMPTS) were made, the last failed or was cut short"
            )
        body = orjson.dumps(
            {"correlation_id": event.correlation_id, "result": event.result.model_dump(mode="json")}
        )
        now = datetime.now(UTC)
        headers = {
            "Content-Type": "application/json",
            "webhook-id": event.event_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signer.sign(event.event_id, now, body.decode()),
        }
        await asyncio.to_thread(_post, url, body, headers, settings.webhook_timeout_s)
        made.pop(event.event_id, None)
        return settled(event, "delivered", counted)

    def give_up(dead: DeadLetter, delivery: Delivery) -> list[Any]:
        # The run has its answer already: only the outcome is told; the dead letter keeps it.
        event = dead.event
        if not isinstance(event, FinalAnswerReady) or not event.webhook_url:
            return []
        tries = made.pop(event.event_id, None)
        if tries is None:  # not tried in this process: the count as read with the lock
            kept = delivery.records.get((event.correlation_id, WEBHOOK_TRIES_RECORD), b"0")
            tries = min(int(kept), bound)
        return settled(event, "failed", tries, dead.reason)

    return Route(
        stream=ANSWERS,
        group=GROUP,
        types={FinalAnswerReady.__name__: FinalAnswerReady},
        handle=deliver,
        give_up=give_up,
        records=lambda event: [WEBHOOK_TRIES_RECORD],
        attempts=bound,
        backoff_s=settings.webhook_backoff_s,
    )


def settled(
    answer: FinalAnswerReady,
    outcome: Literal["delivered", "failed"],
    tries: int,
    reason: str = "",
) -> list[WebhookSettled | RunRecord]:
    """The outcome of `answer`'s webhook, as its run keeps it and as gateways are told it."""
    told = answer.child(
        WebhookSettled, outcome=outcome, tries=tries, webhook_id=answer.event_id, reason=reason
    )
    kept = RunRecord(answer.correlation_id, WEBHOOK_RECORD, told.to_json())
    return [kept, told]


async def outcome(records: RedisRunRecords, correlation_id: str) -> WebhookSettled | None:
    """The outcome of the run's webhook as the run keeps it; None until the webhooks group is
    done with it (or when the run named none, or it was written by a version this one cannot
    read)."""
    (kept,) = await records.read(correlation_id, [WEBHOOK_RECORD])
    try:
        return None if kept is None else WebhookSettled.model_validate_json(kept)
    except ValidationError:
        return None


def _post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> None:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        raise WebhookFailed(f"{bare_url(url)} answered {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        raise WebhookFailed(f"{bare_url(url)} could not be reached: {error}") from None
    if not 200 <= status < 300:
        raise WebhookFailed(f"{bare_url(url)} answered {status}")
