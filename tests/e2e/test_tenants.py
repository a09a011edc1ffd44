"""Issue 42's tenants, end to end: one `aeon worker` and two `aeon serve` processes on one
Redis, with named tokens, a daily token quota and a price table.

A tenant past its daily tokens is refused 429 with Retry-After and one line naming the quota,
at `POST /v1/runs` and, through the official `openai` client, at `POST /v1/chat/completions`
(its RateLimitError) on either server, whichever one ran its earlier run; another tenant's
request is answered; each tenant's cost is its runs' tokens times the price table, in
`GET /v1/usage` and `aeon usage`. A run in flight on one server holds its tenant's slot on the
other (AEON_TENANT_MAX_RUNS) until its answer is settled.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from e2e_support import Processes, child_env, wait_until
from http_support import Reply, Server, _delete_prefix
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

ALICE = "alice-token-" + "a" * 24
BOB = "bob-token-" + "b" * 24
#: Prices per million tokens of the offline model (the adapter's kind names it: no
#: AEON_LLM_MODEL is set).
PRICE = {"input": 3.0, "cached_input": 1.5, "output": 12.0}
REQUEST = "Explain tides, then summarise them for a child"


@dataclass
class Deployment:
    servers: tuple[Server, Server]
    procs: Processes
    env: dict[str, str]

    def post_run(self, server: Server, token: str, wait: int = 0) -> Reply:
        query = f"?wait={wait}" if wait else ""
        return server.post(f"/v1/runs{query}", {"request": REQUEST}, headers=_bearer(token))

    def usage(self, server: Server, token: str) -> dict[str, Any]:
        reply = server.get("/v1/usage", headers=_bearer(token))
        assert reply.status == 200, reply
        return reply.body

    def chat(self, server: Server, token: str) -> openai.OpenAI:
        base_url = f"http://{server.host}:{server.port}/v1"
        return openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=90)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextlib.contextmanager
def _deployed(redis_url: str, logs: Path, **settings: str) -> Iterator[Deployment]:
    """One worker and two `aeon serve` on one Redis, under a prefix of their own."""
    prefix = "t" + uuid.uuid4().hex[:8]
    procs = Processes(logs)
    env = child_env(
        redis_url,
        prefix,
        AEON_HTTP_TOKENS=f"alice:{ALICE},bob:{BOB}",
        AEON_PRICES=json.dumps({"offline": PRICE}),
        **settings,
    )
    try:
        procs.worker(env)
        servers = (Server(procs, env, "serve-1"), Server(procs, env, "serve-2"))
        yield Deployment(servers, procs, env)
    except BaseException:
        print(procs.report())
        raise
    finally:
        procs.kill_all()
        _delete_prefix(redis_url, prefix)


@pytest.fixture(scope="module")
def deployment(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    # One token: a tenant's first run is admitted, and once it is answered, no more today.
    with _deployed(
        redis_url, tmp_path_factory.mktemp("tenants-logs"), AEON_TENANT_DAILY_TOKENS="1"
    ) as deployed:
        yield deployed


def _charged(deployment: Deployment, token: str, runs: int) -> dict[str, Any]:
    """The tenant's one model row once `runs` of its runs are charged, read on server 2."""

    def settled() -> dict[str, Any] | None:
        (tenant,) = deployment.usage(deployment.servers[1], token)["tenants"] or [None]
        return tenant["models"][0] if tenant and tenant["models"][0]["runs"] == runs else None

    return wait_until(settled, 30, f"{runs} run(s) charged")


def _cost(usage: dict[str, Any]) -> float:
    return (
        usage["prompt_tokens"] * PRICE["input"] + usage["completion_tokens"] * PRICE["output"]
    ) / 1e6


def test_a_tenant_past_its_daily_tokens_is_refused_on_every_server_and_others_are_not(
    deployment: Deployment,
) -> None:
    first, second = deployment.servers
    answered = deployment.post_run(first, ALICE, wait=60)
    assert answered.status == 200, answered
    usage = answered.body["result"]["usage"]
    assert usage["cost"] == pytest.approx(_cost(usage))  # the run's own, by the price table
    row = _charged(deployment, ALICE, 1)
    tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    assert row["total_tokens"] == tokens
    assert row["total_cost"] == pytest.approx(_cost(usage))

    # The other server holds alice to the quota her run on the first spent.
    refused = deployment.post_run(second, ALICE)
    assert refused.status == 429, refused
    assert 0 < int(refused.header("Retry-After") or 0) <= 86_400
    assert refused.body == {
        "error": "rate_limited",
        "field": "AEON_TENANT_DAILY_TOKENS",
        "reason": f"tenant alice has spent {tokens} tokens today (UTC), its quota is 1 "
        "(AEON_TENANT_DAILY_TOKENS); it renews at midnight UTC",
    }
    print("POST /v1/runs past the quota:", refused.status, refused.headers, refused.body)
    # A fork that would call the LLM (its rules changed) is admitted as a run is: refused too.
    parent = answered.body["correlation_id"]
    forked = second.post(f"/v1/runs/{parent}/fork", {"rules": []}, headers=_bearer(ALICE))
    assert (forked.status, forked.body["field"]) == (429, "AEON_TENANT_DAILY_TOKENS"), forked

    with pytest.raises(openai.RateLimitError) as limited:
        deployment.chat(first, ALICE).chat.completions.create(
            model="aeon", messages=[{"role": "user", "content": REQUEST}]
        )
    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"]
    assert limited.value.body["param"] == "AEON_TENANT_DAILY_TOKENS"
    assert "tenant alice has spent" in limited.value.body["message"]
    print("chat past the quota:", limited.value.response.text)

    # Bob is another tenant: answered, on the chat endpoint of the second server.
    completion = deployment.chat(second, BOB).chat.completions.create(
        model="aeon", messages=[{"role": "user", "content": REQUEST}]
    )
    assert completion.choices[0].message.content
    bob = _charged(deployment, BOB, 1)
    assert completion.usage is not None
    assert bob["total_tokens"] == completion.usage.total_tokens
    bob_usage = {
        "prompt_tokens": completion.usage.prompt_tokens,
        "completion_tokens": completion.usage.completion_tokens,
    }
    assert bob["total_cost"] == pytest.approx(_cost(bob_usage))

    # A token sees its own tenant's totals only.
    seen = deployment.usage(first, BOB)["tenants"]
    assert [tenant["tenant"] for tenant in seen] == ["bob"]


def test_aeon_usage_prints_every_tenants_totals(deployment: Deployment, tmp_path: Path) -> None:
    _charged(deployment, ALICE, 1)
    _charged(deployment, BOB, 1)
    shown = deployment.procs.run_aeon(deployment.env, "usage", name="usage")
    assert shown.returncode == 0, shown.tail()
    print(shown.stdout)
    lines = shown.stdout.splitlines()
    assert lines[1].split() == [
        "tenant",
        "model",
        "runs",
        "input",
        "cached",
        "output",
        "tokens",
        "cost",
    ]
    assert [line.split()[:3] for line in lines[2:4]] == [
        ["alice", "offline", "1"],
        ["bob", "offline", "1"],
    ]
    assert lines[4].split()[:2] == ["total", "2"]
    as_json = deployment.procs.run_aeon(deployment.env, "usage", "--json", name="usage-json")
    report = json.loads(as_json.stdout)
    total = sum(row["total_cost"] for t in report["tenants"] for row in t["models"])
    assert float(lines[4].split()[-1]) == pytest.approx(total, abs=1e-6)


def test_runs_in_flight_are_held_to_the_quota_over_both_servers(
    redis_url: str, tmp_path: Path
) -> None:
    """AEON_TENANT_MAX_RUNS=1: alice's run on one server holds her slot on the other until it
    is answered; bob's is admitted meanwhile."""
    with _deployed(
        redis_url, tmp_path, AEON_TENANT_MAX_RUNS="1", AEON_LLM_DELAY_MS="150"
    ) as deployed:
        first, second = deployed.servers
        running = deployed.post_run(first, ALICE)
        assert running.status == 202, running
        refused = deployed.post_run(second, ALICE)
        assert refused.status == 429, refused
        assert refused.header("Retry-After") == "2"
        assert refused.body["field"] == "AEON_TENANT_MAX_RUNS"
        assert refused.body["reason"].startswith(
            "tenant alice has 1 runs in flight, its quota is 1"
        )
        assert deployed.post_run(second, BOB).status == 202
        cid = running.body["correlation_id"]

        def answered() -> bool:
            return first.get(f"/v1/runs/{cid}", headers=_bearer(ALICE)).status == 200

        wait_until(answered, 60, "alice's run answered")
        # Her slot comes back once the answer is settled, on whichever server asks.
        admitted = wait_until(
            lambda: (reply := deployed.post_run(second, ALICE)).status == 202 and reply,
            15,
            "alice admitted again",
        )
        assert admitted.body["correlation_id"] != cid


def test_the_metrics_of_both_servers_add_up_to_the_ledger(deployment: Deployment) -> None:
    """aeon_llm_tenant_tokens_total and aeon_llm_cost_total, each run counted by the server
    that settled it: over both servers, each tenant's equal its totals in the ledger."""
    rows = {t: _charged(deployment, token, 1) for t, token in (("alice", ALICE), ("bob", BOB))}
    samples = [
        sample
        for server in deployment.servers
        for family in text_string_to_metric_families(server.get("/metrics").body)
        for sample in family.samples
    ]

    def summed(name: str, tenant: str) -> float:
        return sum(s.value for s in samples if s.name == name and s.labels.get("tenant") == tenant)

    for tenant, row in rows.items():
        assert summed("aeon_llm_tenant_tokens_total", tenant) == row["total_tokens"]
        assert summed("aeon_llm_cost_total", tenant) == pytest.approx(row["total_cost"])
    kinds = {s.labels["kind"] for s in samples if s.name == "aeon_llm_cost_total"}
    assert kinds == {"input", "cached_input", "output"}
