"""Fixtures of the end-to-end proofs; the helpers they use live in e2e_support.py.

`procs` starts real processes (`aeon worker`, `aeon ...`, gateway processes) and kills whatever
is still running at teardown; `bus` reads the test's streams; `env` is a child environment on
the session's Redis under the test's own prefix. `cluster_bus` and `cluster_env` are the same on
the session's 3-master Redis Cluster, with one shard per master (CLUSTER_SHARDS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import CLUSTER_SHARDS, Bus, Processes, child_env


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Keep each phase's report on the item, so `procs` knows whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Processes]:
    """Start processes through this; if the test fails, their log tails are printed."""
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(logs)
    try:
        yield processes
    finally:
        processes.kill_all()
        report = getattr(request.node, "rep_call", None)
        if report is None or report.failed:
            print(processes.report())


@pytest.fixture
def bus_factory() -> Iterator[Callable[..., Bus]]:
    """`bus_factory(url, prefix, shards=1, cluster=False)`: a Bus, closed after the test."""
    opened: list[Bus] = []

    def make(url: str, prefix: str, shards: int = 1, cluster: bool = False) -> Bus:
        opened.append(Bus(url, prefix, shards, cluster))
        return opened[-1]

    yield make
    for bus in opened:
        bus.close()


@pytest.fixture
def bus(redis_url: str, redis_prefix: str, bus_factory: Callable[..., Bus]) -> Bus:
    """The shared test Redis, under this test's prefix."""
    return bus_factory(redis_url, redis_prefix)


@pytest.fixture
def env(redis_url: str, redis_prefix: str) -> dict[str, str]:
    """A child environment on the shared test Redis under this test's prefix."""
    return child_env(redis_url, redis_prefix)


@pytest.fixture
def cluster_bus(redis_cluster: Any, redis_prefix: str, bus_factory: Callable[..., Bus]) -> Bus:
    """The session's cluster, under this test's prefix, over every shard."""
    return bus_factory(redis_cluster.url, redis_prefix, CLUSTER_SHARDS, cluster=True)


@pytest.fixture
def cluster_env(redis_cluster: Any, redis_prefix: str) -> dict[str, str]:
    """A child environment on the session's cluster under this test's prefix."""
    return child_env(redis_cluster.url, redis_prefix, AEON_SHARDS=CLUSTER_SHARDS)
