"""`aeon ask` against a stand-in LLM server that is away in ways a probe can be fooled by.

Issue 41, finding 1: a stand-in whose model list answers while every chat call returns 500 got
246 chat POSTs and 58 model probes from one `aeon ask --timeout 60`, the gate closing and
opening each second. The gate now backs off on failed calls (llm.outage): the run's first call
sends its 4 attempts, then one-token probes go at 0.5, 1.5, 3.5, 7.5 and 15.5 s after the gate
closes. Two calls of the run may find the server away at once (the profile and the checks'
preparation, sent together), so in 20 s the stand-in gets at most 2 x 4 attempts and 5 probes:
13 chat POSTs (10 were seen), where the old gate sent about 90. In 60 s the bound is 8
attempts and 6 probes, and never more than AEON_LLM_OUTAGE_CALLS_PER_MINUTE (20) a minute
after the gate first closes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from e2e_support import Processes, child_env
from openai_fake import FakeOpenAI, Planned, error_body, serve

pytestmark = pytest.mark.e2e

#: The run's deadline, in seconds.
TIMEOUT_S = 20
#: Chat POSTs the stand-in may see in that time (the arithmetic above).
BOUND = 2 * 4 + 5


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with serve() as fake:
        fake.models = ["stand-in"]
        yield fake


@pytest.mark.timeout(90)
def test_a_server_listing_models_but_failing_every_chat_call_is_not_hammered(
    procs: Processes, server: FakeOpenAI
) -> None:
    server.responder = lambda seen: Planned(status=500, body=error_body("boom"))
    env = child_env(
        fast=False,
        AEON_LLM="openai",
        AEON_LLM_BASE_URL=server.base_url,
        AEON_LLM_MODEL="stand-in",
        AEON_LLM_TIMEOUT="10",
    )
    run = procs.run_aeon(
        env, "ask", "--json", "--timeout", str(TIMEOUT_S), "Explain tides", timeout=70
    )

    assert "Traceback" not in run.stderr, run.tail()
    result = json.loads(run.stdout)  # answered once: one result, at its deadline
    assert result["status"] == "deadline_exceeded", run.tail()
    chat = [seen for seen in server.seen if seen.path == "/v1/chat/completions"]
    assert len(chat) <= BOUND, len(chat)
    said = [line for line in run.stderr.splitlines() if "cannot be reached (" in line]
    assert len(said) == 1, said
