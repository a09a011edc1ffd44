"""Webhooks through the real bus, to a real receiver on loopback: signed by the Standard
Webhooks spec (checked with the `standardwebhooks` package), tried again with the same
webhook-id until it lands, dead-lettered after the last try (AEON_WEBHOOK_ATTEMPTS), the
outcome kept on the run and published; and which URLs may be named."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from redis.asyncio import Redis
from standardwebhooks import Webhook

from aeonloop.bus.codec import encode
from aeonloop.bus.keys import WEBHOOK_OUTCOMES, WEBHOOK_RECORD, Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import BadInput
from aeonloop.gateway.client import AeonClient
from aeonloop.phases.events import RequestSubmitted, WebhookSettled
from aeonloop.runs.records import RedisRunRecords
from aeonloop.testing import AeonTestStack
from aeonloop.webhooks.policy import WebhookSettings

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Receiver:
    """A webhook receiver on loopback that fails its first `failures` tries with 500."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.tries: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.tries.append(({k.lower(): v for k, v in self.headers.items()}, body))
                failed = len(receiver.tries) <= receiver.failures
                self.send_response(500 if failed else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    receiver = Receiver(failures=2)
    monkeypatch.setenv("AEON_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("AEON_WEBHOOK_ALLOWED_HOSTS", f"{receiver.origin},hooks.example.com")
    monkeypatch.setenv("AEON_WEBHOOK_ATTEMPTS", "4")
    monkeypatch.setenv("AEON_WEBHOOK_BACKOFF_S", "0.05")
    yield receiver
    receiver.close()


async def settled(redis: Redis, keys: Keys, cid: str, within_s: float = 60) -> WebhookSettled:
    """The run's webhook outcome as its record keeps it, once the webhooks group is done."""
    records = RedisRunRecords(redis, keys)
    async with asyncio.timeout(within_s):
        while True:
            (kept,) = await records.read(cid, [WEBHOOK_RECORD])
            if kept is not None:
                return WebhookSettled.model_validate_json(kept)
            await asyncio.sleep(0.05)


async def run_with_webhook(settings: BusSettings, url: str) -> tuple[str, WebhookSettled]:
    """A run that names `url`, to its webhook's outcome."""
    async with AeonTestStack(settings=settings) as stack:
        cid = await stack.client.submit("Explain tides", timeout=30, webhook_url=url)
        await stack.client.wait(cid, 30)
        return cid, await settled(stack.client.redis, stack.client.keys, cid)


async def published(settings: BusSettings, cid: str) -> list[WebhookSettled]:
    """The run's outcomes on the webhook outcomes stream, as gateways read them."""
    keys = Keys(settings.prefix, settings.shards)
    async with Redis.from_url(settings.redis_url) as redis:
        entries = await redis.xrange(keys.stream_of(WEBHOOK_OUTCOMES, cid))
    return [
        WebhookSettled.model_validate_json(fields[b"body"])
        for _, fields in entries
        if fields[b"cid"] == cid.encode()
    ]


async def test_a_receiver_that_fails_twice_gets_one_delivery_id_three_tries(
    settings: BusSettings, hooks: Receiver
) -> None:
    cid, outcome = await run_with_webhook(settings, f"{hooks.origin}/hook?token=t")
    assert (outcome.outcome, outcome.tries) == ("delivered", 3)
    assert len(hooks.tries) == 3
    ids = {headers["webhook-id"] for headers, _ in hooks.tries}
    assert len(ids) == 1
    headers, body = hooks.tries[-1]
    payload = Webhook(SECRET).verify(body, headers)  # raises on a bad signature
    assert payload["correlation_id"] == cid
    assert payload["result"]["status"] == "converged"
    with pytest.raises(Exception, match="signature"):
        Webhook("whsec_" + "A" * 32).verify(body, headers)
    assert outcome.webhook_id == headers["webhook-id"]
    assert await published(settings, cid) == [outcome]


async def test_after_the_webhooks_own_attempts_the_answer_goes_to_dead_letters(
    settings: BusSettings, hooks: Receiver
) -> None:
    hooks.failures = 4  # AEON_WEBHOOK_ATTEMPTS, not AEON_HANDLER_ATTEMPTS
    assert settings.handler_attempts != 4
    cid, outcome = await run_with_webhook(settings, f"{hooks.origin}/hook")
    assert len(hooks.tries) == 4
    assert (outcome.outcome, outcome.tries) == ("failed", 4)
    assert "answered 500" in outcome.reason
    keys = Keys(settings.prefix, settings.shards)
    async with Redis.from_url(settings.redis_url) as redis:
        dead = await redis.xrange(keys.dead_letter(keys.shard_of(cid)))
    reasons = [fields[b"reason"].decode() for _, fields in dead]
    assert len(reasons) == 1 and "answered 500" in reasons[0], reasons
    assert await published(settings, cid) == [outcome]


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://hooks.example.com/x", "only https"),
        ("https://evil.example.net/x", "is not in AEON_WEBHOOK_ALLOWED_HOSTS"),
        ("https://127.0.0.1/x", "is not in AEON_WEBHOOK_ALLOWED_HOSTS"),
        ("http://127.0.0.1:1/x", "only https"),
        ("ftp://hooks.example.com/x", "not an http(s) URL"),
        ("https://alice:hunter2pw@hooks.example.com/x", "may not carry a user name or password"),
        ("https://alice@hooks.example.com/x", "may not carry a user name or password"),
    ],
)
def test_urls_the_list_does_not_allow_are_refused(url: str, words: str) -> None:
    rules = WebhookSettings(
        webhook_secret=SECRET, webhook_allowed_hosts="*.example.org,hooks.example.com"
    )
    assert words in (rules.refusal(url) or "")
    with pytest.raises(BadInput, match="webhook_url") as refused:
        rules.checked(url)
    assert "hunter2pw" not in str(refused.value)


def test_host_names_origins_and_wildcards() -> None:
    rules = WebhookSettings(
        webhook_secret=SECRET,
        webhook_allowed_hosts="*.example.org,hooks.example.com,http://127.0.0.1:9000",
    )
    assert rules.refusal("https://a.example.org/h") is None
    assert rules.refusal("https://example.org/h") is not None  # the wildcard needs a label
    assert rules.refusal("https://hooks.example.com:8443/h") is None
    assert rules.refusal("http://127.0.0.1:9000/h") is None  # the origin, exactly
    assert rules.refusal("http://127.0.0.1:9001/h") is not None
    assert "webhooks are off" in (WebhookSettings().refusal("https://a.example.org") or "")


def test_a_url_refused_for_plain_http_names_the_origins_that_are_allowed() -> None:
    """Issue 35: the allowed host on another port was refused with "unless
    AEON_WEBHOOK_ALLOWED_HOSTS names the origin", which read as if it were unset."""
    rules = WebhookSettings(
        webhook_secret=SECRET,
        webhook_allowed_hosts="hooks.example.com,http://127.0.0.1:9000,http://localhost:9100",
    )
    said = rules.refusal("http://127.0.0.1:9001/h") or ""
    assert said.startswith("only https is allowed for http://127.0.0.1:9001"), said
    assert "the origins it allows are http://127.0.0.1:9000, http://localhost:9100" in said
    names_only = WebhookSettings(webhook_secret=SECRET, webhook_allowed_hosts="hooks.example.com")
    said = names_only.refusal("http://hooks.example.com/h") or ""
    assert "it names no origin" in said and "http://hooks.example.com:80" in said, said


async def test_a_gateway_refuses_a_webhook_before_publishing(
    settings: BusSettings, hooks: Receiver
) -> None:
    async with AeonClient(settings=settings) as client:
        with pytest.raises(BadInput, match="only https"):
            await client.submit("Explain tides", webhook_url="http://hooks.example.com/x")
    assert hooks.tries == []


#: A password in a webhook URL: it must never reach a log line, a dead letter or an outcome.
PASSWORD = "hunter2pw"


async def test_a_gateway_refuses_a_webhook_url_with_a_password_on_an_allowed_origin(
    settings: BusSettings, hooks: Receiver
) -> None:
    """Issue 35: the allowed-hosts check compared scheme, host and port only, so this was
    taken, never delivered (urllib took `alice:hunter2pw@127.0.0.1` for the host name), and
    its password shown wherever the failure was."""
    url = hooks.origin.replace("://", f"://alice:{PASSWORD}@") + "/hook"
    async with AeonClient(settings=settings) as client:
        with pytest.raises(BadInput, match="may not carry a user name or password") as refused:
            await client.submit("Explain tides", webhook_url=url)
    assert PASSWORD not in str(refused.value)
    assert hooks.tries == []


async def test_a_published_webhook_url_with_a_password_is_never_shown(
    settings: BusSettings, hooks: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A request that bypassed every gateway (its event published to the stream as it is):
    the webhook is refused when it is sent, no POST is made, and the password is in no log
    line, no dead letter field `aeon dlq list` shows, and not in the outcome (the run's
    `webhook.reason`, the `webhook_failed` event)."""
    caplog.set_level(logging.DEBUG)
    url = hooks.origin.replace("://", f"://alice:{PASSWORD}@") + "/hook?token=t0ken"
    event = RequestSubmitted.new("Explain tides", timeout=30, webhook_url=url)
    keys = Keys(settings.prefix, settings.shards)
    async with AeonTestStack(settings=settings) as stack:
        cid = event.correlation_id
        redis = stack.client.redis
        await redis.xadd(keys.stream_of(RequestSubmitted.STREAM, cid), encode(event))
        outcome = await settled(redis, keys, cid)
        dead = await redis.xrange(keys.dead_letter(keys.shard_of(cid)))
    assert (outcome.outcome, outcome.tries) == ("failed", 0)
    assert "may not carry a user name or password" in outcome.reason
    assert hooks.tries == []
    assert await published(settings, cid) == [outcome]
    shown = [outcome.model_dump_json(), *(record.getMessage() for record in caplog.records)]
    shown += [v.decode() for _, fields in dead for k, v in fields.items() if k != b"body"]
    assert any(cid in line for line in shown)
    for secret in (PASSWORD, "t0ken"):
        assert not [line for line in shown if secret in line]
