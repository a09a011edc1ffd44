"""A run's history: each pass's record and the outputs its steps produced, kept once, in Redis.

Events carry a run's plan and settings but not its history (phases.events): the hop that runs
pass n (Phase C) returns, beside its event, the record `pass:<n>` (a `PassHistory`), which the
commit writes before that event (bus.records). What reads history loads it:

- Phase C from its second pass (the steps see earlier outputs; stagnation needs the scores);
- Phase E (the answer is made from every pass and output);
- the HTTP gateway's run steps.

Phase D reads none: `PassCompleted` carries the record of the pass it judges. Records are
written only for passes the input event's history did not hold yet, so each is written once
per run, and a redelivered hop writes the same bytes under the same name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from bus.records import RunRecord
from phases.events import Event, RunState
from phases.models import ExecutionPass


class RunRecords(Protocol):
    """Where a run's records are read from (bus.records.RedisRunRecords)."""

    async def read(self, correlation_id: str, names: Sequence[str]) -> list[bytes | None]: ...


class HistoryMissing(LookupError):
    """A pass the run says it ran has no record: it expired with the run's answer, or was
    deleted. The phase cannot go on without it; the run ends as failed, with this reason."""

    def __init__(self, correlation_id: str, numbers: list[int]) -> None:
        super().__init__(
            f"run {correlation_id}: no history record of pass(es) {numbers} in Redis "
            "(expired after AEON_ANSWER_TTL_S, or deleted)"
        )


class PassHistory(BaseModel):
    """One pass as kept: its record, and the output of each step it ran."""

    model_config = ConfigDict(extra="forbid")

    record: ExecutionPass
    outputs: dict[str, str] = Field(default_factory=dict)


def record_name(number: int) -> str:
    return f"pass:{number}"


def kept_passes(run: RunState | None) -> int:
    """How many of `run`'s passes its history holds, as decoded from an event: all of them,
    unless the event came from a version that sent them inline (then none is kept yet)."""
    if run is None:
        return 0
    return 0 if run.passes else run.pass_count


def new_records(outputs: Sequence[Event], kept: int) -> list[RunRecord]:
    """The records of the passes the outputs' runs ran beyond the `kept` ones, each once."""
    records: dict[int, RunRecord] = {}
    for event in outputs:
        run = getattr(event, "run", None)
        if not isinstance(run, RunState):
            continue
        for record in run.passes:
            if record.pass_number > kept and record.pass_number not in records:
                records[record.pass_number] = _record(event.correlation_id, run, record)
    return list(records.values())


def _record(correlation_id: str, run: RunState, record: ExecutionPass) -> RunRecord:
    number = record.pass_number
    outputs = {
        step.step_id: step.output
        for step in (run.plan.steps if run.plan else [])
        if step.executed_in_pass == number and step.output is not None
    }
    kept = PassHistory(record=record, outputs=outputs)
    return RunRecord(correlation_id, record_name(number), kept.model_dump_json().encode())


async def load(records: RunRecords, correlation_id: str, run: RunState) -> None:
    """Fill `run.passes` and its executed steps' outputs from its history (no-op when they are
    here already); HistoryMissing when a record is gone."""
    if run.history_loaded:
        return
    numbers = list(range(1, run.pass_count + 1))
    values = await records.read(correlation_id, [record_name(n) for n in numbers])
    missing = [n for n, value in zip(numbers, values, strict=True) if value is None]
    if missing:
        raise HistoryMissing(correlation_id, missing)
    kept = [PassHistory.model_validate_json(value) for value in values if value is not None]
    fill(run, kept)


def fill(run: RunState, kept: Sequence[PassHistory]) -> None:
    """Put the records back in `run`: the passes in order, each step's output from the pass it
    last ran in."""
    run.passes = [item.record for item in kept]
    if run.plan is None:
        return
    by_pass = {item.record.pass_number: item.outputs for item in kept}
    for step in run.plan.steps:
        if step.executed_in_pass is not None:
            step.output = by_pass.get(step.executed_in_pass, {}).get(step.step_id, step.output)


class DictRunRecords:
    """Run records in a dict: for tests that chain handlers through the wire form."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], bytes] = {}

    def write(self, records: Sequence[RunRecord]) -> None:
        for record in records:
            self.values[(record.correlation_id, record.name)] = record.value

    async def read(self, correlation_id: str, names: Sequence[str]) -> list[bytes | None]:
        return [self.values.get((correlation_id, name)) for name in names]
