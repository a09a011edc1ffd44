"""What became of a run's webhook: written by the delivery (`settled`) and read back by gateways
(`outcome`), kept on the run as its record `webhook` (keys.WEBHOOK_RECORD) as long as its answer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationError

from aeonloop.bus.keys import WEBHOOK_RECORD
from aeonloop.bus.route import RunRecord
from aeonloop.phases.events import FinalAnswerReady, WebhookSettled
from aeonloop.runs.records import RedisRunRecords


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
    return parse(kept)


def parse(kept: bytes | None) -> WebhookSettled | None:
    """The outcome a run's record `webhook` holds (`RunStore.get` reads it with the run's
    head); None for none, or one written by a version this one cannot read."""
    try:
        return None if kept is None else WebhookSettled.model_validate_json(kept)
    except ValidationError:
        return None
