"""What the A2A agent maps (gateway/http/a2a_server.py, docs/a2a.md): a message's parts and
metadata to a run's input, a run's ending to a task's state, the answer's text as written to
the artifact's chunks, the finished tasks kept, the card, and the SDK loaded only where A2A is
served."""

from __future__ import annotations

import subprocess
import sys

import pytest
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.struct_pb2 import Struct

from aeonloop.bus.answer_text import DELTA, RESET, SETTLED, TextEntry
from aeonloop.exceptions import BadInput
from aeonloop.gateway.http import a2a_server
from aeonloop.gateway.http.a2a_server import (
    MAX_FINISHED_TASKS,
    _ArtifactText,
    _FinishedTasks,
    agent_card,
    asked,
    task_state,
)
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.phases.models import ExitReason


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
