"""The processes a benchmark measures: `aeon worker`s and reference consumers.

They run as separate processes, not tasks in the bench process, for two reasons: their CPU time
can then be read from /proc/<pid>/stat and divided by the hops they handled, and the gateway
side (which does run in the bench process) cannot steal their CPU without it showing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from bench.chain import ChainSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
_STOP_TIMEOUT_S = 30.0


class ProcessDied(RuntimeError):
    """A measured process exited while it should have been serving; the message has its log."""


class Spawned:
    """One child process with its stderr/stdout in a log file, stopped with SIGTERM."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path):
        self.name = name
        self.log_path = log_path
        #: Where it serves /metrics (AEON_METRICS_PORT), None when it does not.
        port = env.get("AEON_METRICS_PORT")
        self.metrics_port = int(port) if port else None
        self._log: IO[bytes] = log_path.open("wb")
        self.process = subprocess.Popen(
            argv,
            env=dict(env),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def check(self) -> None:
        """ProcessDied with the log's tail if the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise ProcessDied(f"{self.name} (pid {self.pid}) exited with {code}:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """SIGTERM (a worker finishes in-flight events and exits), SIGKILL if it hangs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def child_env(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus `overrides`, with the repository importable.

    Other AEON_* variables are inherited on purpose, so a tuning experiment (say
    AEON_MAX_RECORDS) can be benchmarked without editing anything; the report lists them.
    """
    env = dict(os.environ)
    env.update(overrides)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    return env


def aeon_argv() -> list[str]:
    """The `aeon` console script beside this interpreter, else the same entry point via -c."""
    script = Path(sys.executable).with_name("aeon")
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "import sys; from gateway.cli.main import main; sys.exit(main())"]


@contextlib.contextmanager
def aeon_workers(
    count: int,
    redis_url: str,
    prefix: str,
    log_dir: Path,
    *,
    concurrency: int | None = None,
    llm_delay_ms: float = 0.0,
    argv: list[str] | None = None,
    shards: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[list[Spawned]]:
    """`count` `aeon worker` processes (or `argv`) serving every phase under `prefix`, with the
    offline LLM; stopped on exit. `shards` sets AEON_SHARDS (None: inherited); `env` adds
    variables (tracing, metrics)."""
    variables = {
        "AEON_REDIS_URL": redis_url,
        "AEON_PREFIX": prefix,
        "AEON_LLM": "offline",
        "AEON_LLM_DELAY_MS": f"{llm_delay_ms:g}",
    }
    if concurrency is not None:
        variables["AEON_CONCURRENCY"] = str(concurrency)
    if shards is not None:
        variables["AEON_SHARDS"] = str(shards)
    variables |= env or {}
    with contextlib.ExitStack() as stack:
        workers = []
        for index in range(count):
            worker = Spawned(
                f"aeon worker #{index + 1}",
                argv or [*aeon_argv(), "worker"],
                _own_metrics_port(child_env(variables), index),
                log_dir / f"{prefix}-worker{index + 1}.log",
            )
            stack.callback(worker.stop)
            workers.append(worker)
        yield workers


def _own_metrics_port(env: dict[str, str], index: int) -> dict[str, str]:
    """Worker #index serves /metrics on AEON_METRICS_PORT + index (set by `env` or inherited),
    so the workers of one load do not fight over one port."""
    if env.get("AEON_METRICS_PORT"):
        env["AEON_METRICS_PORT"] = str(int(env["AEON_METRICS_PORT"]) + index)
    return env


@contextlib.contextmanager
def reference_consumers(
    redis_url: str, spec: ChainSpec, mode: str, log_dir: Path, module: str = "bench.reference"
) -> Iterator[Spawned]:
    """The consumers of `spec` in `mode` as one process, stopped on exit: `module` is
    bench.reference (plain redis-py) or bench.faststream_ref (FastStream)."""
    consumer = Spawned(
        f"{module.rpartition('.')[2]} ({mode})",
        [sys.executable, "-m", module, "--url", redis_url, "--mode", mode, *spec.to_args()],
        child_env({}),
        log_dir / f"{spec.prefix}-reference.log",
    )
    try:
        yield consumer
    finally:
        consumer.stop()
