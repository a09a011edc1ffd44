"""Issue 26's webhook proofs with real processes: `aeon worker`, `aeon serve`, `aeon ask` and
`aeon answer` on the session's Redis, and a real receiver on loopback in this process.

What became of a run's webhook (delivered, or failed after AEON_WEBHOOK_ATTEMPTS tries) is
seen wherever the run is: its status, its event stream (resumed, too), `aeon answer`. A worker
SIGKILLed while the receiver holds its POST open leaves the answer to another worker, which
sends it again with the same webhook-id and a valid signature; the run ends delivered, with
one answer. `aeon ask --webhook-url` names a webhook, and is refused, exit 2, when it may not.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from e2e_support import Bus, Processes, assert_answered_once, wait_until
from http_support import Server
from standardwebhooks import Webhook

pytestmark = pytest.mark.e2e

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ATTEMPTS = 3


@dataclass
class Hook:
    """What one path of the receiver does: fail its first `failures` tries with 500; with
    `hold`, keep the first try open until `release` is set."""

    failures: int = 0
    hold: bool = False
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
                if hook.hold and len(hook.tries) == 1:
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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def _hooked(env: dict[str, str], receiver: Receiver) -> dict[str, str]:
    return {
        **env,
        "AEON_WEBHOOK_SECRET": SECRET,
        "AEON_WEBHOOK_ALLOWED_HOSTS": receiver.origin,
        "AEON_WEBHOOK_ATTEMPTS": str(ATTEMPTS),
        "AEON_WEBHOOK_BACKOFF_S": "0.05",
    }


def _settled(server: Server, cid: str) -> dict:
    def done() -> dict | None:
        reply = server.get(f"/v1/runs/{cid}")
        webhook = reply.body.get("webhook") if reply.status == 200 else None
        return webhook if webhook and webhook["outcome"] != "pending" else None

    return wait_until(done, 60, f"the webhook outcome of {cid}")


def test_delivered_and_failed_are_seen_in_the_status_the_stream_and_aeon_answer(
    procs: Processes, env: dict[str, str], bus: Bus, receiver: Receiver
) -> None:
    hooked = _hooked(env, receiver)
    procs.worker(hooked)
    server = Server(procs, hooked)
    flaky = server.submit(webhook_url=receiver.hook("/flaky", failures=ATTEMPTS - 1))
    down = server.submit(webhook_url=receiver.hook("/down", failures=100))

    stream = server.events(flaky)
    assert stream.ended and stream.kinds[-2:] == ["answer", "webhook_delivered"], stream.kinds
    assert stream.events[-1].data["tries"] == ATTEMPTS
    ids = {headers["webhook-id"] for headers, _ in receiver.hooks["/flaky"].tries}
    assert ids == {stream.events[-1].data["webhook_id"]}
    assert len(receiver.hooks["/flaky"].tries) == ATTEMPTS

    failed = server.events(down)
    assert failed.kinds[-2:] == ["answer", "webhook_failed"], failed.kinds
    assert failed.events[-1].data["tries"] == ATTEMPTS
    assert "answered 500" in failed.events[-1].data["reason"]
    assert len(receiver.hooks["/down"].tries) == ATTEMPTS
    dead = [row for row in bus.dead_letters() if row["cid"] == down]
    assert len(dead) == 1, dead

    shown = _settled(server, flaky)
    assert (shown["outcome"], shown["tries"]) == ("delivered", ATTEMPTS)
    assert _settled(server, down)["outcome"] == "failed"

    # Resumed after the answer: only the outcome; after the outcome: nothing more (204).
    answer_id = stream.events[-2].id
    resumed = server.events(flaky, last_event_id=answer_id)
    assert [e.kind for e in resumed.events] == ["webhook_delivered"]
    assert server.events(flaky, last_event_id=stream.events[-1].id).status == 204

    said = procs.run_aeon(hooked, "answer", flaky, timeout=30)
    assert said.returncode == 0, said.tail()
    assert f"webhook delivered after {ATTEMPTS} tries" in said.stderr
    said = procs.run_aeon(hooked, "answer", down, "--json", timeout=30)
    assert '"outcome": "failed"' in said.stdout
    assert_answered_once(bus, [flaky, down])


def test_a_worker_sigkilled_mid_delivery_leaves_it_to_another_same_webhook_id(
    procs: Processes, env: dict[str, str], bus: Bus, receiver: Receiver
) -> None:
    hooked = _hooked(env, receiver)
    victim = procs.worker(hooked, name="victim")
    server = Server(procs, hooked)
    url = receiver.hook("/held", hold=True)
    cid = server.submit(webhook_url=url)
    hook = receiver.hooks["/held"]
    wait_until(hook.holding.is_set, 60, "the victim's POST, held open")
    victim.kill()
    procs.worker(hooked, name="rescuer")

    shown = _settled(server, cid)
    assert shown["outcome"] == "delivered"
    assert shown["tries"] == 2  # the victim's, cut short, and the rescuer's
    assert len(hook.tries) == 2
    ids = {headers["webhook-id"] for headers, _ in hook.tries}
    assert ids == {shown["webhook_id"]}
    for headers, body in hook.tries:
        assert Webhook(SECRET).verify(body, headers)["correlation_id"] == cid
    assert server.events(cid).kinds[-1] == "webhook_delivered"
    assert_answered_once(bus, [cid])


def test_aeon_ask_webhook_url_is_sent_and_refused_when_it_may_not_be(
    procs: Processes, env: dict[str, str], receiver: Receiver
) -> None:
    off = procs.run_aeon(env, "ask", "--webhook-url", "https://hooks.example.com/h", "Hi")
    assert off.returncode == 2, off.tail()
    assert off.stderr.strip().splitlines() == [
        "aeon: --webhook-url: webhooks are off here: set AEON_WEBHOOK_SECRET and "
        "AEON_WEBHOOK_ALLOWED_HOSTS where Aeon runs, or leave webhook_url out"
    ]
    hooked = _hooked(env, receiver)
    refused = procs.run_aeon(hooked, "ask", "--webhook-url", "http://127.0.0.1:1/h", "Hi")
    assert refused.returncode == 2, refused.tail()
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aeon: --webhook-url: only https"), lines

    procs.worker(hooked)
    url = receiver.hook("/asked")
    asked = procs.run_aeon(hooked, "ask", "--webhook-url", url, "--json", "Explain tides")
    assert asked.returncode == 0, asked.tail()
    cid = json.loads(asked.stdout)["correlation_id"]
    tries = wait_until(lambda: receiver.hooks["/asked"].tries, 30, "the webhook of aeon ask")
    headers, body = tries[0]
    assert Webhook(SECRET).verify(body, headers)["correlation_id"] == cid
