"""Issue 26's webhook proofs with real processes: `aeon worker`, `aeon serve`, `aeon ask` and
`aeon answer` on the session's Redis, and a real receiver on loopback in this process.

What became of a run's webhook (delivered, or failed after AEON_WEBHOOK_ATTEMPTS tries) is
seen wherever the run is: its status, its event stream (resumed, too), `aeon answer`. A worker
SIGKILLed while the receiver holds its POST open leaves the answer to another worker, which
sends it again with the same webhook-id and a valid signature; the run ends delivered, with
one answer. `aeon ask --webhook-url` names a webhook, and is refused, exit 2, when it may not.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator

import pytest
from e2e_support import Bus, Processes, assert_answered_once, wait_until
from http_support import Server
from standardwebhooks import Webhook
from webhook_support import SECRET, Receiver, hooked

pytestmark = pytest.mark.e2e

ATTEMPTS = 3


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def _settled(server: Server, cid: str) -> dict:
    def done() -> dict | None:
        reply = server.get(f"/v1/runs/{cid}")
        webhook = reply.body.get("webhook") if reply.status == 200 else None
        return webhook if webhook and webhook["outcome"] != "pending" else None

    return wait_until(done, 60, f"the webhook outcome of {cid}")


def test_delivered_and_failed_are_seen_in_the_status_the_stream_and_aeon_answer(
    procs: Processes, env: dict[str, str], bus: Bus, receiver: Receiver
) -> None:
    on = hooked(env, receiver, ATTEMPTS)
    procs.worker(on)
    server = Server(procs, on)
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

    said = procs.run_aeon(on, "answer", flaky, timeout=30)
    assert said.returncode == 0, said.tail()
    assert f"webhook delivered after {ATTEMPTS} tries" in said.stderr
    said = procs.run_aeon(on, "answer", down, "--json", timeout=30)
    assert '"outcome": "failed"' in said.stdout
    assert_answered_once(bus, [flaky, down])


def test_a_worker_sigkilled_mid_delivery_leaves_it_to_another_same_webhook_id(
    procs: Processes, env: dict[str, str], bus: Bus, receiver: Receiver
) -> None:
    on = hooked(env, receiver, ATTEMPTS)
    victim = procs.worker(on, name="victim")
    server = Server(procs, on)
    url = receiver.hook("/held", hold=1)
    cid = server.submit(webhook_url=url)
    hook = receiver.hooks["/held"]
    wait_until(hook.holding.is_set, 60, "the victim's POST, held open")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # A reader following the run while its webhook is pending gets the outcome live.
        live = pool.submit(server.events, cid)
        wait_until(lambda: server.get("/healthz").body["open_event_streams"], 30, "the reader")
        victim.kill()
        procs.worker(on, name="rescuer")
        followed = live.result(timeout=60)
    assert followed.kinds[-2:] == ["answer", "webhook_delivered"], followed.kinds

    shown = _settled(server, cid)
    assert shown["outcome"] == "delivered"
    assert shown["tries"] == 2  # the victim's, cut short, and the rescuer's
    assert len(hook.tries) == 2
    ids = {headers["webhook-id"] for headers, _ in hook.tries}
    assert ids == {shown["webhook_id"]}
    for headers, body in hook.tries:
        assert Webhook(SECRET).verify(body, headers)["correlation_id"] == cid
    assert_answered_once(bus, [cid])


def test_every_post_of_a_worker_killed_mid_delivery_is_counted_and_bounded(
    procs: Processes, env: dict[str, str], bus: Bus, receiver: Receiver
) -> None:
    """Issue 35: a worker killed after two POSTs of a webhook (a 500, then one held open) left
    an outcome of `tries=2` however many POSTs it had made, and its rescuer tried
    AEON_WEBHOOK_ATTEMPTS times more. Every POST is counted, and none is made past the bound."""
    on = hooked(env, receiver, ATTEMPTS)
    victim = procs.worker(on, name="victim")
    server = Server(procs, on)
    landed = server.submit(webhook_url=receiver.hook("/landed", failures=1, hold=2))
    spent = server.submit(webhook_url=receiver.hook("/spent", failures=100, hold=2))
    for path in ("/landed", "/spent"):
        wait_until(receiver.hooks[path].holding.is_set, 60, f"the victim's second POST to {path}")
    victim.kill()
    procs.worker(on, name="rescuer")

    shown = _settled(server, landed)
    assert (shown["outcome"], shown["tries"]) == ("delivered", 3)
    assert len(receiver.hooks["/landed"].tries) == 3

    shown = _settled(server, spent)
    assert (shown["outcome"], shown["tries"]) == ("failed", ATTEMPTS)
    assert len(receiver.hooks["/spent"].tries) == ATTEMPTS  # the rescuer made only the third
    assert f"all {ATTEMPTS} tries (AEON_WEBHOOK_ATTEMPTS) were made" in shown["reason"]
    dead = [row for row in bus.dead_letters() if row["cid"] == spent]
    assert len(dead) == 1, dead
    assert_answered_once(bus, [landed, spent])


def test_a_replayed_webhook_gets_its_tries_again(
    procs: Processes, env: dict[str, str], bus: Bus, receiver: Receiver
) -> None:
    """Its POSTs are counted against AEON_WEBHOOK_ATTEMPTS over every delivery; `aeon dlq
    replay` starts the count again, so a receiver fixed since is sent the answer."""
    on = hooked(env, receiver, ATTEMPTS)
    procs.worker(on)
    server = Server(procs, on)
    cid = server.submit(webhook_url=receiver.hook("/later", failures=ATTEMPTS))
    assert _settled(server, cid)["outcome"] == "failed"
    (dead,) = [row for row in bus.dead_letters() if row["cid"] == cid]
    replayed = procs.run_aeon(on, "dlq", "replay", dead["id"], timeout=30)
    assert replayed.returncode == 0, replayed.tail()

    def delivered() -> dict | None:
        webhook = server.get(f"/v1/runs/{cid}").body["webhook"]
        return webhook if webhook["outcome"] == "delivered" else None

    shown = wait_until(delivered, 60, "the replayed webhook delivered")
    assert shown["tries"] == 1
    assert len(receiver.hooks["/later"].tries) == ATTEMPTS + 1


def test_aeon_ask_webhook_url_is_sent_and_refused_when_it_may_not_be(
    procs: Processes, env: dict[str, str], receiver: Receiver
) -> None:
    off = procs.run_aeon(env, "ask", "--webhook-url", "https://hooks.example.com/h", "Hi")
    assert off.returncode == 2, off.tail()
    assert off.stderr.strip().splitlines() == [
        "aeon: --webhook-url: webhooks are off here: set AEON_WEBHOOK_SECRET and "
        "AEON_WEBHOOK_ALLOWED_HOSTS where Aeon runs, or leave webhook_url out"
    ]
    on = hooked(env, receiver, ATTEMPTS)
    refused = procs.run_aeon(on, "ask", "--webhook-url", "http://127.0.0.1:1/h", "Hi")
    assert refused.returncode == 2, refused.tail()
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aeon: --webhook-url: only https"), lines

    procs.worker(on)
    url = receiver.hook("/asked")
    asked = procs.run_aeon(on, "ask", "--webhook-url", url, "--json", "Explain tides")
    assert asked.returncode == 0, asked.tail()
    cid = json.loads(asked.stdout)["correlation_id"]
    tries = wait_until(lambda: receiver.hooks["/asked"].tries, 30, "the webhook of aeon ask")
    headers, body = tries[0]
    assert Webhook(SECRET).verify(body, headers)["correlation_id"] == cid


def test_a_webhook_url_with_a_password_is_refused_by_aeon_ask_and_the_http_api(
    procs: Processes, env: dict[str, str], receiver: Receiver
) -> None:
    """Issue 35: on an allowed origin, `user:password@` passed the check, the POST never
    reached the receiver, and the password was shown wherever the failure was. Every gateway
    refuses it (the Python client: tests/integration/test_webhooks.py), naming neither."""
    on = hooked(env, receiver, ATTEMPTS)
    url = receiver.hook("/pw").replace("://", "://alice:hunter2pw@")
    asked = procs.run_aeon(on, "ask", "--webhook-url", url, "Explain tides")
    assert asked.returncode == 2, asked.tail()
    lines = asked.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("aeon: --webhook-url: a webhook URL may not carry a user name")
    assert "hunter2pw" not in asked.stderr + asked.stdout

    server = Server(procs, on)
    reply = server.post("/v1/runs", {"request": "Explain tides", "webhook_url": url})
    assert reply.status == 422, reply
    assert (reply.body["error"], reply.body["field"]) == ("bad_input", "webhook_url")
    assert "may not carry a user name or password" in reply.body["reason"]
    assert "hunter2pw" not in str(reply.body)
    assert receiver.hooks["/pw"].tries == []
