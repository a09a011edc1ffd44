"""`aeon ask --continue ID`, end to end: real `aeon ask` processes against a worker on the
session's Redis (the offline model). A follow-up's request event carries the first run's
request and answer as its earlier turns, a follow-up to the follow-up carries all four, and
what cannot be continued is one line and exit 2, with nothing published."""

from __future__ import annotations

import json

import pytest
from e2e_support import Bus, Processes, child_env

pytestmark = pytest.mark.e2e

FIRST = "My locker code is 4817; keep it in mind."


def ask(procs: Processes, env: dict[str, str], *args: str) -> dict:
    run = procs.run_aeon(env, "ask", "--json", "--timeout", "60", *args, timeout=90)
    assert run.returncode == 0, run.tail()
    return json.loads(run.stdout)


def sent_turns(bus: Bus, cid: str) -> list[dict]:
    (body,) = [
        json.loads(fields["body"])
        for _, fields in bus.entries("requests")
        if json.loads(fields["body"])["correlation_id"] == cid
    ]
    return body["messages"]


@pytest.mark.timeout(180)
def test_continue_carries_the_conversation_so_far(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    procs.worker(env)
    first = ask(procs, env, FIRST)
    second = ask(procs, env, "--continue", first["correlation_id"], "Which floor is the gym?")
    third = ask(procs, env, "--continue", second["correlation_id"], "What was my locker code?")

    first_answer = first["final_answer"]["answer_text"]
    assert sent_turns(bus, first["correlation_id"]) == []
    assert sent_turns(bus, second["correlation_id"]) == [
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": first_answer},
    ]
    assert sent_turns(bus, third["correlation_id"]) == [
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": first_answer},
        {"role": "user", "content": "Which floor is the gym?"},
        {"role": "assistant", "content": second["final_answer"]["answer_text"]},
    ]
    assert third["status"] == "converged"


@pytest.mark.timeout(120)
def test_what_cannot_be_continued_is_one_line_and_exit_2(
    procs: Processes, env: dict[str, str], bus: Bus
) -> None:
    unknown = procs.run_aeon(env, "ask", "--continue", "f" * 32, "and then?", timeout=60)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        f"aeon: no answer stored for {'f' * 32} (not finished, expired or unknown): "
        "there is nothing to continue"
    )
    embedded = procs.run_aeon(child_env(), "ask", "--continue", "f" * 32, "and then?", timeout=60)
    assert embedded.returncode == 2
    assert embedded.stderr.strip() == (
        "aeon: `aeon ask --continue` needs AEON_REDIS_URL: the server the request went to"
    )
    procs.worker(env)
    first = ask(procs, env, FIRST)
    limited = {**env, "AEON_MAX_TURNS": "1"}
    over = procs.run_aeon(limited, "ask", "--continue", first["correlation_id"], "and?", timeout=60)
    assert over.returncode == 2
    assert over.stderr.strip() == (
        "aeon: 2 earlier turns; the limit is 1 (AEON_MAX_TURNS): send fewer"
    )
    assert [json.loads(f["body"])["request"] for _, f in bus.entries("requests")] == [FIRST]
