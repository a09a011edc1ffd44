"""What the A2A agent maps (gateway/http/a2a_server.py, docs/a2a.md): a message's parts and
metadata to a run's input, a run's ending to a task's state, the answer's text as written to
the artifact's chunks, the events a run's task gets (over a stand-in client), a cancel that
comes while the message is being published, the finished tasks kept, the card, a malformed
call logged in one line, and the SDK loaded only where A2A is served."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import (
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct

from aeonloop.contracts import Usage
from aeonloop.exceptions import BadInput
from aeonloop.gateway.http import a2a_server
from aeonloop.gateway.http.a2a_server import (
    MAX_FINISHED_TASKS,
    AeonAgent,
    _ArtifactText,
    _FinishedTasks,
    agent_card,
    asked,
    task_state,
)
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.progress import Progress
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import ExitReason, FinalAnswer
from aeonloop.runs.answer_text import DELTA, RESET, SETTLED, TextEntry
from aeonloop.runs.cancels import CancelOutcome


def _message(*parts: Part, **metadata: object) -> Message:
    sent = Message(role=Role.ROLE_USER, message_id="m1", parts=list(parts))
    if metadata:
        sent.metadata.CopyFrom(_struct(metadata))
    return sent


def _struct(data: dict[str, object]) -> Struct:
    struct = Struct()
    struct.update(data)
    return struct


def test_text_parts_are_the_request_and_named_parts_the_files() -> None:
    ask = asked(
        _message(
            Part(text="Explain tides"),
            Part(text="# Notes\nthe Moon", filename="notes.md"),
            Part(raw=b"a,b\n1,2\n", filename="data.csv", media_type="text/csv"),
            Part(text="then summarise them"),
        )
    )
    assert ask.request == "Explain tides\n\nthen summarise them"
    assert [(f.path, f.content) for f in ask.files] == [
        ("notes.md", "# Notes\nthe Moon"),
        ("data.csv", "a,b\n1,2\n"),
    ]
    assert ask.options == {}


@pytest.mark.parametrize(
    ("part", "words"),
    [
        (Part(url="https://example.com/a.md", filename="a.md"), "parts[0]: a file by URL"),
        (Part(raw=b"\xff\xfe\x00", filename="a.bin"), "parts[0]: a.bin is not UTF-8 text"),
        (Part(raw=b"text"), "parts[0]: a file needs a filename"),
        (Part(data=_struct({"a": 1}).fields["a"]), "parts[0]: a data part has no place"),
        (Part(text="x", filename="p" * 5000), "parts[0].filename: "),
    ],
    ids=["url", "binary", "nameless", "data", "long-name"],
)
def test_a_part_a_run_cannot_take_is_one_line_naming_it(part: Part, words: str) -> None:
    with pytest.raises(BadInput) as refused:
        asked(_message(part))
    assert str(refused.value).startswith(words) and "\n" not in str(refused.value)


def test_metadata_carries_rules_and_max_ttl_and_is_checked() -> None:
    rule = {"id": "tides", "check": {"type": "content", "search": "(?i)tide"}}
    ask = asked(_message(Part(text="Explain tides"), rules=[rule], max_ttl=3))
    assert ask.options["max_ttl"] == 3
    assert [r.id for r in ask.options["rules"]] == ["tides"]
    with pytest.raises(BadInput, match=r"^metadata\.max_ttl: 2\.5 is not a whole number"):
        asked(_message(Part(text="x"), max_ttl=2.5))
    with pytest.raises(BadInput, match=r"^metadata\.rules"):
        asked(_message(Part(text="x"), rules="every answer short"))


def test_a_run_ending_maps_to_a_task_state() -> None:
    states = {reason: task_state(reason) for reason in ExitReason}
    assert states.pop(ExitReason.CANCELLED) == TaskState.TASK_STATE_CANCELED
    assert states.pop(ExitReason.FAILED) == TaskState.TASK_STATE_FAILED
    # Every other ending has an answer, degraded or not: the task is completed.
    assert set(states.values()) == {TaskState.TASK_STATE_COMPLETED}


def _entry(kind: str, text: str = "", provisional: bool = False) -> TextEntry:
    return TextEntry(entry_id="1-0", number=1, kind=kind, text=text, provisional=provisional)


def test_the_artifact_takes_published_text_as_written_and_replaces_after_a_reset() -> None:
    writer = _ArtifactText()
    taken = [
        writer.take(entry)
        for entry in (
            _entry(DELTA, "a draft the checks judge", provisional=True),
            _entry(RESET),
            _entry(DELTA, "Tides are "),
            _entry(DELTA, "the sea's rise"),
            _entry(RESET),  # the call made again: its text replaces what was sent
            _entry(DELTA, "Tides are the rise"),
            _entry(DELTA, ""),
            _entry(SETTLED),
        )
    ]
    assert taken == [
        None,
        None,
        ("Tides are ", False),
        ("the sea's rise", True),
        None,
        ("Tides are the rise", False),
        None,
        None,
    ]


def _result(status: ExitReason, text: str) -> ExecutionResult:
    return ExecutionResult(
        status=status,
        degraded=status is not ExitReason.CONVERGED,
        total_passes=1,
        total_refinements=0,
        ttl_remaining=0,
        usage=Usage(prompt_tokens=10, completion_tokens=4, calls=2),
        elapsed_seconds=1.0,
        final_answer=FinalAnswer(answer_text=text, confidence=0.5, metadata={}),
    )


class _Client:
    """A stand-in for AeonClient: one run, `cid`, whose progress line comes as `wait` begins
    and its answer's text as `follow_text` does; answered `answer` once its text is written,
    or `cancelled` once cancelled."""

    def __init__(self, answer: ExecutionResult | None, text: list[TextEntry]) -> None:
        self.answer: asyncio.Future[ExecutionResult] = asyncio.get_running_loop().create_future()
        self.written = answer
        self.text = text
        self.submitted: list[dict[str, Any]] = []
        self.cancelled: list[str] = []
        self.publishing = asyncio.Event()  # set: `submit` may return
        self.publishing.set()
        self._progress: Callable[[Progress], None] | None = None

    async def submit(self, request: str, **options: Any) -> str:
        if not request.strip():
            raise BadInput("the request is empty: say what you want answered")
        await self.publishing.wait()
        self._progress = options.pop("on_progress")
        self.submitted.append({"request": request, **options})
        return "cid"

    async def wait(self, correlation_id: str, timeout: float) -> ExecutionResult:
        assert self._progress is not None
        self._progress(Progress(correlation_id, "A", "A  profiled: depth 3, pass budget 3"))
        return await self.answer

    async def follow_text(self, correlation_id: str, on_text: Callable[[TextEntry], Any]) -> None:
        for entry in self.text:
            on_text(entry)
        if self.written is not None:
            self.answer.set_result(self.written)
        await asyncio.Event().wait()  # until its settlement, which a stand-in never writes

    async def cancel(self, correlation_id: str) -> CancelOutcome:
        self.cancelled.append(correlation_id)
        if not self.answer.done():
            self.answer.set_result(_result(ExitReason.CANCELLED, "Cancelled before an answer."))
        return CancelOutcome.REQUESTED


class _Queue:
    """The events an executor enqueues, in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def enqueue_event(self, event: Any) -> None:
        self.events.append(event)


def _context(text: str) -> RequestContext:
    sent = Message(role=Role.ROLE_USER, message_id="m1", parts=[Part(text=text)])
    return RequestContext(
        ServerCallContext(), SendMessageRequest(message=sent), task_id="t1", context_id="c1"
    )


def _states(events: list[Any]) -> list[tuple[str, str]]:
    """Each status update as (state, its message's text)."""
    return [
        (TaskState.Name(e.status.state), "".join(p.text for p in e.status.message.parts))
        for e in events
        if isinstance(e, TaskStatusUpdateEvent)
    ]


async def test_a_run_becomes_a_task_its_progress_status_updates_its_answer_the_artifact() -> None:
    text = [_entry(DELTA, "The answer "), _entry(DELTA, "is written")]
    client = _Client(_result(ExitReason.CONVERGED, "The answer is written, whole."), text)
    queue = _Queue()
    await AeonAgent(client, timeout_s=30).execute(_context("Explain tides"), queue)  # type: ignore[arg-type]
    (submitted, *events) = queue.events
    assert isinstance(submitted, Task) and submitted.id == "t1"
    assert submitted.status.state == TaskState.TASK_STATE_SUBMITTED
    assert client.submitted == [{"request": "Explain tides", "files": [], "timeout": 30}]
    assert _states(events) == [
        ("TASK_STATE_WORKING", "run cid submitted"),
        ("TASK_STATE_WORKING", "A  profiled: depth 3, pass budget 3"),
        ("TASK_STATE_COMPLETED", ""),
    ]
    chunks = [
        ("".join(p.text for p in e.artifact.parts), e.append, e.last_chunk)
        for e in events
        if isinstance(e, TaskArtifactUpdateEvent)
    ]
    # The text as written, appended; then the published answer whole, replacing it.
    assert chunks == [
        ("The answer ", False, False),
        ("is written", True, False),
        ("The answer is written, whole.", False, True),
    ]
    final = events[-1]
    outcome = MessageToDict(final.metadata)
    assert outcome["correlation_id"] == "cid" and outcome["status"] == "converged"


async def test_bad_input_rejects_the_task_in_one_line_and_publishes_nothing() -> None:
    client = _Client(None, [])
    queue = _Queue()
    await AeonAgent(client).execute(_context("   "), queue)  # type: ignore[arg-type]
    assert _states(queue.events[1:]) == [
        ("TASK_STATE_REJECTED", "the request is empty: say what you want answered")
    ]
    assert client.submitted == []


async def test_a_cancel_while_the_message_is_published_cancels_its_run_once_it_is() -> None:
    """A cancel that comes before the run is published waits for it, then cancels it: the run
    cannot go on unseen while its task says `canceled`."""
    client = _Client(None, [])
    client.publishing.clear()
    agent, queue = AeonAgent(client, timeout_s=30), _Queue()
    executing = asyncio.ensure_future(agent.execute(_context("Explain tides"), queue))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    cancelling = asyncio.ensure_future(agent.cancel(_context("Explain tides"), queue))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    assert not cancelling.done() and client.cancelled == []
    client.publishing.set()
    await asyncio.wait_for(cancelling, 5)
    await asyncio.wait_for(executing, 5)
    assert client.cancelled == ["cid"]
    assert _states(queue.events)[-1] == ("TASK_STATE_CANCELED", "")
    outcome = MessageToDict(queue.events[-1].metadata)
    assert outcome["status"] == "cancelled"


async def test_the_store_keeps_the_newest_finished_tasks_and_every_running_one() -> None:
    store = _FinishedTasks()
    context = ServerCallContext()
    running = Task(id="running", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    await store.save(running, context)
    for number in range(MAX_FINISHED_TASKS + 2):
        done = Task(id=f"t{number}", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
        await store.save(done, context)
    assert await store.get("t0", context) is None and await store.get("t1", context) is None
    assert await store.get("t2", context) is not None
    assert await store.get(f"t{MAX_FINISHED_TASKS + 1}", context) is not None
    assert await store.get("running", context) is not None


def test_the_card_asks_for_the_bearer_token_only_when_the_api_has_tokens() -> None:
    open_card = agent_card("http://aeon.example:8080/", HttpSettings())
    assert open_card.supported_interfaces[0].url == "http://aeon.example:8080/a2a"
    assert not open_card.security_schemes and not open_card.security_requirements
    guarded = agent_card("http://aeon.example:8080/", HttpSettings(http_tokens=("t" * 32,)))
    assert guarded.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert list(guarded.security_requirements[0].schemes) == ["bearer"]
    (skill,) = guarded.skills
    assert skill.id == "ask" and skill.input_modes[0] == "text/plain"


def test_the_client_loads_neither_the_a2a_sdk_nor_this_module() -> None:
    """`import aeonloop.gateway.client` (and the HTTP API's models) in a fresh interpreter: the
    SDK is loaded only when `aeon serve` builds its app."""
    code = (
        "import sys, aeonloop.gateway.client, aeonloop.gateway.http.guards\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'a2a'"
        f" or m == {a2a_server.__name__!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == []


def test_a_request_the_sdk_cannot_parse_is_one_warning_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a2a_server.build_a2a(object(), HttpSettings())  # type: ignore[arg-type]
    logger = logging.getLogger("a2a.server.routes.jsonrpc_dispatcher")
    try:
        raise ValueError("Each request should be\nan object (dict)")
    except ValueError:
        with caplog.at_level(logging.WARNING, logger=logger.name):
            logger.exception("Failed to validate base JSON-RPC request")
            logger.exception("the server's own fault")
    mistake, fault = caplog.records
    assert (mistake.levelname, mistake.exc_info) == ("WARNING", None)
    assert mistake.getMessage() == (
        "Failed to validate base JSON-RPC request: ValueError: Each request should be an object "
        "(dict)"
    )
    assert fault.levelname == "ERROR" and fault.exc_info is not None
