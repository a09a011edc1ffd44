"""`aeon ask` against a stand-in LLM server that is away in ways a probe can be fooled by, or
that fails one prompt's calls only.

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
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Processes, child_env
from openai_fake import FakeOpenAI, Planned, Seen, error_body, serve
from openai_styles import CASES, PipelineModel, read

from aeonloop.prompts.registry import PromptId

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


@pytest.mark.timeout(120)
def test_a_server_dropping_one_prompt_s_calls_fails_that_call_and_the_run_goes_on(
    procs: Processes, server: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 41, finding 9: a server that disconnects without a response on every call of one
    prompt (the checks' preparation here), while it answers the others, was taken for an
    outage: the gate opened and closed each second and the run waited for its deadline. That
    call fails, as a failed call does, and the run is answered long before its deadline."""
    model = PipelineModel(CASES["plain"])
    dropped: list[Seen] = []

    def dropping(seen: Seen) -> Planned:
        if seen.body.get("max_tokens") != 1 and read(seen)[0] is PromptId.CHECKS_PREPARE_USER:
            dropped.append(seen)
            return Planned(drop=True)
        return model(seen)

    server.responder = dropping
    env = child_env(
        fast=False,
        AEON_LLM="openai",
        AEON_LLM_BASE_URL=server.base_url,
        AEON_LLM_MODEL="stand-in",
        AEON_LLM_TIMEOUT="10",
    )
    started = time.monotonic()
    # A rule in words: PREPARE is asked for it (phases.spend.needs_prepare), and dropped.
    rules = tmp_path / "rules.json"
    # (one the host's own reader does not read: "under 200 words" it would check itself)
    rules.write_text(json.dumps([{"id": "plain", "check": "Keep it simple for a child."}]))
    argv = ["ask", "--json", "--timeout", "60", "--rules", str(rules), "Explain tides"]
    run = procs.run_aeon(env, *argv, timeout=90)
    took = time.monotonic() - started

    assert "Traceback" not in run.stderr, run.tail()
    result = json.loads(run.stdout)
    assert result["status"] != "deadline_exceeded", run.tail()
    assert took < 45, (took, run.tail())
    assert dropped  # the prompt was asked, and its calls dropped
