"""Aeon on a real Redis Cluster: workers, `aeon ask`, `aeon dlq` and a burst of requests on a
3-master cluster with one shard per master; and master failovers under load, graceful and by
SIGKILL, on a cluster with one replica per master.

The clusters are started from the same redis-server binary as every other test
(`servers.local_cluster`), so these run wherever the rest of the suite does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_support import (
    CLUSTER_SHARDS,
    Bus,
    Processes,
    Worker,
    assert_answered_once,
    child_env,
    scripted_llm,
    wait_until,
)
from redis.crc import key_slot

pytestmark = pytest.mark.e2e

REQUEST = "Explain how tides work, then summarise it for a child"


def master_ports(cluster: Any, bus: Bus, stream: str) -> list[int]:
    """The port of the master holding each shard of `stream`, by shard."""
    return [cluster.master_of_slot(key_slot(key.encode())).port for key in bus.keys.streams(stream)]


@pytest.mark.timeout(120)
def test_workers_ask_and_dlq_run_on_a_cluster_with_a_shard_per_master(
    procs: Processes,
    redis_cluster: Any,
    cluster_bus: Bus,
    cluster_env: dict[str, str],
    tmp_path: Path,
) -> None:
    bus, env = cluster_bus, cluster_env
    for name in ("one", "two"):
        procs.worker(scripted_llm(env, tmp_path, delay_ms=10), name=name)
    gateway = procs.gateway(env, 30, timeout=60, request=REQUEST)
    assert gateway.wait(90) == 0, gateway.tail()
    submitted = gateway.submitted()
    assert_answered_once(bus, submitted)

    # Each shard lives on its own master, and every shard had work.
    assert sorted(master_ports(redis_cluster, bus, "requests")) == sorted(
        node.port for node in redis_cluster.masters()
    )
    assert all(bus.redis.xlen(key) > 0 for key in bus.keys.streams("requests"))

    # The CLI, pointed at one node, finds the rest of the cluster.
    ask = procs.run_aeon(env, "ask", REQUEST, timeout=60, name="ask")
    assert ask.returncode == 0, ask.tail()
    assert ask.stdout.strip()
    answer = procs.run_aeon(env, "answer", submitted[0], name="answer")
    assert answer.returncode == 0, answer.tail()

    # A poison entry in the last shard is dead-lettered there; dlq finds and replays it.
    cid = next(c for c in submitted if bus.keys.shard_of(c) == CLUSTER_SHARDS - 1)
    bus.redis.xadd(bus.stream("requests", cid), {"type": "RequestSubmitted", "cid": cid})
    wait_until(lambda: bus.dead_letters(), 20, "the poison entry to be dead-lettered")
    listed = procs.run_aeon(env, "dlq", "list", "--json", name="dlq-list")
    assert listed.returncode == 0, listed.tail()
    (row,) = json.loads(listed.stdout)
    assert (row["shard"], row["cid"], row["group"]) == (str(CLUSTER_SHARDS - 1), cid, "phase-a")
    replayed = procs.run_aeon(env, "dlq", "replay", row["id"], name="dlq-replay")
    assert replayed.returncode == 0, replayed.tail()
    assert bus.stream("requests", cid) in replayed.stdout


@pytest.mark.timeout(240)
def test_master_failovers_under_load_lose_no_accepted_request(
    procs: Processes, cluster_factory: Any, redis_prefix: str, tmp_path: Path
) -> None:
    """40 requests in flight on 3 masters with a replica each; requests wait for a replica
    (AEON_WAIT_REPLICAS=1). One master is failed over by hand (CLUSTER FAILOVER, which loses
    nothing), then another is SIGKILLed and its replica promoted; a second gateway submits 10
    more while the cluster has no master for that shard (its submits retry until it has one).
    Every request is answered.

    A SIGKILLed master can take with it what it had not yet copied to its replica; the runs
    redo that work (docs/delivery.md, "On Redis Cluster"). Each gateway gets one answer per
    request; if a gateway read an answer in the instant before the master died, the redone
    run publishes it again: that count is printed, not asserted.
    """
    cluster = cluster_factory(masters=3, replicas=1)
    env = child_env(cluster.url, redis_prefix, AEON_SHARDS=CLUSTER_SHARDS, AEON_WAIT_REPLICAS=1)
    bus = Bus(cluster.url, redis_prefix, CLUSTER_SHARDS, cluster=True)
    try:
        for name in ("one", "two"):
            procs.worker(scripted_llm(env, tmp_path, delay_ms=60), name=name)
        gateway = procs.gateway(env, 40, timeout=150, request=REQUEST)
        wait_until(lambda: len(gateway.submitted()) == 40, 30, "the burst to be submitted")

        graceful, crashed = cluster.masters()[:2]
        wait_until(lambda: len(bus.answer_cids()) >= 5, 60, "the first answers")
        cluster.failover(cluster.replicas_of(graceful)[0])
        wait_until(lambda: len(bus.answer_cids()) >= 15, 60, "answers after the failover")
        cluster.kill(crashed)
        late = procs.gateway(env, 10, timeout=120, request=REQUEST, name="late")
        cluster.wait_until_ok()

        assert gateway.wait(180) == 0, gateway.tail()
        assert late.wait(150) == 0, late.tail()
        submitted = gateway.submitted() + late.submitted()
        answered = gateway.answered() + late.answered()
        assert sorted(row["cid"] for row in answered) == sorted(submitted)
        assert not [row for row in answered if row["degraded"]]
        answers = bus.answer_cids()
        assert set(answers) == set(submitted), "a request was lost"
        assert all(bus.stored_answer(cid) is not None for cid in submitted)
        for worker in procs.started:
            if isinstance(worker, Worker):
                assert worker.alive, worker.tail()
        counts = {
            "requests": len(submitted),
            "answers on the stream": len(answers),
            "answers published again after the kill": len(answers) - len(set(answers)),
            "dead letters": len(bus.dead_letters()),
        }
        print("\nfailover counts: " + json.dumps(counts))
    finally:
        bus.close()
