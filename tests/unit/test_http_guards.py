"""The HTTP settings (AEON_HTTP_*) and the API's rate limit, without a server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from aeonloop.gateway.http import guards
from aeonloop.gateway.http.guards import RateLimiter
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.settings import SettingsError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_client_gets_its_burst_then_waits_for_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(per_s=2, burst=3, clock=clock)
    assert [limiter.wait_s("a") for _ in range(3)] == [0, 0, 0]
    assert limiter.wait_s("a") == pytest.approx(0.5)
    assert limiter.wait_s("b") == 0  # another client has its own bucket
    clock.now += 0.5
    assert limiter.wait_s("a") == 0
    clock.now += 10
    assert [limiter.wait_s("a") for _ in range(3)] == [0, 0, 0]  # never more than the burst
    assert limiter.wait_s("a") > 0


def test_idle_clients_are_forgotten_when_there_are_many(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guards, "MAX_CLIENTS", 3)
    clock = Clock()
    limiter = RateLimiter(per_s=1, burst=2, clock=clock)
    for client in ("a", "b", "c"):
        limiter.wait_s(client)
    clock.now += 5  # a, b and c are full again
    limiter.wait_s("d")
    limiter.wait_s("e")
    assert set(limiter._buckets) <= {"d", "e"}


def test_http_settings_read_lists_and_keep_tokens_out_of_sight(
    read_env: Callable[[type, dict[str, str]], Any],
) -> None:
    token = "f" * 32
    settings = read_env(
        HttpSettings,
        {"AEON_HTTP_TOKENS": f" {token} , {'e' * 16},", "AEON_HTTP_CORS_ORIGINS": "https://a.b/"},
    )
    assert settings.http_tokens == (token, "e" * 16)
    assert settings.http_cors_origins == ("https://a.b",)
    assert token not in repr(settings) and token not in str(settings)
    defaults = read_env(HttpSettings, {})
    assert (defaults.http_host, defaults.http_port, defaults.http_tokens) == ("127.0.0.1", 8080, ())


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"AEON_HTTP_TOKENS": "secret-but-short"[:10]}, "AEON_HTTP_TOKENS='***': 1 token(s)"),
        ({"AEON_HTTP_PORT": "65536"}, "AEON_HTTP_PORT='65536': must be at most 65535"),
        ({"AEON_HTTP_MAX_BODY_BYTES": "10"}, "AEON_HTTP_MAX_BODY_BYTES='10': must be at least"),
        ({"AEON_HTTP_RATE_BURST": "0"}, "AEON_HTTP_RATE_BURST='0': must be at least 1"),
        ({"AEON_HTTP_CORS_ORIGINS": "*,ftp://x"}, "'ftp://x' is not an origin"),
        ({"AEON_HTTP_ALLOWED_HOSTS": "a.*.com"}, "'a.*.com' is not a host name"),
        ({"AEON_HTTP_ALLOWED_HOSTS": "*example.com"}, "'*example.com' is not a host name"),
    ],
)
def test_bad_http_settings_name_the_variable(
    read_env: Callable[[type, dict[str, str]], Any], env: dict[str, str], said: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        read_env(HttpSettings, env)
    assert said in str(caught.value)
    assert "secret" not in str(caught.value)


def test_the_hosts_served_are_this_machines_the_listening_address_and_those_allowed(
    read_env: Callable[[type, dict[str, str]], Any],
) -> None:
    defaults = read_env(HttpSettings, {})
    assert defaults.allowed_hosts() == ["localhost", "127.0.0.1", "[::1]"]
    named = read_env(
        HttpSettings,
        {"AEON_HTTP_HOST": "fd00::5", "AEON_HTTP_ALLOWED_HOSTS": "aeon.example.com, *.corp.x"},
    )
    assert named.allowed_hosts() == [
        "localhost",
        "127.0.0.1",
        "[::1]",
        "[fd00::5]",  # as a Host header writes an IPv6 address
        "aeon.example.com",
        "*.corp.x",
    ]
    assert "*" in read_env(HttpSettings, {"AEON_HTTP_ALLOWED_HOSTS": "*"}).allowed_hosts()
    proxied = read_env(HttpSettings, {"AEON_HTTP_TRUSTED_PROXIES": "10.0.0.1, 10.0.0.2"})
    assert proxied.http_trusted_proxies == ("10.0.0.1", "10.0.0.2")
