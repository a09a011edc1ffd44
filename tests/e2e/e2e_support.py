"""Helpers of the end-to-end proofs: `aeon worker`s, `aeon` commands, gateway processes.

Every process started here writes its stdout and stderr to files under the test's tmp_path (no
pipes to fill up), is registered with the test's `procs` fixture (conftest.py), and is killed
(SIGKILL) at teardown if the test left it running. Waits are bounded: `wait_until` raises
with what it was waiting for, and process waits raise `subprocess.TimeoutExpired`.

Children get a clean environment: every AEON_* variable of the test runner is dropped, then
`child_env` sets the Redis URL, the test's prefix and fast recovery settings (short idle, lease
and retry times) so a killed worker's entries are claimed within about a second.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from aeonloop.bus.compact import unpack
from aeonloop.bus.keys import Keys

REPO_ROOT = Path(__file__).resolve().parents[2]
GATEWAY_SCRIPT = Path(__file__).with_name("gateway_proc.py")
PHASES = ("a", "b", "c", "d", "e")
GROUPS = {  # logical stream → the group that consumes it
    "requests": "phase-a",
    "profiled": "phase-b",
    "passes": "phase-c",
    "pass-completed": "phase-d",
    "loop-exited": "phase-e",
}
#: Recovery settings short enough for tests: a dead worker's entries are claimed after ~1 s,
#: its dedupe locks lapse after 1.5 s, and a live worker's heartbeat (every lease/3 = 0.5 s)
#: keeps what it is working on.
FAST_BUS = {
    "AEON_BLOCK_MS": "100",
    "AEON_CLAIM_IDLE_MS": "1000",
    "AEON_CLAIM_INTERVAL_S": "0.2",
    "AEON_LOCK_LEASE_MS": "1500",
    "AEON_RETRY_BACKOFF_S": "0.05",
    "AEON_SHUTDOWN_GRACE_S": "10",
}
#: Shards on the session's cluster (the `redis_cluster` fixture): one per master.
CLUSTER_SHARDS = 3
#: A task profile the scripted LLM returns, so runs take a few passes of real work.
SCRIPTED_PROFILE = {
    "reasoning_depth": 3,
    "information_sufficiency": 0.5,
    "expected_tool_usage": "moderate",
    "output_breadth": "moderate",
    "confidence_requirement": "medium",
    "raw_inference": "scripted for the end-to-end tests",
}
_STOPPED = re.compile(r"worker (\S+) stopped; events handled: (.*)$", re.MULTILINE)

T = TypeVar("T")


def aeon_argv() -> list[str]:
    """The venv's `aeon` console script, run by this interpreter (it sits beside it)."""
    script = Path(sys.executable).with_name("aeon")
    if not script.is_file():
        pytest.fail(f"no `aeon` script beside {sys.executable}: install the project (pip -e .)")
    return [sys.executable, str(script)]


def child_env(
    redis_url: str | None = None,
    prefix: str | None = None,
    *,
    fast: bool = True,
    **overrides: object,
) -> dict[str, str]:
    """A child's environment: ours without AEON_*, then FAST_BUS (unless not `fast`), the URL,
    the prefix and `overrides` (AEON_LLM_DELAY_MS="20", ...)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AEON_")}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"
    if fast:
        env.update(FAST_BUS)
    if redis_url:
        env["AEON_REDIS_URL"] = redis_url
    if prefix:
        env["AEON_PREFIX"] = prefix
    env.update({key: str(value) for key, value in overrides.items()})
    return env


def run_on_a_terminal(
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 120.0,
    stderr_too: bool = False,
) -> tuple[str, str]:
    """Run `argv` to its end with its stdout a terminal (a pseudo-terminal this reads): what
    the terminal showed (lines ending in "\n") and its stderr (`stderr_too`: on the terminal
    as well, as a person's shell has it; then none apart); AssertionError unless it exits
    0."""
    main, terminal = pty.openpty()
    errors_to = terminal if stderr_too else subprocess.PIPE
    with subprocess.Popen(
        argv, env=dict(env), stdout=terminal, stderr=errors_to, stdin=subprocess.DEVNULL
    ) as proc:
        os.close(terminal)
        shown = bytearray()
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal's other end closed: the command is done
                break
            if not chunk:
                break
            shown += chunk
        _, stderr = proc.communicate(timeout=timeout)
    os.close(main)
    assert proc.returncode == 0, (stderr or bytes(shown)).decode()
    return shown.decode().replace("\r\n", "\n"), (stderr or b"").decode()


def submitted_id(stderr: str) -> str:
    """The correlation id `aeon ask` said it submitted."""
    found = re.search(r"request (\S+) submitted", stderr)
    assert found, stderr
    return found.group(1)


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """`check()`'s first truthy value; AssertionError naming `what` after `timeout` seconds.

    A Redis connection error counts as "not yet" (the server may be restarting).
    """
    end = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except RedisConnectionError:
            value = None
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# -- processes ------------------------------------------------------------------------------


class Proc:
    """One child process with its output in files; never left running by the test."""

    def __init__(self, name: str, argv: Sequence[str | bytes], env: Mapping[str, str], logs: Path):
        self.name = name
        self.argv = list(argv)
        self.stdout_path = logs / f"{name}.out"
        self.stderr_path = logs / f"{name}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                self.argv,
                env=dict(env),
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def terminate(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no ack, no last words (a crash)."""
        if self.alive:
            self.process.kill()
        self.process.wait(timeout=10)

    def wait_for_output(self, text: str, timeout: float) -> None:
        def seen() -> bool:
            if not self.alive and text not in self.output:
                raise AssertionError(f"{self.name} exited with {self.returncode}:\n{self.tail()}")
            return text in self.output

        wait_until(seen, timeout, f"{text!r} in the output of {self.name}")

    def tail(self, lines: int = 25) -> str:
        text = (self.stdout + "\n" + self.stderr).strip().splitlines()
        return "\n".join(text[-lines:])


class Worker(Proc):
    """`aeon worker`: ready once it logs the groups it consumes."""

    @property
    def consumer(self) -> str:
        """Its consumer name in every group (bus.settings.default_consumer_name)."""
        return f"{socket.gethostname()}-{self.pid}"

    def ready(self, timeout: float = 15.0) -> Worker:
        self.wait_for_output("consuming [", timeout)
        return self

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for the exit code."""
        self.terminate()
        return self.wait(timeout)

    def handled(self) -> dict[str, int]:
        """The counts of its "worker ... stopped; events handled: a=N, ..." line (after stop)."""
        found = _STOPPED.findall(self.stderr)
        assert found, f"{self.name} logged no 'stopped; events handled' line:\n{self.tail()}"
        counts = found[-1][1]
        return {k: int(v) for k, v in (part.split("=") for part in counts.split(", "))}


class Gateway(Proc):
    """tests/e2e/gateway_proc.py: one AeonClient, many requests, one JSON line per happening."""

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        rows = [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]
        return [row for row in rows if kind is None or row["event"] == kind]

    def submitted(self) -> list[str]:
        return [row["cid"] for row in self.records("submitted")]

    def answered(self) -> list[dict[str, Any]]:
        return self.records("answered")


class Processes:
    """What a test starts; everything still running at teardown is killed."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Proc] = []
        self._names: dict[str, int] = {}

    def _name(self, base: str) -> str:
        self._names[base] = self._names.get(base, 0) + 1
        return f"{base}-{self._names[base]}"

    def _add(self, proc: T) -> T:
        self.started.append(proc)  # type: ignore[arg-type]
        return proc

    def worker(
        self,
        env: Mapping[str, str],
        *args: str,
        name: str = "worker",
        ready: bool = True,
    ) -> Worker:
        """`aeon worker ARGS` with `env`; waits until it is consuming unless ready=False."""
        proc = self._add(Worker(self._name(name), [*aeon_argv(), "worker", *args], env, self.logs))
        return proc.ready() if ready else proc

    def program(self, name: str, *argv: str, env: Mapping[str, str] | None = None) -> Proc:
        """Any other program, in the background, with this process's environment unless `env`."""
        env = os.environ if env is None else env
        return self._add(Proc(self._name(name), argv, env, self.logs))

    def aeon(self, env: Mapping[str, str], *args: str | bytes, name: str = "aeon") -> Proc:
        """Any `aeon` command, in the background."""
        return self._add(Proc(self._name(name), [*aeon_argv(), *args], env, self.logs))

    def run_aeon(
        self, env: Mapping[str, str], *args: str | bytes, timeout: float = 60.0, name: str = "aeon"
    ) -> Proc:
        """Any `aeon` command, waited for (killed and TimeoutExpired after `timeout`)."""
        proc = self.aeon(env, *args, name=name)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        return proc

    def gateway(
        self,
        env: Mapping[str, str],
        count: int,
        *,
        timeout: float = 60.0,
        request: str = "Explain tides, then summarise them for a child",
        name: str = "gateway",
    ) -> Gateway:
        """A gateway process submitting `count` requests at once; `timeout` is each deadline."""
        argv = [
            sys.executable,
            str(GATEWAY_SCRIPT),
            "--count",
            str(count),
            "--timeout",
            f"{timeout:g}",
            "--request",
            request,
        ]
        return self._add(Gateway(self._name(name), argv, env, self.logs))

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.alive:
                proc.kill()

    def report(self) -> str:
        return "\n\n".join(f"--- {p.name} (exit {p.returncode})\n{p.tail()}" for p in self.started)


# -- the bus, read from the test ------------------------------------------------------------


class Bus:
    """Read-only views of one prefix's streams and keys, over every shard, with a synchronous
    client (a cluster client when `cluster`)."""

    def __init__(self, url: str, prefix: str, shards: int = 1, cluster: bool = False) -> None:
        self.url = url
        self.prefix = prefix
        self.keys = Keys(prefix, shards)
        options = {"socket_timeout": 5, "socket_connect_timeout": 2}
        self.redis: Any = (
            redis.RedisCluster.from_url(url, **options)
            if cluster
            else redis.Redis.from_url(url, **options)
        )

    def close(self) -> None:
        self.redis.close()

    def stream(self, name: str, cid: str = "") -> str:
        """The stream `name` in the shard of run `cid` (any run's, with one shard)."""
        return self.keys.stream_of(name, cid)

    def entries(self, name: str) -> list[tuple[str, dict[str, bytes]]]:
        """Every shard's entries of the stream, shard by shard."""
        return [
            (entry_id.decode(), {k.decode(): v for k, v in fields.items()})
            for key in self.keys.streams(name)
            for entry_id, fields in self.redis.xrange(key)
        ]

    def xlen(self, name: str) -> int:
        return sum(self.redis.xlen(key) for key in self.keys.streams(name))

    def answer_cids(self) -> list[str]:
        """The cid of every entry of the answers stream, in order (duplicates kept)."""
        return [fields["cid"].decode() for _, fields in self.entries("answers")]

    def stored_answer(self, cid: str) -> dict[str, Any] | None:
        """The ExecutionResult stored under the answer key, as JSON data."""
        body = self.redis.get(self.keys.answer(cid))
        return json.loads(unpack(body))["result"] if body is not None else None

    def dead_letters(self) -> list[dict[str, str]]:
        return [
            {"id": entry_id, **{k: v.decode(errors="replace") for k, v in fields.items()}}
            for entry_id, fields in self.entries("dead-letter")
        ]

    def pending(self, consumer: str | None = None) -> int:
        """Entries read but not acked, over every phase group (of `consumer` if given)."""
        total = 0
        for stream, group in GROUPS.items():
            for key in self.keys.streams(stream):
                total += self._pending(key, group, consumer)
        return total

    def _pending(self, key: str, group: str, consumer: str | None) -> int:
        try:
            if consumer is None:
                return self.redis.xpending(key, group)["pending"]
            return len(self.redis.xpending_range(key, group, "-", "+", 1000, consumer))
        except redis.ResponseError:  # no such stream or group (yet)
            return 0

    def repeated_event_ids(self) -> int:
        """Copies of intermediate events published more than once (dedupe must absorb them)."""
        repeats = 0
        for stream in ("profiled", "passes", "pass-completed", "loop-exited"):
            ids = [json.loads(f["body"])["event_id"] for _, f in self.entries(stream)]
            repeats += len(ids) - len(set(ids))
        return repeats

    def has_keys(self) -> bool:
        return any(True for _ in self.redis.scan_iter(match=f"{self.prefix}:*", count=1000))


def assert_answered_once(bus: Bus, cids: Sequence[str]) -> None:
    """Each cid has exactly one entry on the answers stream and a stored answer; no strays."""
    answers = bus.answer_cids()
    repeated = sorted({c for c in answers if answers.count(c) > 1})
    assert not repeated, f"answered more than once: {repeated}"
    assert sorted(answers) == sorted(cids), "the answers stream is not one entry per request"
    missing = [cid for cid in cids if bus.stored_answer(cid) is None]
    assert not missing, f"no stored answer for {missing}"


def scripted_llm(env: Mapping[str, str], folder: Path, delay_ms: int = 40) -> dict[str, str]:
    """`env` with the scripted LLM (SCRIPTED_PROFILE, `delay_ms` a call), its script in `folder`."""
    script = folder / "llm.json"
    script.write_text(json.dumps({"TASKPROFILE_INFERENCE_USER": json.dumps(SCRIPTED_PROFILE)}))
    return {
        **env,
        "AEON_LLM": "scripted",
        "AEON_LLM_SCRIPT": str(script),
        "AEON_LLM_DELAY_MS": str(delay_ms),
    }
