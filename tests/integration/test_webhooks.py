"""Webhooks through the real bus, to a real receiver on loopback: signed by the Standard
Webhooks spec (checked with the `standardwebhooks` package), tried again with the same
webhook-id until it lands, dead-lettered after the last try; and which URLs may be named."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from redis.asyncio import Redis
from standardwebhooks import Webhook

from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import BadInput
from aeonloop.gateway.client import AeonClient
from aeonloop.llm.offline import OfflineLLM
from aeonloop.phases.deps import LoopSettings
from aeonloop.phases.worker import make_worker
from aeonloop.webhooks import WebhookSettings

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
    yield receiver
    receiver.close()


async def run_with_webhook(settings: BusSettings, url: str) -> str:
    redis = Redis.from_url(settings.redis_url)
    worker = make_worker(redis, settings, OfflineLLM(), loop=LoopSettings())
    await worker.start()
    running = asyncio.create_task(worker.run())
    try:
        async with AeonClient(settings=settings) as client:
            cid = await client.submit("Explain tides", timeout=30, webhook_url=url)
            await client.wait(cid, 30)
            await asyncio.sleep(2)  # the deliveries, with the bus's backoff between tries
        return cid
    finally:
        worker.stop()
        await asyncio.wait_for(running, 15)
        await redis.aclose()


async def test_a_receiver_that_fails_twice_gets_one_delivery_id_three_tries(
    settings: BusSettings, hooks: Receiver
) -> None:
    cid = await run_with_webhook(settings, f"{hooks.origin}/hook?token=t")
    assert len(hooks.tries) == 3
    ids = {headers["webhook-id"] for headers, _ in hooks.tries}
    assert len(ids) == 1
    headers, body = hooks.tries[-1]
    payload = Webhook(SECRET).verify(body, headers)  # raises on a bad signature
    assert payload["correlation_id"] == cid
    assert payload["result"]["status"] == "converged"
    with pytest.raises(Exception, match="signature"):
        Webhook("whsec_" + "A" * 32).verify(body, headers)


async def test_after_the_last_try_the_answer_goes_to_dead_letters(
    settings: BusSettings, hooks: Receiver
) -> None:
    hooks.failures = 100
    cid = await run_with_webhook(settings, f"{hooks.origin}/hook")
    assert len(hooks.tries) == settings.handler_attempts
    keys = Keys(settings.prefix, settings.shards)
    async with Redis.from_url(settings.redis_url) as redis:
        dead = await redis.xrange(keys.dead_letter(keys.shard_of(cid)))
    reasons = [fields[b"reason"].decode() for _, fields in dead]
    assert any("answered 500" in reason for reason in reasons), reasons


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://hooks.example.com/x", "only https"),
        ("https://evil.example.net/x", "is not in AEON_WEBHOOK_ALLOWED_HOSTS"),
        ("https://127.0.0.1/x", "is not in AEON_WEBHOOK_ALLOWED_HOSTS"),
        ("http://127.0.0.1:1/x", "only https"),
        ("ftp://hooks.example.com/x", "not an http(s) URL"),
    ],
)
def test_urls_the_list_does_not_allow_are_refused(url: str, words: str) -> None:
    rules = WebhookSettings(
        webhook_secret=SECRET, webhook_allowed_hosts="*.example.org,hooks.example.com"
    )
    assert words in (rules.refusal(url) or "")
    with pytest.raises(BadInput, match="webhook_url"):
        rules.checked(url)


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


async def test_a_gateway_refuses_a_webhook_before_publishing(
    settings: BusSettings, hooks: Receiver
) -> None:
    async with AeonClient(settings=settings) as client:
        with pytest.raises(BadInput, match="only https"):
            await client.submit("Explain tides", webhook_url="http://hooks.example.com/x")
    assert hooks.tries == []
