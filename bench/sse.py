"""Section 7, sse: one `aeon serve` process holding a thousand open event streams at once.

One `aeon worker` (its LLM calls slowed, so runs last long enough to be watched) and one
`aeon serve` under a fresh prefix. A set of runs is submitted through `POST /v1/runs`; then
readers open the runs' event streams all at once, spread evenly over the runs, while the runs
are still going, and read each stream to its end (the answer). Every reader is counted against
the run's steps as a fresh reader reads them once the run is over: nothing missed, nothing
repeated, nothing out of order.

It runs twice on the same server: with readers that all keep up, then with slow readers
besides on half of the runs (a 2 KB receive window, reading 256 bytes every 20 ms, so the
server's writes to them wait), and compares how late the other readers get each answer on the
runs with slow readers and on the runs without, in the same round: a slow reader must not
slow the rest. "Late" is from the answer's entry in the answers stream (its id is Redis's
clock, the same machine's) to the reader having the answer's event.

The readers are raw asyncio sockets with a minimal HTTP/1.1 and SSE reader (`read_events`),
the lightest client the bench can be, so what is measured is the server. The test suite's load
test (tests/e2e/test_http_load.py) uses the same reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from aeonloop.bus.keys import ANSWERS, Keys
from aeonloop.gateway.http.run_steps import TextKind
from aeonloop.gateway.http.serve import raise_open_files_limit
from bench.context import BenchContext
from bench.pipeline import PHASE_STREAMS
from bench.processes import Spawned, aeon_argv, aeon_workers, child_env
from bench.procstat import cpu_seconds, memory_kb
from bench.readiness import blocked_readers, until_reading
from bench.stats import latency_summary

#: Per profile: runs, readers (spread over the runs), slow readers, LLM delay per call (ms).
SIZES = {
    "full": (20, 1000, 20, 250.0),
    "quick": (20, 1000, 20, 250.0),
    "smoke": (2, 20, 2, 50.0),
}
_SERVING = re.compile(rb"serving http://([^:/]+):(\d+)/")
#: A slow reader: its receive window, and how much it takes how often.
SLOW_WINDOW = 2048
SLOW_READ = 256
SLOW_PAUSE_S = 0.02


@dataclass
class Reading:
    """What one reader got from a run's event stream."""

    status: int
    #: (event kind, event id, when it arrived: time.time()) in arrival order.
    events: list[tuple[str, str, float]] = field(default_factory=list)
    ended: bool = False

    @property
    def keys(self) -> list[str]:
        """The step each event is, in order (the answer's text as it is written, sent between
        the steps, is not counted: a reader that comes after the answer gets none)."""
        return [
            event_id.partition("@")[0]
            for kind, event_id, _at in self.events
            if kind not in get_args(TextKind)
        ]

    @property
    def answered_at(self) -> float | None:
        return next((at for kind, _id, at in self.events if kind == "answer"), None)


async def read_events(
    host: str,
    port: int,
    correlation_id: str,
    *,
    last_event_id: str | None = None,
    slow: bool = False,
    headers: Mapping[str, str] | None = None,
) -> Reading:
    """Read `correlation_id`'s event stream to its end over one raw HTTP/1.1 connection."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if slow:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_WINDOW)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    reader, writer = await asyncio.open_connection(sock=sock, limit=SLOW_READ if slow else 2**16)
    try:
        lines = [f"GET /v1/runs/{correlation_id}/events HTTP/1.1", f"Host: {host}:{port}"]
        lines += ["Accept: text/event-stream", "Connection: close"]
        if last_event_id:
            lines.append(f"Last-Event-ID: {last_event_id}")
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        status = int((await reader.readline()).split()[1])
        chunked = False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            chunked |= line.lower().startswith(b"transfer-encoding: chunked")
        reading = Reading(status)
        if status != 200 or not chunked:
            return reading
        buffer = b""
        async for chunk in _chunks(reader, slow):
            buffer = (buffer + chunk).replace(b"\r\n", b"\n")
            *blocks, buffer = buffer.split(b"\n\n")
            reading.events += [event for block in blocks if (event := _event(block))]
        reading.ended = True
        return reading
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _chunks(reader: asyncio.StreamReader, slow: bool) -> AsyncIterator[bytes]:
    """The body of a chunked response, chunk by chunk (a slow reader: a little at a time)."""
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        if size == 0:
            return
        left = size
        while left:
            part = await reader.read(min(left, SLOW_READ) if slow else left)
            if not part:
                raise ConnectionError("the server closed the stream mid-chunk")
            left -= len(part)
            yield part
            if slow:
                await asyncio.sleep(SLOW_PAUSE_S)
        await reader.readexactly(2)


def _event(block: bytes) -> tuple[str, str, float] | None:
    fields = dict(
        line.split(b": ", 1) for line in block.split(b"\n") if line and not line.startswith(b":")
    )
    if b"id" not in fields:
        return None  # a keep-alive comment, or the retry field alone
    return fields.get(b"event", b"message").decode(), fields[b"id"].decode(), time.time()


# -- the server ---------------------------------------------------------------------------------


@contextlib.contextmanager
def aeon_serve(
    redis_url: str, prefix: str, log_dir: Path, env: Mapping[str, str] | None = None
) -> Iterator[tuple[Spawned, str, int]]:
    """`aeon serve --port 0` under `prefix` (no rate limit; its access log on, as by default),
    and where it listens; stopped on exit."""
    variables = {
        "AEON_REDIS_URL": redis_url,
        "AEON_PREFIX": prefix,
        "AEON_HTTP_RATE_PER_S": "0",
        **(env or {}),
    }
    log_path = log_dir / f"{prefix}-serve.log"
    server = Spawned(
        "aeon serve", [*aeon_argv(), "serve", "--port", "0"], child_env(variables), log_path
    )
    try:
        deadline = time.monotonic() + 30
        while not (found := _SERVING.search(log_path.read_bytes())):
            server.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"aeon serve did not start:\n{server.tail()}")
            time.sleep(0.05)
        yield server, found.group(1).decode(), int(found.group(2))
    finally:
        server.stop()


def post_json(host: str, port: int, path: str, body: Any) -> Any:
    request = urllib.request.Request(
        f"http://{host}:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


# -- the section ----------------------------------------------------------------------------------


async def run_sse(ctx: BenchContext) -> dict[str, object]:
    runs, readers, slow, delay_ms = SIZES[ctx.profile.name]
    prefix = ctx.new_prefix("sse")
    raise_open_files_limit()  # this process holds every reader's socket
    baseline = await blocked_readers(ctx.redis)
    with aeon_workers(1, ctx.redis_url, prefix, ctx.log_dir, llm_delay_ms=delay_ms) as workers:
        await until_reading(ctx.redis, baseline, len(PHASE_STREAMS), workers)
        with aeon_serve(ctx.redis_url, prefix, ctx.log_dir) as (server, host, port):
            rounds = []
            for slow_readers in (0, slow):
                rounds.append(
                    await load_round(ctx, prefix, server, host, port, runs, readers, slow_readers)
                )
            peak_rss_kb = memory_kb(server.pid)
    await ctx.clean(prefix)
    return {
        "runs": runs,
        "readers": readers,
        "llm_delay_ms": delay_ms,
        "rounds": rounds,
        "server_peak_rss_kb": peak_rss_kb,
    }


async def load_round(
    ctx: BenchContext,
    prefix: str,
    server: Spawned,
    host: str,
    port: int,
    runs: int,
    readers: int,
    slow_readers: int,
) -> dict[str, object]:
    """One load: `runs` submitted, `readers` spread over them and `slow_readers` over every
    other one, all on their streams at once. The other readers' answer lateness is given
    for the runs with slow readers and for the runs without, which shared the same moments."""
    cids = [
        post_json(host, port, "/v1/runs", {"request": f"Explain tides, then summarise ({i})"})[
            "correlation_id"
        ]
        for i in range(runs)
    ]
    slowed = cids[::2] if slow_readers else []  # every other run: both kinds span the round
    watched = [cids[i % runs] for i in range(readers)]
    watched += [slowed[i % len(slowed)] for i in range(slow_readers)]
    cpu_before, started = cpu_seconds(server.pid), time.perf_counter()
    peak = asyncio.create_task(_peak_open_streams(host, port))
    readings = await asyncio.gather(
        *(read_events(host, port, cid, slow=i >= readers) for i, cid in enumerate(watched))
    )
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(server.pid) - cpu_before
    peak.cancel()
    most_open = await peak
    truth = {cid: await read_events(host, port, cid) for cid in cids}
    counted = count(readings, watched, truth)
    answered = await _answer_times(ctx, prefix, cids)
    lateness: dict[bool, list[float]] = {True: [], False: []}
    for reading, cid in zip(readings[:readers], watched, strict=False):
        if reading.answered_at is not None:
            lateness[cid in slowed].append(max(0.0, reading.answered_at - answered[cid]))
    server.check()
    row: dict[str, object] = {
        "slow_readers": slow_readers,
        **counted,
        "peak_open_streams": most_open,
        "seconds": round(elapsed, 2),
        "events_per_s": round(counted["events_delivered"] / elapsed, 1),
        "answer_lateness_ms": latency_summary(lateness[True] + lateness[False]),
        "server_cpu_percent": round(100 * cpu / elapsed, 1),
    }
    if slow_readers:
        row["answer_lateness_ms_runs_with_slow_readers"] = latency_summary(lateness[True])
        row["answer_lateness_ms_runs_without"] = latency_summary(lateness[False])
    return row


async def _peak_open_streams(host: str, port: int) -> int:
    """The most event streams /healthz said were open at once, read every 50 ms until
    cancelled."""
    most = 0
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(
                f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            reply = await reader.read()
            writer.close()
            most = max(most, json.loads(reply.partition(b"\r\n\r\n")[2])["open_event_streams"])
            await asyncio.sleep(0.05)
    return most


def count(readings: list[Reading], cids: list[str], truth: Mapping[str, Reading]) -> dict[str, int]:
    """Each reading against its run's steps as a fresh reader got them after the run."""
    missed = repeated = disordered = incomplete = 0
    for reading, cid in zip(readings, cids, strict=True):
        expected = truth[cid].keys
        got = reading.keys
        missed += len(set(expected) - set(got))
        repeated += len(got) - len(set(got))
        disordered += got != [key for key in expected if key in got]
        incomplete += not (reading.status == 200 and reading.ended and got[-1:] == ["answer"])
    return {
        "streams": len(readings),
        "events_delivered": sum(len(r.keys) for r in readings),
        #: The answer's text as it was written, between the steps (readers live before the
        #: answer get some; the counts above are of steps).
        "text_events_delivered": sum(len(r.events) - len(r.keys) for r in readings),
        "events_expected": sum(len(truth[cid].keys) for cid in cids),
        "missed": missed,
        "repeated": repeated,
        "out_of_order": disordered,
        "incomplete": incomplete,
    }


async def _answer_times(ctx: BenchContext, prefix: str, cids: list[str]) -> dict[str, float]:
    """When each run's answer was added to the answers stream (its entry id's clock), in s."""
    wanted = set(cids)
    times = {}
    for key in Keys(prefix).streams(ANSWERS):
        for entry_id, fields in await ctx.redis.xrange(key):
            cid = fields[b"cid"].decode()
            if cid in wanted:
                times[cid] = int(entry_id.split(b"-")[0]) / 1000
    return times
