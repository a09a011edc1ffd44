"""Issue 4's credential proofs: a password-protected Redis works, and its password never shows.

The worker and `aeon ask` run with the password in AEON_REDIS_URL and AEON_LOG_LEVEL=DEBUG,
through an outage (the server restarts under them), and nothing either prints carries the
password. When Redis cannot be reached, or refuses the password, the exit-4 message names the
server with its credentials masked.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable

import pytest
from e2e_support import Processes, child_env

from aeonloop.servers.embedded import RedisServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def password() -> str:
    return f"s3cret-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def server(redis_server_factory: Callable[..., RedisServer], password: str) -> RedisServer:
    """A private Redis that requires `password`."""
    return redis_server_factory(password=password)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(90)
def test_password_url_works_and_never_shows_in_any_output(
    procs: Processes, server: RedisServer, redis_prefix: str, password: str
) -> None:
    assert password in server.url
    env = child_env(server.url, redis_prefix, AEON_LOG_LEVEL="DEBUG")
    worker = procs.worker(env)
    assert f"on redis://***@127.0.0.1:{server.port}/0" in worker.stderr

    first = procs.run_aeon(env, "ask", "Explain tides", timeout=30)
    assert first.returncode == 0, first.tail()
    assert "Answer:" in first.stdout
    server.restart(keep_data=True)  # connection errors get logged, at DEBUG too
    second = procs.run_aeon(env, "ask", "Explain rainbows", "--json", timeout=30)
    assert second.returncode == 0, second.tail()
    listed = procs.run_aeon(env, "dlq", "list", timeout=20)
    assert listed.returncode == 0, listed.tail()
    assert worker.stop() == 0, worker.tail()

    assert "Redis answers again" in worker.stderr  # it did go through the outage
    for proc in procs.started:
        assert password not in proc.output, f"{proc.name} printed the password"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "command",
    [("ask", "Explain tides"), ("worker",), ("answer", "0" * 32), ("dlq", "list")],
    ids=["ask", "worker", "answer", "dlq"],
)
def test_unreachable_redis_exits_4_with_the_url_redacted(
    procs: Processes, redis_prefix: str, password: str, command: tuple[str, ...]
) -> None:
    port = _closed_port()
    env = child_env(f"redis://:{password}@127.0.0.1:{port}/0", redis_prefix)
    run = procs.run_aeon(env, *command, timeout=30)

    assert run.returncode == 4, run.tail()
    assert f"aeon: cannot reach Redis at redis://***@127.0.0.1:{port}/0" in run.stderr
    assert password not in run.output
    assert "Traceback" not in run.stderr


@pytest.mark.timeout(60)
def test_wrong_password_exits_4_without_showing_either_password(
    procs: Processes, server: RedisServer, redis_prefix: str, password: str
) -> None:
    wrong = f"wrong-{uuid.uuid4().hex[:12]}"
    urls = {
        "in the authority": f"redis://:{wrong}@127.0.0.1:{server.port}/0",
        "as a query parameter": f"redis://127.0.0.1:{server.port}/0?password={wrong}",
    }
    for url in urls.values():
        run = procs.run_aeon(child_env(url, redis_prefix), "ask", "Explain tides", timeout=30)
        assert run.returncode == 4, run.tail()
        assert "aeon: cannot reach Redis at redis://" in run.stderr
        assert wrong not in run.output and password not in run.output, run.stderr
