"""The test harness users' tests start in one line (aeonloop.testing, docs/testing.md).

It runs the real pipeline: a real Redis (its own, or one it is given), the workers of every
phase and a client. What it promises beyond that is what these tests hold: it leaves nothing
behind (no redis-server process, no data directory, no key under its prefix on a server it
was given, no thread), it keeps the keys of a prefix the test owns, its synchronous form
answers too, and the complete example of docs/testing.md passes as a user would run it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from aeonloop import AeonTestStack, ScriptedLLM, UsageError
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import LLMError
from aeonloop.prompts.registry import PromptId

DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def redis_children() -> set[int]:
    """The redis-server processes this test process started (the session's Redis among them,
    when it is an embedded one)."""
    found = subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "redis-server"], capture_output=True, text=True
    ).stdout.split()
    return {int(pid) for pid in found}


def keys_under(url: str, prefix: str) -> list[bytes]:
    with redis.Redis.from_url(url) as client:
        return list(client.scan_iter(match=f"{prefix}:*", count=1000))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_private_stack_answers_and_leaves_no_process_no_files() -> None:
    before = redis_children()
    async with AeonTestStack() as stack:
        (server,) = redis_children() - before
        workdir = os.readlink(f"/proc/{server}/cwd")
        result = await stack.client.ask("Explain tides", timeout=60)
        url = stack.settings.redis_url
    assert result.status == "converged" and not result.degraded
    assert "Explain tides" in result.final_answer.answer_text
    assert workdir.endswith("(deleted)"), "the private server's directory outlives its start"
    assert redis_children() == before, "the private redis-server outlives the stack"
    with pytest.raises(redis.ConnectionError), redis.Redis.from_url(url) as gone:
        gone.ping()


async def test_on_a_server_it_is_given_it_takes_a_prefix_and_clears_it(redis_url: str) -> None:
    llm = ScriptedLLM({PromptId.ANSWER_SYNTHESIS_USER: LLMError("no answer today")})
    async with AeonTestStack(llm, redis_url=redis_url) as stack:
        prefix = stack.settings.prefix
        result = await stack.client.ask("Explain tides, then their causes", timeout=60)
        assert keys_under(redis_url, prefix), "the run wrote nothing under the stack's prefix"
    assert prefix.startswith("aeontest-")
    assert result.degraded and result.final_answer.answer_text
    assert llm.calls.count(PromptId.ANSWER_SYNTHESIS_USER) >= 1
    assert keys_under(redis_url, prefix) == []


async def test_a_prefix_the_test_owns_keeps_its_keys(settings: BusSettings) -> None:
    async with AeonTestStack(settings=settings) as stack:
        cid = await stack.client.submit("Explain tides", timeout=60)
        await stack.client.wait(cid, 60)
    assert stack.settings is settings
    kept = [key.decode() for key in keys_under(settings.redis_url, settings.prefix)]
    assert any(key.endswith(f":answer:{cid}") for key in kept), kept


def test_the_synchronous_form_answers_and_stops_its_thread() -> None:
    llm = ScriptedLLM({PromptId.REASONING_STEP_USER: "The Moon pulls the sea."})
    with pytest.raises(UsageError, match="not running"):
        _ = AeonTestStack(llm).client
    with AeonTestStack(llm) as stack:
        result = stack.run(stack.client.ask("Explain tides, then their causes", timeout=60))
        assert any(t.name == "aeon-test-stack" for t in threading.enumerate())
    assert "The Moon pulls the sea." in result.final_answer.answer_text
    assert not any(t.name == "aeon-test-stack" for t in threading.enumerate())


async def test_misuse_is_one_clear_error(redis_url: str, settings: BusSettings) -> None:
    with pytest.raises(UsageError, match="redis_url or settings, not both"):
        AeonTestStack(redis_url=redis_url, settings=settings)
    async with AeonTestStack(settings=settings) as stack:
        with pytest.raises(UsageError, match="run\\(\\) is for a stack started with `with`"):
            stack.run(stack.client.fetch("none"))


def test_the_example_in_the_docs_passes_as_a_user_runs_it(tmp_path: Path) -> None:
    """docs/testing.md's complete example, saved as a file of its own and run by pytest in a
    folder with no configuration (pytest-asyncio's strict mode, as in a fresh project)."""
    page = DOCS.read_text(encoding="utf-8")
    section = page.split("## A complete example", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (tmp_path / "test_tides.py").write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tides.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout


async def test_a_stack_can_be_started_again() -> None:
    stack = AeonTestStack()
    for _ in range(2):
        async with stack:
            result = await stack.client.ask("Explain tides", timeout=60)
        assert result.status == "converged"
