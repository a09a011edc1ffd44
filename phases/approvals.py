"""Plan approval: a run paused after Phase B (`approve_plan`) and how it goes on.

Phase B publishes PlanAwaitingApproval instead of PlanReady (runs.approvals keeps it). Then:

- approved (`AeonClient.approve`, `aeon approve`, `POST /v1/runs/{id}/approve`): the run's
  PlanReady, with the plan as it was or as a person edited it (`edited_plan`: read and checked
  as Phase B reads a model's plan), goes to Phase C;
- cancelled (a cancel rejects the plan) or past its deadline: `Sweeper`, in every worker, sends
  the run to Phase E (`ending`), which answers it without the model.

A paused run holds no worker slot: nothing waits for it but an entry in Redis, looked at by
the sweeper every SWEEP_S.
"""

from __future__ import annotations

import asyncio
import logging

from pydantic import ValidationError

from aeonloop.bus.codec import decode
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import Keys
from aeonloop.bus.redis_errors import TRANSIENT
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import BadInput, DecodeError
from aeonloop.phases import exits
from aeonloop.phases.cancels import Cancels
from aeonloop.phases.events import LoopExited, PlanAwaitingApproval, PlanReady
from aeonloop.phases.models import Plan
from aeonloop.phases.plans import plan_from_output
from aeonloop.prompts.registry import PlanBody
from aeonloop.runs import approvals

log = logging.getLogger("aeon.phases")

#: How often a worker looks at the paused runs for a cancel or a passed deadline.
SWEEP_S = 1.0
_TYPES = {PlanAwaitingApproval.__name__: PlanAwaitingApproval}


__all__ = ["Sweeper", "approved", "edited_plan", "ending", "plan_from_output", "read"]


def edited_plan(data: object) -> Plan:
    """A person's plan, `{"goal": ..., "steps": [{"step_id", "description"}, ...]}`, checked
    as Phase B checks a model's (at least one step; repeated or long ids made unique)."""
    try:
        body = PlanBody.model_validate(data)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"]) or "plan"
        raise BadInput(f"the plan is not one Aeon can run: {where}: {problem['msg']}") from None
    return plan_from_output(body)


def approved(paused: PlanAwaitingApproval, plan: Plan | None = None) -> PlanReady:
    """The paused run on to Phase C, with `plan` in place of its own when given."""
    run = paused.run
    if plan is not None:
        run = run.model_copy(update={"plan": plan})
        run.notes = [*run.notes, "approval: the plan was edited before it ran"]
    return paused.child(PlanReady, run=run)


def ending(paused: PlanAwaitingApproval, cancelled: bool) -> LoopExited | None:
    """The paused run to Phase E when it may not wait longer: its deadline passed, or it was
    cancelled (its plan rejected); None while it may."""
    stop = exits.deadline_passed(paused)
    if stop is None and cancelled:
        stop = exits.cancelled(paused.correlation_id)
    return exits.loop_exited(paused, stop) if stop is not None else None


def read(fields: dict[bytes, bytes], max_bytes: int) -> PlanAwaitingApproval | None:
    """The paused run an entry holds; None for an entry that is not one (logged)."""
    try:
        return decode(fields, _TYPES, max_bytes)
    except DecodeError as error:
        log.warning("an entry of the paused runs cannot be read: %s", error)
        return None


class Sweeper:
    """Ends the paused runs that may not wait longer, on any worker, each exactly once."""

    def __init__(
        self, redis: RedisClient, keys: Keys, cancels: Cancels, settings: BusSettings
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._cancels = cancels
        self._settings = settings

    async def run(self) -> None:
        while True:
            try:
                for shard in range(self._keys.shards):
                    await self.sweep(shard)
            except TRANSIENT as error:  # Redis away: look again next time
                log.info("paused runs not swept (%s)", type(error).__name__)
            await asyncio.sleep(SWEEP_S)

    async def sweep(self, shard: int) -> int:
        """End what may not wait in `shard`; how many runs this call took on."""
        taken = 0
        for entry_id, fields in await approvals.paused(self._redis, self._keys, shard):
            paused = read(fields, self._settings.max_event_bytes)
            if paused is None:
                continue
            cancelled = await self._cancels.cancelled(paused.correlation_id)
            end = ending(paused, cancelled)
            settings = self._settings
            if end is not None and await approvals.take(
                self._redis,
                self._keys,
                shard,
                entry_id,
                end,
                settings.stream_maxlen,
                settings.answer_ttl_s,
            ):
                log.info("%s: paused run ended: %s", paused.correlation_id, end.detail)
                taken += 1
        return taken
