"""Issue 34's proofs over real processes: the answer's text streamed as it is written.

A real `aeon worker` with the offline model, which writes each reply that may be published in
chunks, paced by AEON_LLM_DELAY_MS (slow here, so a reader can be cut off mid-answer), and a
real `aeon serve`, read over real HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_support import Processes, aeon_argv, run_on_a_terminal, submitted_id
from http_support import Stack, Stream, answer_written, served

from aeonloop.gateway.progress import SET_ASIDE_WORDS
from aeonloop.llm.offline import OFFLINE_NOTICE

pytestmark = pytest.mark.e2e

#: Each offline call takes this long, its reply written in chunks over it: the answer is
#: written over seconds, which a reader can be cut off in the middle of.
LLM_DELAY_MS = "1500"


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("answer-stream-logs")
    with served(redis_url, logs, AEON_LLM_DELAY_MS=LLM_DELAY_MS) as (server, bus, env):
        yield Stack(server, bus, env)


def _in_the_answer(stream: Stream) -> bool:
    """Three pieces of the synthesis's answer read (its draft came and was set aside before)."""
    return sum(e.data.get("candidate") == "answer" for e in stream.text) >= 3


def test_a_reader_cut_off_mid_answer_resumes_with_the_rest_and_no_piece_twice(
    stack: Stack,
) -> None:
    cid = stack.server.submit("Explain tides, then summarise them for a child")
    first = stack.server.events(cid, stop_when=_in_the_answer)
    assert _in_the_answer(first)
    assert stack.server.get(f"/v1/runs/{cid}").status == 202  # cut off mid-answer, truly
    rest = stack.server.events(cid, last_event_id=first.received[-1].id)
    assert rest.status == 200 and rest.ended
    answer = rest.events[-1]
    assert answer.kind == "answer"
    received = first.received + rest.received
    # No piece twice: each text event names its own answer text entry, in order.
    entries = [e.id.partition("~")[2] for e in received if e.kind.startswith("answer_")]
    ranks = [tuple(int(part) for part in entry.split("-")) for entry in entries]
    assert ranks == sorted(set(ranks)), "an answer text entry was sent twice or out of order"
    assert rest.text, "the rest of the answer came as deltas"
    # The deltas since the last reset, joined, are the published answer.
    assert answer_written(received) == answer.data["final_answer"]["answer_text"]
    # As a reader reading it whole had it, step for step.
    whole = stack.server.events(cid)
    assert [e.kind for e in first.events + rest.events] == [e.kind for e in whole.events]


def test_a_reader_that_comes_after_the_answer_gets_the_answer_alone(stack: Stack) -> None:
    cid = stack.server.submit("What is the capital of France?")
    stack.server.events(cid)  # to its end
    late = stack.server.events(cid)
    assert late.ended and not late.text
    assert late.events[-1].kind == "answer"


def test_aeon_ask_on_a_terminal_prints_the_answer_as_it_is_written(stack: Stack) -> None:
    """The draft, then the line saying it was set aside when the run went on, then the
    answer as written, once: the result's other lines follow it, and no second `Answer:`."""
    shown, stderr = run_on_a_terminal(
        [*aeon_argv(), "ask", "Explain tides, then summarise them for a child"], stack.env
    )
    cid = submitted_id(stderr)
    answer = stack.server.get(f"/v1/runs/{cid}").body["result"]["final_answer"]["answer_text"]
    draft, set_aside, rest = shown.partition(f"\n{SET_ASIDE_WORDS}\n")
    assert set_aside and draft.startswith("Answer: ") and OFFLINE_NOTICE in draft
    assert rest.startswith(f"Answer: {answer}\n"), rest
    assert rest.count("Answer:") == 1 and "\nMetadata: " in rest


def test_aeon_ask_on_a_terminal_keeps_its_progress_lines_out_of_the_answer(stack: Stack) -> None:
    """Issue 41, finding 8: with stderr on the same terminal (as in a person's shell), a
    progress line read while the answer's line was open landed inside it (`...work.aeon: A
    profiled...`, 3 of 3 tries). Each progress line is a line of its own."""
    shown, _ = run_on_a_terminal(
        [*aeon_argv(), "ask", "Explain tides, then summarise them for a child"],
        stack.env,
        stderr_too=True,
    )
    lines = shown.splitlines()
    cid = submitted_id(shown)
    answer = stack.server.get(f"/v1/runs/{cid}").body["result"]["final_answer"]["answer_text"]
    assert [line for line in lines if "aeon: " in line and not line.startswith("aeon: ")] == []
    assert any(line.startswith("aeon: A  profiled") for line in lines), shown
    assert shown.count("Answer: ") == 2 and f"\nAnswer: {answer}\n" in shown, shown


def test_aeon_ask_piped_prints_the_answer_whole(stack: Stack, procs: Processes) -> None:
    ask = procs.run_aeon(stack.env, "ask", "What is the capital of France?", timeout=120)
    assert ask.returncode == 0, ask.tail()
    assert ask.stdout.startswith("Answer: ") and ask.stdout.count("Answer:") == 1
    assert SET_ASIDE_WORDS not in ask.stdout
