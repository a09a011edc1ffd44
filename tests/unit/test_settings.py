"""The settings layer as a newcomer meets it (issue 41, finding 8): a typo is warned about, a
former name still works and says the new one, a bad value is shown unless it is a secret, and
a base URL without its scheme is a bad setting (exit 2), not a server that does not answer."""

from __future__ import annotations

import pytest

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.cli.main import SETTINGS, main
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.limits import LoopSettings
from aeonloop.llm.factory import LLMSettings
from aeonloop.settings import SettingsError, notices, variables
from aeonloop.webhooks.policy import WebhookSettings


def test_a_typo_is_warned_about_naming_the_closest_variable() -> None:
    lines = notices({"AEON_MAX_PASS": "3", "AEON_LLM_MODLE": "x", "PATH": "/bin"}, SETTINGS)
    assert lines == [
        "AEON_LLM_MODLE is not a setting of Aeon's and is ignored: did you mean AEON_LLM_MODEL?",
        "AEON_MAX_PASS is not a setting of Aeon's and is ignored: did you mean AEON_MAX_PASSES?",
    ]


def test_a_variable_like_none_is_still_named_unknown() -> None:
    assert notices({"AEON_ZZZZZZZZZZZZZZZZ": "1"}, SETTINGS) == [
        "AEON_ZZZZZZZZZZZZZZZZ is not a setting of Aeon's and is ignored"
    ]


def test_every_known_and_every_other_tools_variable_is_left_alone() -> None:
    known = {name: "1" for name in variables(SETTINGS) if name not in _former_names()}
    others = {
        "AEON_TEST_REDIS_URL": "redis://h/0",
        "AEON_TEST_REAL_LLM": "required",
        "AEON_BENCH_REDIS_URL": "redis://h/0",
        "AEON_REDIS_SERVER_BIN": "/usr/bin/redis-server",
    }
    assert notices({**known, **others}, SETTINGS) == []


def _former_names() -> set[str]:
    return {name for name, new in variables(SETTINGS).items() if name != new}


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("AEON_ANSWER_TTL_S", "AEON_ANSWER_KEEP_S", "answer_ttl_s"),
        ("AEON_DEDUPE_TTL_S", "AEON_DEDUPE_KEEP_S", "dedupe_ttl_s"),
        ("AEON_MEMO_TTL_S", "AEON_MEMO_KEEP_S", "memo_ttl_s"),
    ],
)
def test_a_former_name_still_works_and_names_the_new_one(
    read_env, old: str, new: str, field: str
) -> None:
    assert getattr(read_env(BusSettings, {old: "3600"}), field) == 3600
    assert getattr(read_env(BusSettings, {new: "7200", old: "3600"}), field) == 7200
    assert BusSettings.variable(field) == new
    assert notices({old: "3600"}, SETTINGS) == [f"{old} is a former name: set {new} instead"]
    assert notices({new: "3600"}, SETTINGS) == []


def test_no_variable_of_redis_expiry_says_ttl() -> None:
    """TTL is a run's pass budget (`max_ttl`); how long Redis keeps something is `*_KEEP_S`."""
    current = {new for new in variables(SETTINGS).values()}
    assert [name for name in current if "TTL" in name] == []


@pytest.mark.parametrize(
    ("settings", "env", "shown"),
    [
        (LoopSettings, {"AEON_LLM_CONTEXT_TOKENS": "-1"}, "AEON_LLM_CONTEXT_TOKENS='-1': must be"),
        (LLMSettings, {"AEON_LLM_MAX_TOKENS": "0"}, "AEON_LLM_MAX_TOKENS='0': must be"),
        (LoopSettings, {"AEON_RUN_TOKEN_BUDGET": "lots"}, "AEON_RUN_TOKEN_BUDGET='lots': must"),
    ],
)
def test_a_bad_value_that_is_no_secret_is_shown(read_env, settings, env, shown) -> None:
    with pytest.raises(SettingsError) as error:
        read_env(settings, env)
    assert str(error.value).startswith(shown), str(error.value)


@pytest.mark.parametrize(
    ("settings", "env", "secret"),
    [
        (HttpSettings, {"AEON_HTTP_TOKENS": "short-hunter2"}, "short-hunter2"),
        (WebhookSettings, {"AEON_WEBHOOK_SECRET": "whsec_hunter22a"}, "hunter2"),
    ],
)
def test_a_bad_secret_is_masked(read_env, settings, env, secret) -> None:
    with pytest.raises(SettingsError) as error:
        read_env(settings, env)
    said = str(error.value)
    assert "='***'" in said and secret not in said, said


def test_the_secrets_are_the_key_the_tokens_and_the_webhook_secret() -> None:
    secrets = {
        cls.variable(field)
        for cls in SETTINGS
        for field in cls.model_fields
        if cls.is_secret(field)
    }
    assert secrets == {"AEON_LLM_API_KEY", "AEON_HTTP_TOKENS", "AEON_WEBHOOK_SECRET"}


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("localhost:8080/v1", "e.g. http://localhost:8080/v1"),
        ("127.0.0.1:8089/v1", "e.g. http://127.0.0.1:8089/v1"),
        ("ftp://host/v1", "must be an http:// or https:// URL"),
        ("http:///v1", "naming a host"),
    ],
)
def test_a_base_url_without_a_scheme_is_a_bad_setting(read_env, url: str, said: str) -> None:
    with pytest.raises(SettingsError, match=f"AEON_LLM_BASE_URL='{url}': .*{said}"):
        read_env(LLMSettings, {"AEON_LLM_BASE_URL": url})


def test_a_base_url_without_a_scheme_never_shows_its_password(read_env) -> None:
    with pytest.raises(SettingsError) as error:
        read_env(LLMSettings, {"AEON_LLM_BASE_URL": "me:hunter2@localhost:8080/v1"})
    assert "hunter2" not in str(error.value)


def test_aeon_version(capsys) -> None:
    from aeonloop import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"aeon {__version__}\n"
