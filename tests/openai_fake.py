"""A fake OpenAI-compatible endpoint on loopback (stdlib only): real HTTP for the official client.

Tests queue canned responses (`reply`, `fail`, `stall`) or set a `responder` that reads each
request and answers it, the way a real server would. `serve()` runs one in a thread.

A request with `stream: true` is answered as servers stream: the headers at once, then the reply
as server-sent events, `data: {chat.completion.chunk}` a piece of text at a time (the role, the
reasoning, the content or refusal, the finish reason, then the usage when
`stream_options.include_usage` asks for it), and `data: [DONE]`. A Planned response says how
slowly: a stall before the first chunk (`sleep`, the prompt's processing), a gap between chunks
(a slow server that keeps writing), a stall after some chunks (`pause`), an error event after
some chunks (`error_after`), a stream cut short, `data: [DONE]` with no finish reason (`cut`:
llama-cpp-python's server when another request comes), or no streaming at all (`streams=False`:
a server that ignores `stream` and answers JSON).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The API key the adapter tests use: it must never show in an error or a log line.
SECRET = "sk-test-do-not-leak-0123456789"


@dataclass
class Planned:
    """One canned response: status, JSON body, headers, and how it is timed."""

    status: int = 200
    body: dict[str, Any] | None = None
    #: Seconds before answering; when streaming, between the headers and the first chunk.
    sleep: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds between streamed chunks: a slow server that keeps producing tokens.
    gap: float = 0.0
    #: (chunks, seconds): after that many streamed chunks, a stall of that many seconds.
    pause: tuple[int, float] | None = None
    #: False: a server that ignores `stream: true` and answers the whole reply as JSON.
    streams: bool = True
    #: (chunks, message): after that many streamed chunks, an error event ends the stream.
    error_after: tuple[int, str] | None = None
    #: Asked after each streamed chunk: True ends the stream there, `data: [DONE]` with no
    #: finish reason, as llama-cpp-python's server cuts a stream another request interrupts.
    cut: Callable[[int], bool] | None = None
    #: True: the connection is closed with no response at all (a server that drops a request).
    drop: bool = False


@dataclass
class Seen:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class FakeOpenAI:
    """Serves POST /v1/chat/completions from a queue of Planned responses (the last repeats)."""

    base_url: str = ""
    planned: list[Planned] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    #: When set, answers every request instead of the queue (a server that reads the request).
    responder: Callable[[Seen], Planned] | None = None
    #: What GET /v1/models lists; None answers it 404, as servers without a model list do.
    models: list[str] | None = field(default_factory=lambda: ["fake-model"])
    #: While set, GET /v1/models answers this status (a server that is up but failing).
    models_status: int | None = None
    #: While set, GET /v1/models answers 200 with this body instead of a model list (as some
    #: proxies and older servers do).
    models_body: dict[str, Any] | None = None

    def reply(
        self,
        text: str | None,
        model: str = "fake-model",
        usage: bool = True,
        *,
        gap: float = 0.0,
        pause: tuple[int, float] | None = None,
        **message: Any,
    ) -> None:
        """Queue a successful chat completion; `finish_reason` and message fields as keywords,
        and when streamed, `gap` and `pause` as Planned has them."""
        body = completion(text, model, usage, **message)
        self.planned.append(Planned(body=body, gap=gap, pause=pause))

    def fail(
        self, status: int, message: str = "boom", headers: dict[str, str] | None = None
    ) -> None:
        """Queue an HTTP error with an OpenAI-style error body."""
        self.planned.append(Planned(status=status, body=error_body(message), headers=headers or {}))

    def stall(self, seconds: float) -> None:
        """Queue a response that comes only after `seconds` (streamed: its first chunk does)."""
        self.planned.append(Planned(body=completion("too late"), sleep=seconds))

    @property
    def streamed(self) -> list[bool]:
        """Whether each request seen asked for a streamed reply."""
        return [bool(seen.body.get("stream")) for seen in self.seen]

    def next_response(self, seen: Seen) -> Planned:
        if self.responder is not None:
            return self.responder(seen)
        index = min(len(self.seen) - 1, len(self.planned) - 1)
        return self.planned[index] if self.planned else Planned(body=completion("ok"))


def completion(
    text: str | None,
    model: str = "fake-model",
    usage: bool = True,
    finish_reason: str = "stop",
    **message: Any,
) -> dict[str, Any]:
    """A chat.completion body as an OpenAI-compatible server sends it; `message` adds fields to
    the message (`reasoning_content`, `refusal`)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, **message},
                "finish_reason": finish_reason,
            }
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    return body


def error_body(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


#: A piece of text as a server streams it: a word and the white space after it.
_PIECE = re.compile(r"\S*\s+|\S+")


def chunks(body: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A chat.completion body as the chunks a server streams it in: the role first (with empty
    content, as OpenAI sends it), then each reasoning field, the refusal and the content a word
    at a time, then the finish reason, then the usage on a chunk of its own when asked for."""
    head = {key: body[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    [choice] = body["choices"]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        said = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return {**head, "choices": [said]}

    found = [chunk({"role": "assistant", "content": ""})]
    for name in ("reasoning_content", "reasoning", "refusal", "content"):
        found += [chunk({name: piece}) for piece in _PIECE.findall(message.get(name) or "")]
    found.append(chunk({}, choice["finish_reason"]))
    if include_usage and body.get("usage"):
        found.append({**head, "choices": [], "usage": body["usage"]})
    return found


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/v1/models" or fake.models is None:
                self._send(Planned(status=404, body=error_body("not found")))
            elif fake.models_status is not None:
                self._send(Planned(status=fake.models_status, body=error_body("down")))
            elif fake.models_body is not None:
                self._send(Planned(body=fake.models_body))
            else:
                data = [{"id": name, "object": "model", "owned_by": "me"} for name in fake.models]
                self._send(Planned(body={"object": "list", "data": data}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            headers = {name.lower(): value for name, value in self.headers.items()}
            seen = Seen(self.path, headers, body)
            fake.seen.append(seen)
            if self.path != "/v1/chat/completions":  # as a server does where nothing is served
                self._send(Planned(status=404, body=error_body("not found")))
                return
            planned = fake.next_response(seen)
            if planned.drop:
                self.close_connection = True
                return
            if body.get("stream") and planned.streams and planned.status == 200:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._stream(planned, usage)
                return
            if planned.sleep:
                time.sleep(planned.sleep)
            self._send(planned)

        def _stream(self, planned: Planned, include_usage: bool) -> None:
            """Server-sent events; HTTP/1.0, so the body ends when the connection closes."""
            try:
                self.send_response(200)
                for name, value in planned.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                time.sleep(planned.sleep)
                for sent, chunk in enumerate(chunks(planned.body or {}, include_usage)):
                    if sent and planned.gap:
                        time.sleep(planned.gap)
                    if planned.pause and sent == planned.pause[0]:
                        time.sleep(planned.pause[1])
                    if planned.error_after and sent == planned.error_after[0]:
                        error = json.dumps(error_body(planned.error_after[1])).encode()
                        self.wfile.write(b"data: " + error + b"\n\n")
                        return
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    if planned.cut and planned.cut(sent + 1):
                        break
                self.wfile.write(b"data: [DONE]\n\n")
            except OSError:
                pass  # the client cut the call (a stall test)

        def _send(self, planned: Planned) -> None:
            payload = json.dumps(planned.body or {}).encode()
            try:
                self.send_response(planned.status)
                for name, value in planned.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    return Handler


@contextmanager
def serve() -> Iterator[FakeOpenAI]:
    """A FakeOpenAI listening on 127.0.0.1 (a free port) until the block ends."""
    fake = FakeOpenAI()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.block_on_close = False
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
