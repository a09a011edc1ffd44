"""The chat endpoint's streamed completion (gateway.http.chat): the run's progress lines and a
candidate answer's text share `reasoning_content`, read by two readers that do not wait for
each other. A progress line that comes while a candidate's text is mid-sentence waits for
that text's line to end, and is a line of its own, never spliced into the text (issue 41,
finding 8: `Explain how tides A  profiled: depth 3, pass budget 4\\nwork.`)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from aeonloop.gateway import progress
from aeonloop.gateway.http.chat import SET_ASIDE_LINE, _events
from aeonloop.gateway.http.chat_models import Chunks
from aeonloop.gateway.progress import Progress
from aeonloop.runs.answer_text import DELTA, RESET, TextEntry, TextWatch


def _reasoning(event: object) -> str:
    chunk = orjson.loads(event.data)  # type: ignore[attr-defined]
    return chunk["choices"][0]["delta"].get("reasoning_content") or ""


async def test_a_progress_line_mid_sentence_is_a_line_of_its_own() -> None:
    lines: asyncio.Queue[Progress] = asyncio.Queue()
    text = TextWatch("run", "0-0")
    waiting: asyncio.Future = asyncio.get_running_loop().create_future()
    events = _events(Chunks("run", 0, False), lines, text, waiting)
    await asyncio.wait_for(anext(events), 5)  # the role
    text.add([TextEntry("1-1", 1, DELTA, "Explain how tides ", "draft")])
    sent = [_reasoning(await asyncio.wait_for(anext(events), 5))]
    # The stream waits for more; the profile's line and the draft's last piece come while it
    # does, so the next round has both, and sends the line first.
    waking = asyncio.ensure_future(anext(events))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not waking.done()
    lines.put_nowait(Progress("run", "A", "A  profiled: depth 3, pass budget 4"))
    text.add([TextEntry("1-2", 2, DELTA, "work.", "draft")])
    text.add([TextEntry("1-3", 3, RESET, why="set_aside")])
    sent.append(_reasoning(await asyncio.wait_for(waking, 5)))
    # The draft's last piece, the line saying it was set aside, the profile's line.
    sent += [_reasoning(await asyncio.wait_for(anext(events), 5)) for _ in range(2)]
    lines.put_nowait(Progress("run", "B", "B  planned: 3 steps"))
    sent.append(_reasoning(await asyncio.wait_for(anext(events), 5)))
    await events.aclose()
    assert sent == [
        "Explain how tides ",
        "work.",
        SET_ASIDE_LINE,
        "A  profiled: depth 3, pass budget 4\n",
        "B  planned: 3 steps\n",
    ]


async def test_text_that_comes_while_a_piece_is_being_sent_is_sent_too() -> None:
    """The poller adds entries whenever it reads them, also while the stream waits for its
    client to take a piece: those are sent next, none skipped."""
    lines: asyncio.Queue[Progress] = asyncio.Queue()
    text = TextWatch("run", "0-0")
    waiting: asyncio.Future = asyncio.get_running_loop().create_future()
    events = _events(Chunks("run", 0, False), lines, text, waiting)
    await asyncio.wait_for(anext(events), 5)  # the role
    text.add([TextEntry("1-1", 1, DELTA, "Tides ", "draft")])
    sent = [_reasoning(await asyncio.wait_for(anext(events), 5))]
    text.add([TextEntry("1-2", 2, DELTA, "rise.", "draft")])  # while "Tides " is being sent
    sent.append(_reasoning(await asyncio.wait_for(anext(events), 5)))
    await events.aclose()
    assert sent == ["Tides ", "rise."]


async def test_a_silent_run_says_what_it_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41, finding 8: against a slow server nothing came between the request and
    `A  profiled` for minutes. Every WAITING_EVERY_S of silence, the reasoning says which call
    the run waits for and how long it has."""
    monkeypatch.setattr(progress, "WAITING_EVERY_S", 0.2)
    lines: asyncio.Queue[Progress] = asyncio.Queue()
    text = TextWatch("run", "0-0")
    waiting: asyncio.Future = asyncio.get_running_loop().create_future()
    events = _events(Chunks("run", 0, False), lines, text, waiting)
    await asyncio.wait_for(anext(events), 5)  # the role
    first = _reasoning(await asyncio.wait_for(anext(events), 5))
    assert first == "waiting for the model: the profile and the draft (Phase A), 0 s\n"
    lines.put_nowait(Progress("run", "A", "A  profiled: depth 3, pass budget 4"))
    assert _reasoning(await asyncio.wait_for(anext(events), 5)).startswith("A  profiled")
    later = _reasoning(await asyncio.wait_for(anext(events), 5))
    assert later.startswith("waiting for the model: the plan, or the answer (Phase B or E)")
    await events.aclose()
