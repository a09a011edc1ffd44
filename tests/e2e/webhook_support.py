"""A webhook receiver on loopback for the end-to-end tests: each path fails, holds, or takes
what it is sent, and keeps every try (headers and body) to check with `standardwebhooks`."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Hook:
    """What one path of the receiver does: fail its first `failures` tries with 500; keep try
    number `hold` (1: the first; 0: none) open until `release` is set, answering nothing."""

    failures: int = 0
    hold: int = 0
    tries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class Receiver:
    """A webhook receiver on loopback: each path a Hook."""

    def __init__(self) -> None:
        self.hooks: dict[str, Hook] = {}
        hooks = self.hooks

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook = hooks[self.path]
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.tries.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if hook.hold and len(hook.tries) == hook.hold:
                    hook.holding.set()
                    hook.release.wait(60)
                    return  # its worker is gone: nobody reads an answer
                self.send_response(500 if len(hook.tries) <= hook.failures else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hook(self, path: str, **behaviour: object) -> str:
        self.hooks[path] = Hook(**behaviour)  # type: ignore[arg-type]
        return f"{self.origin}{path}"

    def close(self) -> None:
        for hook in self.hooks.values():
            hook.release.set()
        self.server.shutdown()


def hooked(env: dict[str, str], receiver: Receiver, attempts: int) -> dict[str, str]:
    """`env` with webhooks on, allowing `receiver`, tried `attempts` times, 50 ms apart."""
    return {
        **env,
        "AEON_WEBHOOK_SECRET": SECRET,
        "AEON_WEBHOOK_ALLOWED_HOSTS": receiver.origin,
        "AEON_WEBHOOK_ATTEMPTS": str(attempts),
        "AEON_WEBHOOK_BACKOFF_S": "0.05",
    }
