"""Issue 4's poison proofs, through a real `aeon worker` process.

Entries a producer put on the requests stream by hand (XADD), each with a correlation id:

- not JSON at all, and valid JSON of the wrong shape: dead-lettered at once ("undecodable");
- an oversized event (this worker's AEON_MAX_EVENT_BYTES is 32 KB): dead-lettered at once;
- an event whose handler always raises. No scripted LLM reply can make a handler raise (the
  phases turn every unusable reply or LLMError into a degraded path; the output and domain
  models have the same constraints), so this is what does today: a RequestSubmitted whose
  deadline has no time zone. It validates, and then every deadline check raises TypeError
  (naive vs aware datetime): Phase A fails twice (AEON_HANDLER_ATTEMPTS=2), is dead-lettered,
  sends the run to Phase E, whose handler fails the same way and is dead-lettered too, and the
  fallback answer (made without the LLM) still ends the run.

Each ends in the dead-letter stream with its reason, each run that names its cid gets exactly
one degraded FinalAnswer, a good request sent alongside is answered normally, the worker keeps
running, and `aeon dlq list` / `aeon dlq replay` work on what was caught.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from e2e_support import Bus, Processes, wait_until

pytestmark = pytest.mark.e2e

MAX_EVENT_BYTES = 32_768


def _request_body(cid: str, **changes: object) -> dict[str, object]:
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    body = {
        "event_id": uuid.uuid4().hex,
        "correlation_id": cid,
        "deadline": deadline.isoformat(),
        "request": "Explain tides",
    }
    body.update(changes)
    return body


def _poison_entries() -> dict[str, tuple[bytes, str]]:
    """name → (the entry's body, a phrase its dead-letter reason must contain)."""
    naive = (datetime.now(UTC) + timedelta(minutes=5)).replace(tzinfo=None).isoformat()
    oversized = json.dumps(_request_body("x")) + " " * (2 * MAX_EVENT_BYTES)
    return {
        "not json": (b"this is not JSON {", "undecodable: RequestSubmitted does not validate"),
        "wrong shape": (
            json.dumps({"hello": "world"}).encode(),
            "undecodable: RequestSubmitted does not validate",
        ),
        "oversized": (oversized.encode(), f"exceeds the limit of {MAX_EVENT_BYTES}"),
        "handler raises": (
            json.dumps(_request_body("x", deadline=naive)).encode(),
            "handler failed 2 times: TypeError",
        ),
    }


@pytest.mark.timeout(90)
def test_poison_entries_are_dead_lettered_and_their_runs_answered_once(
    procs: Processes, bus: Bus, env: dict[str, str]
) -> None:
    worker = procs.worker(
        {**env, "AEON_MAX_EVENT_BYTES": str(MAX_EVENT_BYTES), "AEON_HANDLER_ATTEMPTS": "2"}
    )
    poison = _poison_entries()
    cids = {}
    for name, (body, _) in poison.items():
        cid = cids[name] = uuid.uuid4().hex
        body = body.replace(b'"correlation_id": "x"', f'"correlation_id": "{cid}"'.encode())
        bus.redis.xadd(
            bus.stream("requests", cid), {"type": "RequestSubmitted", "cid": cid, "body": body}
        )
    good = procs.aeon(env, "ask", "Explain how rainbows form", "--json", name="good")

    assert good.wait(30) == 0, good.tail()
    assert json.loads(good.stdout)["status"] == "converged"
    wait_until(
        lambda: all(bus.stored_answer(cid) for cid in cids.values()),
        30,
        "the poisoned runs' answers",
    )
    dead = bus.dead_letters()
    for name, (_, reason) in poison.items():
        letters = [d for d in dead if d["cid"] == cids[name]]
        assert letters, f"{name}: not dead-lettered"
        assert reason in letters[0]["reason"], f"{name}: {letters[0]['reason']}"
        assert letters[0]["source_stream"] == "requests" and letters[0]["group"] == "phase-a"
        answer = bus.stored_answer(cids[name])
        assert answer["degraded"] and answer["status"] == "failed", f"{name}: {answer}"
    raised = [d for d in dead if d["cid"] == cids["handler raises"]]
    assert [d["group"] for d in raised] == ["phase-a", "phase-e"]  # E's handler failed too
    assert bus.stored_answer(cids["handler raises"])["final_answer"]["metadata"]["reason"] == (
        "phase_e_failed"
    )
    answers = bus.answer_cids()
    assert sorted(answers) == sorted([*cids.values(), json.loads(good.stdout)["correlation_id"]])
    assert worker.alive, worker.tail()

    listed = procs.run_aeon(env, "dlq", "list", "--json", timeout=20)
    assert listed.returncode == 0, listed.tail()
    rows = json.loads(listed.stdout)
    assert {row["id"] for row in rows} == {d["id"] for d in dead}
    assert all(row["reason"] for row in rows)
    # Issue 35: the count beside "handler failed 2 times" is the entry's deliveries (one: the
    # handler was tried twice in it), named so, not `attempts=1`.
    raised_a = next(r for r in rows if r["id"] == raised[0]["id"])
    assert raised_a["deliveries"] == "1" and "attempts" not in raised_a
    shown = procs.run_aeon(env, "dlq", "list", timeout=20).stdout.splitlines()
    at = next(n for n, line in enumerate(shown) if line.startswith(raised_a["id"]))
    assert "deliveries=1" in shown[at] and "handler failed 2 times" in shown[at + 1], shown
    assert not any("attempts=" in line for line in shown)
    # The worker's log names each dead letter by the id `dlq list` shows and `replay` takes.
    logged = set(re.findall(r"dead-lettered \S+ entry \S+ as (\S+) ", worker.stderr))
    assert logged == {row["id"] for row in rows}, worker.tail()

    not_json = next(d for d in dead if d["cid"] == cids["not json"])
    replayed = procs.run_aeon(env, "dlq", "replay", not_json["id"], timeout=20)
    assert replayed.returncode == 0, replayed.tail()
    new_id = replayed.stdout.split(" as ")[-1].strip()
    entry = dict(bus.entries("requests"))[new_id]
    assert entry["cid"].decode() == cids["not json"] and entry["body"] == poison["not json"][0]
    # The replayed entry fails again and is dead-lettered again; its run keeps its one answer.
    wait_until(
        lambda: any(d["entry_id"] == new_id for d in bus.dead_letters()), 15, "the replay to die"
    )
    assert not_json["id"] not in {d["id"] for d in bus.dead_letters()}
    assert bus.answer_cids().count(cids["not json"]) == 1
    assert worker.stop() == 0, worker.tail()


@pytest.mark.timeout(60)
def test_llm_reply_that_cannot_be_encoded_does_not_stall_the_worker(
    procs: Processes, bus: Bus, env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "llm.json"
    # JSON's "\\ud800" is a lone surrogate once parsed, which UTF-8 cannot encode (an
    # OpenAI-compatible server can send one: a model cutting an emoji in half). Every step
    # reply of this worker carries one.
    script.write_text('{"REASONING_STEP_USER": "half an emoji: \\ud800"}')
    llm = {"AEON_LLM": "scripted", "AEON_LLM_SCRIPT": str(script), "AEON_MAX_DELIVERIES": "3"}
    worker = procs.worker({**env, **llm})
    first = procs.gateway(env, 2, timeout=20)
    assert first.wait(30) == 0, first.tail()
    second = procs.gateway(env, 1, timeout=20)  # the worker still serves after the first two
    assert second.wait(30) == 0, second.tail()

    cids = first.submitted() + second.submitted()
    assert sorted(bus.answer_cids()) == sorted(cids), "each request must get exactly one answer"
    assert worker.alive
    assert worker.stop(15) == 0, worker.tail()
    assert "Traceback" not in worker.stderr
