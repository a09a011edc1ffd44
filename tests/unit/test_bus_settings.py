"""Bus settings come from the environment, fail clearly, and never show credentials."""

from __future__ import annotations

import pytest

from aeonloop.bus.settings import BusSettings, redact
from aeonloop.settings import SettingsError, bare_url, bare_urls


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@host:6379/0", "redis://***@host:6379/0"),
        ("rediss://user:s3cret@host/0", "rediss://***@host/0"),
        ("redis://host/0?password=s3cret&db=1", "redis://host/0?password=***&db=1"),
        ("redis://host:6379/0", "redis://host:6379/0"),
    ],
)
def test_redact_hides_credentials(url: str, shown: str) -> None:
    assert redact(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://alice:hunter2pw@127.0.0.1:7196/hook", "http://127.0.0.1:7196/hook"),
        ("https://alice@hooks.example.com/h?token=t#frag", "https://hooks.example.com/h"),
        ("https://mcp.example.com/mcp", "https://mcp.example.com/mcp"),
    ],
)
def test_a_bare_url_has_no_user_name_password_or_query(url: str, shown: str) -> None:
    """What a webhook's or an MCP server's URL is shown as (issue 35)."""
    assert bare_url(url) == shown
    said = bare_urls(f"Client error '401' for url '{url}': see it")
    assert said == f"Client error '401' for url '{shown}': see it"


def test_repr_never_shows_the_password() -> None:
    settings = BusSettings(redis_url="redis://:s3cret@host/0")
    assert "s3cret" not in repr(settings)


def test_from_env_reads_typed_values(read_env) -> None:
    settings = read_env(
        BusSettings,
        {"AEON_REDIS_URL": "redis://h/0", "AEON_CONCURRENCY": "7", "AEON_RETRY_BACKOFF_S": "0.5"},
    )
    assert (settings.redis_url, settings.concurrency, settings.retry_backoff_s) == (
        "redis://h/0",
        7,
        0.5,
    )


def test_from_env_names_the_bad_variable(read_env) -> None:
    with pytest.raises(SettingsError, match="AEON_MAX_RECORDS='many': must be a whole number"):
        read_env(BusSettings, {"AEON_MAX_RECORDS": "many"})


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        BusSettings(concurrency=0)
    with pytest.raises(ValueError, match="prefix"):
        BusSettings(prefix="a b")


def test_constructing_takes_only_what_is_passed(monkeypatch) -> None:
    monkeypatch.setenv("AEON_CONCURRENCY", "3")

    assert BusSettings().concurrency == 256
    assert BusSettings.from_env().concurrency == 3


def test_each_shard_gets_its_share_of_the_slots_and_at_least_one() -> None:
    from aeonloop.bus.consumer import shares

    assert shares(256, 1) == [256]
    assert shares(4, 3) == [2, 1, 1]
    assert shares(256, 3) == [86, 85, 85]
    assert shares(2, 3) == [1, 1, 1]  # fewer slots than shards: one each
