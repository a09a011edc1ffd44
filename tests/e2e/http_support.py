"""Helpers of the HTTP proofs: a real `aeon serve` process, and plain HTTP to it.

Requests go over real sockets with the standard library's http.client; an event stream is read
line by line as a browser's EventSource would (gateway.http.run_feed's events: `id`, `event`,
`data`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from e2e_support import Bus, Proc, Processes, child_env

_SERVING = re.compile(r"serving http://([^:/]+):(\d+)/")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any  # the JSON, or the text when it is not JSON

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class Event:
    kind: str
    id: str | None  # None: a `waiting` line, which marks no place to resume from
    data: dict[str, Any]


#: The events of the answer's text as it is written, between a run's steps.
TEXT_KINDS = ("answer_delta", "answer_reset")
#: What a silent run waits for, said every 10 s (no id): neither a step nor text.
WAITING = "waiting"


@dataclass
class Stream:
    """What one GET of a run's events gave: its status, the events read (`received`: all of
    them; `events`: the steps; `text`: the answer's text as it was written; `waiting`: the
    lines of what a silent run waits for), whether it ended."""

    status: int
    received: list[Event] = field(default_factory=list)
    ended: bool = False
    body: Any = None

    @property
    def events(self) -> list[Event]:
        return [e for e in self.received if e.kind not in (*TEXT_KINDS, WAITING)]

    @property
    def waiting(self) -> list[Event]:
        return [e for e in self.received if e.kind == WAITING]

    @property
    def text(self) -> list[Event]:
        return [e for e in self.received if e.kind in TEXT_KINDS]

    @property
    def kinds(self) -> list[str]:
        return [e.kind if e.kind != "pass" else f"pass-{e.data['pass']}" for e in self.events]


class Server:
    """`aeon serve --port 0` in a child process; `port` is the one it says it took."""

    def __init__(self, procs: Processes, env: Mapping[str, str], name: str = "serve") -> None:
        self.proc: Proc = procs.aeon(env, "serve", "--port", "0", name=name)
        self.proc.wait_for_output("serving http://", timeout=30)
        found = _SERVING.search(self.proc.stderr)
        assert found, self.proc.tail()
        self.host, self.port = found.group(1), int(found.group(2))

    def connection(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Reply:
        """One request; `body` is sent as JSON, `raw` as it is."""
        sent = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        connection = self.connection()
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            text = response.read().decode()
            try:
                parsed: Any = json.loads(text)
            except json.JSONDecodeError:
                parsed = text
            found = {name.lower(): value for name, value in response.getheaders()}
            return Reply(response.status, found, parsed)
        finally:
            connection.close()

    def get(self, path: str, **options: Any) -> Reply:
        return self.request("GET", path, **options)

    def post(self, path: str, body: Any = None, **options: Any) -> Reply:
        return self.request("POST", path, body, **options)

    def submit(
        self, request: str = "Explain tides, then summarise them for a child", **fields: Any
    ) -> str:
        reply = self.post("/v1/runs", {"request": request, **fields})
        assert reply.status == 202, reply
        return reply.body["correlation_id"]

    def events(
        self,
        correlation_id: str,
        *,
        last_event_id: str | None = None,
        stop_after: int | None = None,
        stop_after_text: int | None = None,
        stop_when: Callable[[Stream], bool] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Stream:
        """Read the run's event stream to its end, or until `stop_after` steps, or, given
        `stop_after_text`, that many answer text events, or once `stop_when(stream)` (then hang
        up)."""
        sent = {"Accept": "text/event-stream", **(headers or {})}
        if last_event_id is not None:
            sent["Last-Event-ID"] = last_event_id
        connection = self.connection()
        try:
            connection.request("GET", f"/v1/runs/{correlation_id}/events", headers=sent)
            response = connection.getresponse()
            stream = Stream(response.status)
            if response.status != 200:
                text = response.read().decode()
                stream.body = json.loads(text) if text else None
                return stream
            fields: dict[str, str] = {}
            while True:
                line = response.readline().decode()
                if not line:
                    stream.ended = True
                    return stream
                line = line.rstrip("\r\n")
                if line.startswith(":"):
                    continue  # a keep-alive comment
                if line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                    continue
                if "data" in fields:
                    data = json.loads(fields["data"])
                    stream.received.append(
                        Event(fields.get("event", "message"), fields.get("id"), data)
                    )
                    if stop_after is not None and len(stream.events) >= stop_after:
                        return stream
                    if stop_after_text is not None and len(stream.text) >= stop_after_text:
                        return stream
                    if stop_when is not None and stop_when(stream):
                        return stream
                fields = {}
        finally:
            connection.close()


def answer_written(events: list[Event]) -> str:
    """The answer's text as a reader of `events` has it: the deltas after the last reset."""
    text = ""
    for event in events:
        if event.kind == "answer_reset":
            text = ""
        elif event.kind == "answer_delta":
            text += event.data["text"]
    return text


def expected_kinds(result: Mapping[str, Any]) -> list[str]:
    """The steps a run answered with `result` streams, in order."""
    passes = [f"pass-{n}" for n in range(1, result["total_passes"] + 1)]
    return ["profile", "plan", *passes, "exit", "answer"]


@dataclass
class Stack:
    """What `served` yields, kept together for a module's tests: the server, its bus, its env."""

    server: Server
    bus: Bus
    env: dict[str, str]


@contextlib.contextmanager
def served(redis_url: str, logs: Path, **env: str) -> Iterator[tuple[Server, Bus, dict[str, str]]]:
    """One worker and one `aeon serve`, under a prefix of their own (`env`: AEON_* settings),
    their logs printed if the block fails, and the prefix's keys deleted after it."""
    prefix = "t" + uuid.uuid4().hex[:8]
    procs = Processes(logs)
    child = child_env(redis_url, prefix, **env)
    bus = Bus(redis_url, prefix)
    try:
        procs.worker(child)
        yield Server(procs, child), bus, child
    except BaseException:
        print(procs.report())
        raise
    finally:
        procs.kill_all()
        bus.close()
        _delete_prefix(redis_url, prefix)


def _delete_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()
