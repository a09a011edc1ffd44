"""A run's history: each pass's record and the outputs its steps produced, kept once, in Redis.

Events carry a run's plan and settings but not its history (phases.events): the hop that runs
pass n (Phase C) returns, beside its event, two records, which the commit writes before that
event (runs.records):

- `pass:<n>`: the pass's `ExecutionPass`, as JSON;
- `outputs:<n>`: the output of each step the pass ran, a JSON object by step id.

What reads history reads only what it needs, with one HMGET; a phase names it in its route
(`records_for_c`, `records_for_e`), so the consumer reads it with the event's lock, in the
same round trip, and hands it over in the event's `Delivery` (runs.records, bus.delivery); the
handler's records read from those first (`ReadAhead`):

- Phase C from its second pass: the outputs of the steps already run (later steps and the
  evaluation see them); earlier scores travel in the run (`RunState.scores`);
- Phase E: every pass record and output (the answer is made from them). PhaseEInput takes the
  records as JSON objects (FR-037), so E reads them as written, without building models: they
  were validated when the hop that wrote them made them;
- the HTTP gateway's run steps: records and outputs, as models.

Phase D reads none: `PassCompleted` carries the record of the pass it judges. Records are
written only for passes the input event's history did not hold yet, so each is written once
per run, and a redelivered hop writes the same bytes under the same names.

A third record, `files` (bus.keys.FILES_RECORD), holds the files the request attached, for the
prompts that take them as context (llm.session.WITH_FILES): Phase B (the plan), C (the
steps) and E (the answer) name it in their routes when their run has files
(`RunState.file_paths`), and read it with `load_files`. A fourth, `turns`
(bus.keys.TURNS_RECORD), holds the earlier turns of the conversation the request continues,
kept and read the same way (`RunState.turn_count`, `load_turns`; Phase A, which takes the
request itself, reads them from it). See `request_records` for who writes both.

A fifth, `draft` (bus.keys.DRAFT_RECORD), holds the plain draft answer Phase A wrote
(phases.verification): written by the commit of A's hop (`new_records`, from the run in hand),
read by Phase E alone (`records_for_e`, `load_draft`), since no other phase shows it to the model.

A sixth, `request` (bus.keys.REQUEST_RECORD), holds the request itself but for its files and
turns, written with them by `request_records`, and read back whole by `load_request`: what a
fork of the run is made from, and where a fork's lineage is read (docs/forks.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import orjson

from aeonloop.bus.keys import DRAFT_RECORD, FILES_RECORD, REQUEST_RECORD, TURNS_RECORD
from aeonloop.bus.route import RunRecord
from aeonloop.contracts import AttachedFile, Turn
from aeonloop.exceptions import HistoryMissing
from aeonloop.phases.events import Event, RequestSubmitted, RunState
from aeonloop.phases.models import ExecutionPass


class RunRecords(Protocol):
    """Where a run's records are read from (runs.records.RedisRunRecords)."""

    async def read(self, correlation_id: str, names: Sequence[str]) -> list[bytes | None]: ...


class ReadAhead:
    """A run's records as one delivery's handler reads them: those the bus read with the event's
    lock (`Delivery.records`, by correlation id and name) first, and only what they lack from
    `records`, so a hop whose route named its history makes no round trip for it."""

    def __init__(self, read: Mapping[tuple[str, str], bytes], records: RunRecords) -> None:
        self._read = read
        self._records = records

    async def read(self, correlation_id: str, names: Sequence[str]) -> list[bytes | None]:
        values = [self._read.get((correlation_id, name)) for name in names]
        lacking = [name for name, value in zip(names, values, strict=True) if value is None]
        if not lacking:
            return values
        found = iter(await self._records.read(correlation_id, lacking))
        return [value if value is not None else next(found) for value in values]


def pass_name(number: int) -> str:
    return f"pass:{number}"


def outputs_name(number: int) -> str:
    return f"outputs:{number}"


def kept_passes(run: RunState | None) -> int:
    """How many of `run`'s passes its history holds, as decoded from an event: all of them,
    unless the event came from a version that sent them inline (then none is kept yet)."""
    if run is None:
        return 0
    return 0 if run.passes else run.pass_count


def new_records(outputs: Sequence[Event], kept: int) -> list[RunRecord]:
    """The records of the passes the outputs' runs ran beyond the `kept` ones, each once, and
    of the draft a run has in hand that no event carries (the one Phase A just wrote: a run
    decoded from an event holds none)."""
    records: dict[int, list[RunRecord]] = {}
    drafts: dict[str, RunRecord] = {}
    for event in outputs:
        run = getattr(event, "run", None)
        if not isinstance(run, RunState):
            continue
        if run.draft is not None:
            value = orjson.dumps(run.draft)
            drafts[event.correlation_id] = RunRecord(event.correlation_id, DRAFT_RECORD, value)
        for record in run.passes:
            if record.pass_number > kept and record.pass_number not in records:
                records[record.pass_number] = _records(event.correlation_id, run, record)
    return [*drafts.values(), *(record for pair in records.values() for record in pair)]


def _records(correlation_id: str, run: RunState, record: ExecutionPass) -> list[RunRecord]:
    number = record.pass_number
    outputs = {
        step.step_id: step.output
        for step in (run.plan.steps if run.plan else [])
        if step.executed_in_pass == number and step.output is not None
    }
    return [
        RunRecord(correlation_id, pass_name(number), record.model_dump_json().encode()),
        RunRecord(correlation_id, outputs_name(number), orjson.dumps(outputs)),
    ]


def request_records(event: Event) -> list[RunRecord]:
    """The records of the request `event` is (if it is one): the request itself, and the
    files it attaches and the earlier turns it carries, if it has any: what
    the commit of the hop that takes a request writes (Phase A's, or the hand-off to Phase E
    of a request A gave up on), before the event that hop publishes.

    Written by that commit rather than by the gateway before it publishes, because:

    - every door ends in one request event (`aeon ask`, the client, the HTTP API, a FastStream
      app, another language's XADD), and only the first hop sees every one, so files reach the
      run's history whichever door a request came in by;
    - nothing is published for a refused request: gateways check the files (count, size, text:
      gateway.validation.check_files) before the XADD, and no record exists before a worker
      takes the event, so a refusal leaves no key at all; a gateway that wrote the record
      first would leave it behind whenever the XADD then failed;
    - the files are stored once: in the request's entry until the requests stream is trimmed,
      and in this record, written in one script with Phase A's event (bus.commit), so no later
      phase can find it missing; a redelivered hop writes the same bytes under the same name.
      Later events carry only the paths (`RunState.file_paths`) and the number of turns
      (`RunState.turn_count`).
    """
    if not isinstance(event, RequestSubmitted):
        return []
    kept = {FILES_RECORD: event.files, TURNS_RECORD: event.messages}
    request = event.model_dump(mode="json", exclude={"files", "messages"})
    return [
        RunRecord(event.correlation_id, REQUEST_RECORD, orjson.dumps(request)),
        *(
            RunRecord(event.correlation_id, name, orjson.dumps([i.model_dump() for i in items]))
            for name, items in kept.items()
            if items
        ),
    ]


async def load_request(records: RunRecords, correlation_id: str) -> RequestSubmitted | None:
    """The request that started the run, its files and turns put back, as its records keep it
    (`request_records`): what a fork of it is made from. None when its record is gone (expired
    with its answer, AEON_ANSWER_KEEP_S) or was never written (a run from an older version)."""
    names = [REQUEST_RECORD, FILES_RECORD, TURNS_RECORD]
    request, files, turns = await records.read(correlation_id, names)
    if request is None:
        return None
    fields = orjson.loads(request)
    fields["files"] = orjson.loads(files) if files is not None else []
    fields["messages"] = orjson.loads(turns) if turns is not None else []
    return RequestSubmitted.model_validate(fields)


def records_for_b(event: Event) -> list[str]:
    """What Phase B reads of its run's history: the attached files and earlier turns, if any."""
    return _context_names(getattr(event, "run", None))


def records_for_c(event: Event) -> list[str]:
    """What Phase C reads of its run's history: the outputs of the steps already run, and the
    attached files and earlier turns."""
    run = getattr(event, "run", None)
    if not isinstance(run, RunState):
        return []
    outputs = [] if run.history_loaded else _outputs_names(run)
    return [*outputs, *_context_names(run)]


def records_for_e(event: Event) -> list[str]:
    """What Phase E reads of its run's history: every pass record and output, the attached
    files, the earlier turns and the draft."""
    run = getattr(event, "run", None)
    if not isinstance(run, RunState):
        return []
    draft = [DRAFT_RECORD] if run.has_draft and run.draft is None else []
    return [*_history_names(run), *_context_names(run), *draft]


async def load_draft(records: RunRecords, correlation_id: str, run: RunState) -> None:
    """Put the run's draft in `run.draft` (a no-op without one, or with it in hand);
    HistoryMissing when its record is gone."""
    if not run.has_draft or run.draft is not None:
        return
    fetched = await _fetch(records, correlation_id, [DRAFT_RECORD])
    run.draft = str(orjson.loads(fetched[DRAFT_RECORD]))


async def load_files(records: RunRecords, correlation_id: str, run: RunState) -> list[AttachedFile]:
    """The files the run's request attached, in order ([] when it attached none); HistoryMissing
    when their record is gone."""
    if not run.file_paths:
        return []
    fetched = await _fetch(records, correlation_id, [FILES_RECORD])
    return [AttachedFile.model_validate(item) for item in orjson.loads(fetched[FILES_RECORD])]


async def load_turns(records: RunRecords, correlation_id: str, run: RunState) -> list[Turn]:
    """The earlier turns the run's request carried, oldest first ([] when it carried none);
    HistoryMissing when their record is gone."""
    if not run.turn_count:
        return []
    fetched = await _fetch(records, correlation_id, [TURNS_RECORD])
    return turns_of(fetched[TURNS_RECORD])


def turns_of(value: bytes) -> list[Turn]:
    """The turns a TURNS_RECORD holds (read from Redis as written, compression undone)."""
    return [Turn.model_validate(item) for item in orjson.loads(value)]


async def load_outputs(records: RunRecords, correlation_id: str, run: RunState) -> None:
    """Put each executed step's output back in `run.plan`, from the pass it last ran in (a
    no-op for a run whose history is in hand: made in this process, or sent inline)."""
    if run.history_loaded:
        return
    fetched = await _fetch(records, correlation_id, _outputs_names(run))
    _fill_outputs(run, fetched)


async def load_pass_json(
    records: RunRecords, correlation_id: str, run: RunState
) -> list[dict[str, Any]]:
    """The records of passes 1..`pass_count` as JSON objects, oldest first; the outputs go
    back in `run.plan` too (one read for both)."""
    fetched = await _fetch(records, correlation_id, [*_pass_names(run), *_outputs_names(run)])
    return _pass_json(run, fetched)


async def load(records: RunRecords, correlation_id: str, run: RunState) -> None:
    """Fill `run.passes` (as models) and the executed steps' outputs from the history; a no-op
    when they are here already."""
    if run.history_loaded:
        return
    passes = await load_pass_json(records, correlation_id, run)
    run.passes = [ExecutionPass.model_validate(item) for item in passes]


def prefetched_pass_json(
    event: Event, read: Mapping[tuple[str, str], bytes]
) -> list[dict[str, Any]] | None:
    """Phase E's records, from those the consumer `read` with the event's lock
    (`Delivery.records`), without I/O (for the answer made when E gives up); None unless every
    one was read."""
    run = getattr(event, "run", None)
    names = _history_names(run) if isinstance(run, RunState) else []
    if not names or not isinstance(run, RunState):
        return None
    values = [read.get((event.correlation_id, name)) for name in names]
    if any(value is None for value in values):
        return None
    return _pass_json(run, {name: v for name, v in zip(names, values, strict=True) if v})


def _pass_json(run: RunState, fetched: dict[str, bytes]) -> list[dict[str, Any]]:
    """From records read for Phase E: the outputs put back in `run.plan`, the pass records
    returned as JSON objects, oldest first."""
    _fill_outputs(run, fetched)
    return [orjson.loads(fetched[name]) for name in _pass_names(run)]


def _history_names(run: RunState) -> list[str]:
    """The pass records and outputs of `run` that are not in hand."""
    if run.history_loaded:
        return []
    return [*_pass_names(run), *_outputs_names(run)]


def _context_names(run: RunState | None) -> list[str]:
    """The records of the context `run`'s request gave its prompts: files, earlier turns."""
    if not isinstance(run, RunState):
        return []
    return [FILES_RECORD] * bool(run.file_paths) + [TURNS_RECORD] * bool(run.turn_count)


def _pass_names(run: RunState) -> list[str]:
    return [pass_name(n) for n in range(1, run.pass_count + 1)]


def _outputs_names(run: RunState) -> list[str]:
    """The output records of the passes the plan's executed steps last ran in, whose outputs
    are not in hand."""
    steps = run.plan.steps if run.plan else []
    numbers = {s.executed_in_pass for s in steps if s.executed_in_pass and s.output is None}
    return [outputs_name(n) for n in sorted(numbers)]


def _fill_outputs(run: RunState, fetched: dict[str, bytes]) -> None:
    by_pass: dict[int, dict[str, str]] = {}
    for step in run.plan.steps if run.plan else []:
        number = step.executed_in_pass
        name = outputs_name(number) if number else ""
        if step.output is None and name in fetched:
            if number not in by_pass:
                by_pass[number] = orjson.loads(fetched[name])
            step.output = by_pass[number].get(step.step_id)


async def _fetch(
    records: RunRecords, correlation_id: str, names: Iterable[str]
) -> dict[str, bytes]:
    """The named records; HistoryMissing naming any that is gone."""
    wanted = list(names)
    if not wanted:
        return {}
    values = await records.read(correlation_id, wanted)
    missing = [name for name, value in zip(wanted, values, strict=True) if value is None]
    if missing:
        raise HistoryMissing(correlation_id, missing)
    return {name: value for name, value in zip(wanted, values, strict=True) if value is not None}
