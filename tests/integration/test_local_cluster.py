"""`servers.local_cluster.LocalCluster`: a real Redis Cluster from the bundled redis-server binary.

Each test builds its own cluster (a couple of seconds: a fresh master waits 2 s before it reports
cluster_state:ok), so no test depends on another's failovers.
"""

from __future__ import annotations

import itertools
import time

import pytest
from redis.cluster import RedisCluster

from aeonloop.servers.local_cluster import SLOTS, LocalCluster

pytestmark = pytest.mark.integration


def _keys_on_every_master(rc: RedisCluster, cluster: LocalCluster, per_master: int) -> list[str]:
    """Keys chosen so that each current master owns `per_master` of them."""
    owners = {m.port: 0 for m in cluster.masters()}
    keys: list[str] = []
    i = 0
    while min(owners.values()) < per_master:
        key = f"lc:{i}"
        i += 1
        port = cluster.master_of_slot(rc.keyslot(key)).port
        if owners[port] < per_master:
            owners[port] += 1
            keys.append(key)
    return keys


def test_three_masters_cover_all_slots_and_serve_keys() -> None:
    with LocalCluster(masters=3) as cluster:
        masters = cluster.masters()
        assert len(masters) == 3
        assert masters == cluster.nodes  # no replicas: every node is a master, in slot order
        # Slots are split like `redis-cli --cluster create` does, and cover 0..16383.
        for i, master in enumerate(masters):
            assert cluster.master_of_slot(i * SLOTS // 3) is master
            assert cluster.master_of_slot((i + 1) * SLOTS // 3 - 1) is master

        rc = RedisCluster.from_url(cluster.url, decode_responses=True)
        try:
            ranges = sorted(rc.cluster_slots())  # {(lo, hi): {"primary": (host, port), ...}}
            assert ranges[0][0] == 0 and ranges[-1][1] == SLOTS - 1
            assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
            primaries = {info["primary"][1] for info in rc.cluster_slots().values()}
            assert primaries == {m.port for m in masters}

            keys = _keys_on_every_master(rc, cluster, per_master=2)
            for key in keys:
                assert rc.set(key, f"v-{key}")
            assert [rc.get(k) for k in keys] == [f"v-{k}" for k in keys]
            for key in keys:  # each key really lives on the master that owns its slot
                owner = cluster.master_of_slot(rc.keyslot(key))
                direct = rc.get_redis_connection(rc.get_node(owner.host, owner.port))
                assert direct.get(key) == f"v-{key}"
        finally:
            rc.close()


def test_manual_failover_promotes_the_replica_and_keeps_every_write() -> None:
    with LocalCluster(masters=3, replicas=1) as cluster:
        assert len(cluster.nodes) == 6
        masters = cluster.masters()
        assert all(len(cluster.replicas_of(m)) == 1 for m in masters)
        old_master = masters[0]
        replica = cluster.replicas_of(old_master)[0]

        rc = RedisCluster.from_url(cluster.url, decode_responses=True)
        try:
            keys = _keys_on_every_master(rc, cluster, per_master=5)
            for key in keys:
                rc.set(key, f"v-{key}")

            cluster.failover(replica)

            now = cluster.masters()
            assert replica in now and old_master not in now
            assert cluster.replicas_of(replica) == [old_master]
            # The same client follows the MOVED replies to the new master.
            assert [rc.get(k) for k in keys] == [f"v-{k}" for k in keys]
            assert rc.set("lc:after", "1") and rc.get("lc:after") == "1"
        finally:
            rc.close()


def test_killed_master_is_replaced_by_its_replica_without_losing_waited_writes() -> None:
    with LocalCluster(masters=3, replicas=1) as cluster:
        victim = cluster.masters()[0]  # also the node behind cluster.url
        heir = cluster.replicas_of(victim)[0]

        rc = RedisCluster.from_url(cluster.url, decode_responses=True)
        try:
            keys = _keys_on_every_master(rc, cluster, per_master=5)
            for key in keys:
                # WAIT counts the replicas that have this connection's writes: same connection.
                node = rc.get_redis_connection(rc.get_node_from_key(key))
                pipe = node.pipeline(transaction=False)
                pipe.set(key, f"v-{key}")
                pipe.wait(1, 5000)
                _, acked = pipe.execute()
                assert acked == 1

            started = time.monotonic()
            cluster.kill(victim)
            cluster.wait_until_ok(timeout=20)
            elapsed = time.monotonic() - started
            assert elapsed < 15, f"promotion took {elapsed:.1f}s"

            now = cluster.masters()
            assert heir in now and victim not in now and len(now) == 3
            assert cluster.url != victim.url  # the URL moved to a live node
            assert [rc.get(k) for k in keys] == [f"v-{k}" for k in keys]
        finally:
            rc.close()
