"""Tenants' settings and gate without a server: named tokens (AEON_HTTP_TOKENS, its file), the guard
that puts a request's tenant in its state, and the price table (AEON_PRICES, its file), each
mistake one line naming the variable and never a token; and `GET /v1/usage`'s day."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from aeonloop.exceptions import ApiError
from aeonloop.gateway.http.guards import ApiGuard, TenantGate, tenant_of
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.settings import ANONYMOUS, Price, SettingsError, TenantSettings

ALICE = "a" * 32
BARE = "b" * 32

ReadEnv = Callable[[type, dict[str, str]], Any]


def test_tokens_are_named_and_a_bare_one_is_named_by_its_hash(
    read_env: ReadEnv, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# the team\nbob:{'c' * 20}   # bob's\n\n{'d' * 16}\n")
    settings = read_env(
        HttpSettings,
        {"AEON_HTTP_TOKENS": f"alice:{ALICE},{BARE}", "AEON_HTTP_TOKENS_FILE": str(tokens)},
    )
    named = settings.tenants()
    bare_name = "t-" + hashlib.sha256(BARE.encode()).hexdigest()[:12]
    assert named == {
        ALICE: "alice",
        BARE: bare_name,
        "c" * 20: "bob",
        "d" * 16: "t-" + hashlib.sha256(b"d" * 16).hexdigest()[:12],
    }
    assert BARE not in bare_name


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (f"carol:{'x' * 10}", "1 token(s) shorter than 16 characters"),
        (f"anonymous:{'x' * 20}", "anonymous is the tenant of an API with no tokens"),
    ],
)
def test_a_bad_token_in_the_file_is_one_line_without_it(
    read_env: ReadEnv, tmp_path: Path, line: str, said: str
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(line + "\n")
    settings = read_env(HttpSettings, {"AEON_HTTP_TOKENS_FILE": str(tokens)})
    with pytest.raises(SettingsError) as refused:
        settings.tenants()
    assert str(refused.value).startswith(f"AEON_HTTP_TOKENS_FILE={str(tokens)!r}: ")
    assert said in str(refused.value) and "x" * 10 not in str(refused.value)


def test_a_tokens_file_that_cannot_be_read_is_named(read_env: ReadEnv, tmp_path: Path) -> None:
    settings = read_env(HttpSettings, {"AEON_HTTP_TOKENS_FILE": str(tmp_path / "none")})
    with pytest.raises(SettingsError, match=r"AEON_HTTP_TOKENS_FILE=.*cannot read it"):
        settings.tenants()


def _tenant_app(settings: HttpSettings) -> TestClient:
    async def whose(request: Request) -> PlainTextResponse:
        return PlainTextResponse(tenant_of(request.scope))

    app = Starlette(routes=[Route("/v1/whose", whose)])
    return TestClient(ApiGuard(app, settings))


def test_the_guard_gives_each_request_its_tokens_tenant() -> None:
    client = _tenant_app(HttpSettings(http_tokens=(f"alice:{ALICE}", BARE), http_rate_per_s=0))
    assert client.get("/v1/whose", headers={"Authorization": f"Bearer {ALICE}"}).text == "alice"
    bare = client.get("/v1/whose", headers={"Authorization": f"Bearer {BARE}"}).text
    assert bare.startswith("t-") and BARE not in bare
    wrong = client.get("/v1/whose", headers={"Authorization": "Bearer alice"})
    assert wrong.status_code == 401
    assert _tenant_app(HttpSettings(http_rate_per_s=0)).get("/v1/whose").text == ANONYMOUS


def test_prices_come_from_the_file_with_the_variable_over_it(
    read_env: ReadEnv, tmp_path: Path
) -> None:
    table = tmp_path / "prices.json"
    table.write_text('{"m1": {"input": 1, "output": 2}, "m2": {"input": 3, "output": 4}}')
    settings = read_env(
        TenantSettings,
        {"AEON_PRICES_FILE": str(table), "AEON_PRICES": '{"m2": {"input": 5, "output": 6}}'},
    )
    assert settings.price_table() == {
        "m1": Price(input=1, output=2),
        "m2": Price(input=5, output=6),
    }


def test_a_price_file_that_is_not_a_table_is_one_line(read_env: ReadEnv, tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text('{"m1": {"input": -1, "output": 2}}')
    settings = read_env(TenantSettings, {"AEON_PRICES_FILE": str(table)})
    with pytest.raises(SettingsError) as refused:
        settings.price_table()
    said = str(refused.value)
    assert said.startswith(f"AEON_PRICES_FILE={str(table)!r}: m1.input: ") and "\n" not in said


def test_a_bad_quota_names_its_variable(read_env: ReadEnv) -> None:
    with pytest.raises(SettingsError, match="AEON_TENANT_MAX_RUNS='-1': must be at least 0"):
        read_env(TenantSettings, {"AEON_TENANT_MAX_RUNS": "-1"})


@pytest.mark.parametrize("day", ["2026-13-01", "yesterday", "2026-1-1", "2026-02-30"])
async def test_a_day_that_is_not_a_date_is_refused_naming_it(day: str) -> None:
    with pytest.raises(ApiError) as refused:
        await TenantGate().usage({"type": "http"}, day)
    assert (refused.value.status, refused.value.field) == (422, "day")
    assert "YYYY-MM-DD" in refused.value.reason


async def test_a_gate_without_a_ledger_says_so() -> None:
    with pytest.raises(ApiError) as refused:
        await TenantGate().usage({"type": "http"}, "2026-12-07")
    assert refused.value.status == 503
