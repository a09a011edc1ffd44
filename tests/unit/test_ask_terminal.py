"""`aeon ask` on a terminal (gateway.cli.main): the answer printed as it is written, and the
run's progress lines, on one terminal. The two come from readers that do not wait for each
other, so a progress line can come while the answer's line is open; it must not land inside
it (issue 41, finding 8: `Answer: ...work.aeon: A  profiled...`)."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Iterator

import pytest

from aeonloop.gateway import progress
from aeonloop.gateway.cli import main
from aeonloop.gateway.progress import SET_ASIDE_WORDS, Progress
from aeonloop.runs.answer_text import DELTA, RESET, TextEntry


@contextlib.contextmanager
def one_terminal() -> Iterator[io.StringIO]:
    """stdout and stderr on one terminal, as `aeon ask` has them (set in the test itself:
    pytest sets its own capture back between a fixture and the test)."""
    shared = io.StringIO()
    with contextlib.redirect_stdout(shared), contextlib.redirect_stderr(shared):
        yield shared


def _delta(n: int, text: str) -> TextEntry:
    return TextEntry(f"1-{n}", n, DELTA, text, "draft")


def test_a_progress_line_waits_for_the_answers_line_to_end() -> None:
    written = main._Written()
    shown = main._Shown(written)
    with one_terminal() as terminal:
        shown(Progress("run", "A", "A  drafting"))  # no answer line open: printed at once
        written(_delta(1, "Explain how tides "))
        shown(Progress("run", "A", "A  profiled: depth 3, pass budget 4"))
        written(_delta(2, "work."))
        written(TextEntry("1-3", 3, RESET, why="set_aside"))
        written(_delta(4, "Tides come from the Moon."))
        shown(Progress("run", "E", "E  loop ended: converged; answering"))
        assert written.finish("Tides come from the Moon.")
    assert terminal.getvalue().splitlines() == [
        "aeon: A  drafting",
        "Answer: Explain how tides work.",
        SET_ASIDE_WORDS,
        "aeon: A  profiled: depth 3, pass budget 4",
        "Answer: Tides come from the Moon.",
        "aeon: E  loop ended: converged; answering",
    ]


def test_a_timed_out_answer_ends_its_line_and_prints_the_lines_held() -> None:
    written = main._Written()
    with one_terminal() as terminal:
        written(_delta(1, "Half an ans"))
        main._Shown(written)(Progress("run", "C", "C  pass 1: score 0.5"))
        written.end()
    assert terminal.getvalue() == "Answer: Half an ans\naeon: C  pass 1: score 0.5\n"


async def test_while_nothing_comes_it_says_what_the_run_waits_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 41, finding 8: nothing was shown between `submitted` and `A  profiled` for
    minutes against a slow server. Every WAITING_EVERY_S of silence a line says what for."""
    monkeypatch.setattr(progress, "WAITING_EVERY_S", 0.1)
    shown = main._Shown(main._Written())
    with one_terminal() as terminal:
        waiting = asyncio.create_task(shown.waiting())
        await asyncio.sleep(0.35)
        shown(Progress("run", "A", "A  profiled: depth 3, pass budget 4"))
        await asyncio.sleep(0.35)
        waiting.cancel()
    said = terminal.getvalue().splitlines()
    profiled = said.index("aeon: A  profiled: depth 3, pass budget 4")
    before, after = said[:profiled], said[profiled + 1 :]
    assert before and after, said
    assert all(
        line.startswith("aeon: waiting for the model: the profile and the draft (Phase A), ")
        for line in before
    ), said
    assert all(
        line.startswith("aeon: waiting for the model: the plan, or the answer (Phase B or E), ")
        for line in after
    ), said
