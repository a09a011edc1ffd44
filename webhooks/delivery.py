"""The webhooks group: a consumer group of its own on the answers stream that POSTs each answer
whose run named a URL, signed, and settles its outcome (aeonloop.webhooks says how). Only the
processes that run workers load it (`worker_routes`)."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

import orjson

from aeonloop.bus.connection import RedisClient
from aeonloop.bus.consumer import Route
from aeonloop.bus.deadletter import DeadLetter
from aeonloop.bus.delivery import Delivery
from aeonloop.bus.keys import ANSWERS, WEBHOOK_TRIES_RECORD, Keys
from aeonloop.bus.worker import BusWorker
from aeonloop.exceptions import WebhookFailed
from aeonloop.phases.events import FinalAnswerReady
from aeonloop.settings import bare_url
from aeonloop.webhooks.outcome import settled
from aeonloop.webhooks.policy import WebhookSettings

#: The group that delivers webhooks (Keys.group names it `phase-webhooks`).
GROUP = "webhooks"


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
