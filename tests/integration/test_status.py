"""`aeon status`: a deployment's state, read back from a known one built by hand.

Each case builds the streams, groups, consumers, dead letters and answers with redis-py, then
runs the real CLI (`gateway.cli.main.main`) and checks the numbers of `--json`, the "attention:"
lines of the table and the exit code: 5 when anything needs attention, 0 when nothing does.

An entry idle longer than AEON_CLAIM_IDLE_MS is made with XCLAIM IDLE (it backdates the entry's
delivery), not by sleeping past the claim idle time: the consumers that must look alive would
then age past it too on a slow machine.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from aeonloop.bus.keys import ANSWERS, Keys
from aeonloop.gateway.cli.main import main
from aeonloop.gateway.cli.status import RUN_OUT_WITHIN_S, memory_attention
from aeonloop.phases.worker import PHASE_INPUTS, PHASES

Run = Callable[..., tuple[int, str]]


@pytest.fixture
def aeon_status(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """`aeon_status(url, prefix, *argv, **env)`: `aeon status` on that Redis and prefix, with
    exactly those AEON_* variables; returns its exit code and standard output. It runs with
    `--window 0` unless `argv` gives a window: the cases that time consumers' idleness would
    otherwise wait out the memory reading's window first."""

    def run(url: str, prefix: str, *argv: str, **env: str) -> tuple[int, str]:
        for name in list(os.environ):
            if name.startswith("AEON_"):
                monkeypatch.delenv(name)
        for name, value in {"AEON_REDIS_URL": url, "AEON_PREFIX": prefix, **env}.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        window = () if "--window" in argv else ("--window", "0")
        code = main(["status", *window, *argv])
        return code, capsys.readouterr().out

    return run


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_url)
    yield r
    r.close()


def stream(keys: Keys, phase: str, shard: int = 0) -> str:
    return keys.stream(PHASE_INPUTS[phase][0].STREAM, shard)


def create_groups(r: Any, keys: Keys, phases: str = "abcde") -> None:
    for shard in range(keys.shards):
        for phase in phases:
            r.xgroup_create(stream(keys, phase, shard), keys.group(phase), id="0", mkstream=True)


def serve(r: Any, keys: Keys, phase: str, consumer: str, shard: int = 0, ack: bool = True) -> bytes:
    """One entry on the phase's stream, read by `consumer` (so Redis sees it now) and acked
    unless `ack` is False (then it stays pending)."""
    key = stream(keys, phase, shard)
    r.xadd(key, {"type": "X", "cid": "c", "body": "{}"})
    [[_key, [(entry_id, _fields)]]] = r.xreadgroup(keys.group(phase), consumer, {key: ">"}, 1)
    if ack:
        r.xack(key, keys.group(phase), entry_id)
    return entry_id


def dead_letter(r: Any, keys: Keys, shard: int, reason: str, entry_id: str = "*") -> bytes:
    fields = {"group": "phase-c", "reason": reason, "type": "PassRequested", "body": "{}"}
    return r.xadd(keys.dead_letter(shard), {**fields, "cid": "c1", "attempts": 5}, id=entry_id)


def group(report: dict[str, Any], phase: str) -> dict[str, Any]:
    [found] = [g for g in report["groups"] if g["group"] == f"phase-{phase}"]
    return found


def attention(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("attention:")]


def test_a_known_state_gives_its_numbers_and_what_needs_attention(
    client: redis.Redis, redis_url: str, redis_prefix: str, aeon_status: Run
) -> None:
    keys = Keys(redis_prefix)
    create_groups(client, keys)
    for phase in "abcd":
        serve(client, keys, phase, "worker-1")
    stuck = serve(client, keys, "a", "worker-gone", ack=False)
    # Backdate its delivery past AEON_CLAIM_IDLE_MS: nobody claimed it since.
    client.xclaim(stream(keys, "a"), keys.group("a"), "worker-gone", 0, [stuck], idle=10_000)
    client.xadd(stream(keys, "e"), {"type": "LoopExited", "cid": "c", "body": "{}"})  # unread
    newest = dead_letter(client, keys, 0, "handler raised 3 times: boom")
    for cid in ("run-1", "run-2"):
        client.set(keys.answer(cid), "{}")
    client.xadd(keys.stream(ANSWERS, 0), {"type": "FinalAnswerReady", "cid": "run-1"})

    code, out = aeon_status(redis_url, redis_prefix, "--json", AEON_CLAIM_IDLE_MS="2000")
    assert code == 5, out
    report = json.loads(out)
    assert [g["group"] for g in report["groups"]] == [f"phase-{p}" for p in PHASES]
    a = group(report, "a")
    assert (a["length"], a["lag"], a["pending"], a["pending_over_claim_idle"]) == (2, 0, 1, 1)
    assert a["lag_exact"] and a["oldest_pending_idle_ms"] >= 10_000
    assert {c["name"]: c["pending"] for c in a["consumers"]} == {"worker-1": 0, "worker-gone": 1}
    for phase in "bcd":
        g = group(report, phase)
        assert (g["length"], g["lag"], g["pending"], g["pending_over_claim_idle"]) == (1, 0, 0, 0)
        assert g["oldest_pending_idle_ms"] is None
        assert [c["name"] for c in g["consumers"]] == ["worker-1"]
        assert g["consumers"][0]["idle_ms"] < 2_000
    e = group(report, "e")
    assert (e["length"], e["lag"], e["pending"], e["consumers"]) == (1, 1, 0, [])
    assert all(not g["missing_stream_shards"] and not g["missing_group_shards"] for g in [a, e])
    assert report["dead_letters"] == {
        "count": 1,
        "shards": [
            {
                "shard": 0,
                "count": 1,
                "newest": {
                    "id": newest.decode(),
                    "group": "phase-c",
                    "type": "PassRequested",
                    "cid": "c1",
                    "reason": "handler raised 3 times: boom",
                },
            }
        ],
    }
    assert report["answers"] == {"stream_length": 1, "stored": 2, "stored_exact": True}
    assert report["streams"]["requests"] == 2 and report["streams"][ANSWERS] == 1
    assert len(report["attention"]) == 3, report["attention"]
    stuck_line, no_worker, dead = report["attention"]
    assert stuck_line.startswith("phase-a: 1 pending entry idle longer than AEON_CLAIM_IDLE_MS")
    assert "nobody is claiming it (workers down?)" in stuck_line
    assert no_worker.startswith("phase-e: no consumer seen within AEON_CLAIM_IDLE_MS (2,000 ms)")
    assert no_worker.endswith("no worker is running phase e")
    assert dead.startswith(f"1 dead letter, the newest {newest.decode()} from phase-c")

    code, out = aeon_status(redis_url, redis_prefix, AEON_CLAIM_IDLE_MS="2000")
    assert code == 5, out
    assert attention(out) == [f"attention: {line}" for line in report["attention"]]
    table = out.splitlines()
    assert any(line.split()[:4] == ["phase-a", "requests", "2", "0"] for line in table), out
    assert "worker-gone  pending 1" in out
    assert "answers: 1 on the answers stream, 2 stored" in out


def test_a_fresh_prefix_says_every_group_is_missing(
    redis_url: str, redis_prefix: str, aeon_status: Run
) -> None:
    code, out = aeon_status(redis_url, redis_prefix, "--json")
    assert code == 5, out
    report = json.loads(out)
    assert all(g["missing_stream_shards"] == [0] for g in report["groups"])
    assert report["dead_letters"]["count"] == 0
    assert report["answers"] == {"stream_length": 0, "stored": 0, "stored_exact": True}
    assert len(report["attention"]) == len(PHASES), report["attention"]
    for phase, line in zip(PHASES, report["attention"], strict=True):
        assert line.startswith(f"phase-{phase}: stream {PHASE_INPUTS[phase][0].STREAM} does not")
        assert f"no worker of phase {phase} has started" in line

    code, out = aeon_status(redis_url, redis_prefix)
    assert code == 5
    assert len(attention(out)) == len(PHASES)
    assert "phase-a  requests (missing)" in out


def test_a_healthy_deployment_exits_0_with_no_attention_line(
    client: redis.Redis, redis_url: str, redis_prefix: str, aeon_status: Run
) -> None:
    keys = Keys(redis_prefix)
    create_groups(client, keys)
    for phase in PHASES:
        serve(client, keys, phase, "worker-1")
    client.set(keys.shard_count, 1)  # as the first worker records it (bus.layout)

    code, out = aeon_status(redis_url, redis_prefix)
    assert code == 0, out
    assert attention(out) == []
    assert out.rstrip().endswith("nothing needs attention")
    assert "dead letters: none" in out

    code, out = aeon_status(redis_url, redis_prefix, "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["attention"] == []
    assert report["recorded_shards"] == 1
    assert all(g["pending"] == 0 and len(g["consumers"]) == 1 for g in report["groups"])


@pytest.mark.parametrize("reads_are_seen", [False, True], ids=["redis<7.2", "redis>=7.2"])
def test_a_phase_nobody_reads_is_flagged_as_far_as_redis_can_tell(
    client: redis.Redis,
    redis_url: str,
    redis_prefix: str,
    aeon_status: Run,
    monkeypatch: pytest.MonkeyPatch,
    reads_are_seen: bool,
) -> None:
    """Groups, nothing waiting, no consumer. Before Redis 7.2 that is also what idle workers
    look like (a read that gets nothing creates no consumer and refreshes none), so it is only
    flagged from 7.2 on; a phase with entries waiting and nobody seen is flagged on both."""
    from aeonloop.gateway.cli import status

    monkeypatch.setattr(status, "_reads_are_seen", lambda version: reads_are_seen)
    keys = Keys(redis_prefix)
    create_groups(client, keys)

    code, out = aeon_status(redis_url, redis_prefix, "--json")
    report = json.loads(out)
    assert report["empty_reads_seen"] is reads_are_seen
    if reads_are_seen:
        assert code == 5
        assert [line.split(":")[0] for line in report["attention"]] == [
            f"phase-{p}" for p in PHASES
        ]
        assert all("it has never had one" in line for line in report["attention"])
    else:
        assert (code, report["attention"]) == (0, [])

    client.xadd(stream(keys, "b"), {"type": "TaskProfiled", "cid": "c", "body": "{}"})
    code, out = aeon_status(redis_url, redis_prefix, "--json")
    lines = json.loads(out)["attention"]
    assert code == 5
    assert (
        "phase-b: no consumer seen within AEON_CLAIM_IDLE_MS (15,000 ms) while 1 entry waits"
        in ("\n".join(lines))
    )


def test_redis_unreachable_exits_4(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AEON_REDIS_URL", "redis://127.0.0.1:1/0")
    assert main(["status"]) == 4
    assert capsys.readouterr().err.startswith("aeon: cannot reach Redis at redis://127.0.0.1:1/0")


def test_aeon_status_needs_a_redis_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AEON_REDIS_URL", raising=False)
    assert main(["status"]) == 2
    assert "`aeon status` needs AEON_REDIS_URL" in capsys.readouterr().err


def test_on_a_cluster_it_sums_over_the_shards(
    redis_cluster: Any, redis_prefix: str, aeon_status: Run
) -> None:
    keys = Keys(redis_prefix, 3)
    r = RedisCluster.from_url(redis_cluster.url)
    try:
        create_groups(r, keys)
        for shard in range(3):
            for phase in PHASES:
                serve(r, keys, phase, "worker-1", shard)
        for shard in (0, 2):  # in flight: pending, but fresh
            serve(r, keys, "b", "worker-1", shard, ack=False)
        dead_letter(r, keys, 1, "oversized", "1000-0")  # the older: shards have their own clocks
        newest = dead_letter(r, keys, 2, "cannot be decoded")
        cids = {}
        for n in range(100):
            cids.setdefault(keys.shard_of(f"run-{n}"), f"run-{n}")
        assert len(cids) == 3
        for cid in cids.values():  # one answer in each shard, so on each master
            r.set(keys.answer(cid), "{}")

        code, out = aeon_status(redis_cluster.url, redis_prefix, "--json", AEON_SHARDS="3")
        assert code == 5, out
        report = json.loads(out)
        b = group(report, "b")
        assert (b["length"], b["lag"], b["pending"], b["pending_over_claim_idle"]) == (5, 0, 2, 0)
        assert [s["pending"] for s in b["per_shard"]] == [1, 0, 1]
        assert [s["length"] for s in b["per_shard"]] == [2, 1, 2]
        assert b["consumers"] == [
            {**b["consumers"][0], "name": "worker-1", "pending": 2}
        ]  # one worker, seen in every shard
        for phase in "acde":
            g = group(report, phase)
            assert (g["length"], g["lag"], g["pending"]) == (3, 0, 0)
            assert [s["length"] for s in g["per_shard"]] == [1, 1, 1]
        assert report["dead_letters"]["count"] == 2
        assert [s["count"] for s in report["dead_letters"]["shards"]] == [0, 1, 1]
        assert report["answers"]["stored"] == 3 and report["answers"]["stored_exact"]
        assert report["attention"] == [
            f"2 dead letters in shards 1, 2, the newest {newest.decode()} from phase-c: "
            "cannot be decoded; see `aeon dlq list`"
        ]

        code, out = aeon_status(redis_cluster.url, redis_prefix, AEON_SHARDS="3")
        assert code == 5
        assert "  shard 2" in out and len(attention(out)) == 1
    finally:
        for key in r.scan_iter(match=f"{redis_prefix}:*"):
            r.delete(key)
        r.close()


def test_redis_memory_is_shown_and_flagged_when_it_would_run_out(
    client: redis.Redis, redis_url: str, redis_prefix: str, aeon_status: Run
) -> None:
    """Memory is read twice, `--window` apart: a Redis that would reach its maxmemory within a
    day at that rate is an attention line; one with room, or without maxmemory, is not."""
    keys = Keys(redis_prefix)
    create_groups(client, keys)
    for phase in PHASES:
        serve(client, keys, phase, "worker-1")
    client.set(keys.shard_count, 1)
    used = int(client.info("memory")["used_memory"])
    code, out = aeon_status(redis_url, redis_prefix, "--window", "0.5")
    assert code == 0 and "no maxmemory" in out, out

    def fill() -> None:
        for n in range(40):
            client.set(f"{redis_prefix}:filler:{n}", b"x" * 1_000_000)
            time.sleep(0.05)

    client.config_set("maxmemory", used + 200_000_000)
    try:
        filler = threading.Thread(target=fill)
        filler.start()
        code, out = aeon_status(redis_url, redis_prefix, "--window", "1", "--json")
        filler.join()
        report = json.loads(out)
        [node] = report["memory"]
        assert node["maxmemory_bytes"] == used + 200_000_000
        assert node["growth_bytes_per_s"] > 1_000_000
        assert code == 5 and any("full in about" in line for line in report["attention"]), out
        for n in range(40):
            client.delete(f"{redis_prefix}:filler:{n}")
        code, out = aeon_status(redis_url, redis_prefix, "--window", "0.5")
        assert code == 0 and attention(out) == [], out
        assert "of maxmemory" in out
    finally:
        client.config_set("maxmemory", 0)


def test_memory_nearly_full_needs_attention_whatever_its_rate() -> None:
    node = {"node": "redis", "used_bytes": 95, "maxmemory_bytes": 100, "growth_bytes_per_s": 0}
    assert "95%" in (memory_attention(node) or "")
    assert memory_attention({**node, "used_bytes": 50}) is None
    assert memory_attention({**node, "maxmemory_bytes": 0}) is None
    slow = {**node, "used_bytes": 50, "growth_bytes_per_s": 50 / (RUN_OUT_WITHIN_S * 2)}
    assert memory_attention(slow) is None
