"""Issue 14's load proof: one `aeon serve` process, a thousand event streams open at once on
one set of runs, and every reader counted: nothing missed, repeated or out of order.

Readers open their streams while the runs are going (each LLM call takes 200 ms), spread over
ten runs, with a few slow readers among them (a 2 KB receive window, reading a little at a
time, so the server's writes to them block). Each reader's steps are checked against the
run's steps as a fresh reader gets them once the run is over. No timing is asserted: the
figures (how late the answers arrive, with and without slow readers) are `python -m bench
--only sse`'s.
"""

from __future__ import annotations

import asyncio

import pytest
from e2e_support import Processes, wait_until
from http_support import Server

from aeonloop.gateway.http.serve import raise_open_files_limit
from bench.sse import count, read_events

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

RUNS = 10
READERS = 1000
SLOW_READERS = 5


async def test_a_thousand_readers_get_every_step_of_every_run(
    procs: Processes, env: dict[str, str]
) -> None:
    raise_open_files_limit()  # this test holds a thousand sockets itself
    slow_llm = {**env, "AEON_LLM_DELAY_MS": "200"}
    procs.worker(slow_llm)
    server = Server(procs, {**slow_llm, "AEON_HTTP_RATE_PER_S": "0"})
    cids = [server.submit(f"Explain tides, then summarise them ({i})") for i in range(RUNS)]
    watched = [cids[i % RUNS] for i in range(READERS)] + cids[:SLOW_READERS]

    readings = await asyncio.gather(
        *(read_events(server.host, server.port, cid) for cid in watched[:READERS]),
        *(read_events(server.host, server.port, cid, slow=True) for cid in watched[READERS:]),
    )
    truth = {cid: await read_events(server.host, server.port, cid) for cid in cids}
    counted = count(readings, watched, truth)

    assert counted["streams"] == READERS + SLOW_READERS
    assert counted["missed"] == counted["repeated"] == 0
    assert counted["out_of_order"] == counted["incomplete"] == 0
    assert counted["events_delivered"] == counted["events_expected"]
    assert all(len(truth[cid].keys) >= 5 for cid in cids)  # profile, plan, a pass, exit, answer
    print(f"\n{counted}")

    def all_let_go() -> bool:
        health = server.get("/healthz").body
        return health["open_event_streams"] == 0 and health["watched_runs"] == 0

    wait_until(all_let_go, 30, "every stream closed and every run let go")
