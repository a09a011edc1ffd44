"""LLMSettings from the environment and build_adapter: defaults, clear errors, a secret key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aeonloop.llm.factory import LLMSettings, build_adapter
from aeonloop.llm.offline import OfflineLLM
from aeonloop.llm.openai_adapter import OpenAIAdapter
from aeonloop.llm.scripted import ScriptedLLM
from aeonloop.settings import SettingsError

SECRET = "sk-factory-secret-42"


def test_the_default_is_offline_with_no_delay(read_env):
    settings = read_env(LLMSettings, {})

    adapter = build_adapter(settings)

    assert settings.kind == "offline"
    assert (settings.timeout, settings.max_retries, settings.delay_ms) == (60.0, 3, 0.0)
    assert (settings.prompt_s_per_1k, settings.idle_timeout) == (30.0, 30.0)
    assert settings.reply_s_per_1k == 120.0
    assert isinstance(adapter, OfflineLLM) and adapter.delay == 0.0


def test_every_variable_is_read(read_env):
    env = {
        "AEON_LLM": " OpenAI ",
        "AEON_LLM_BASE_URL": "http://127.0.0.1:11434/v1",
        "AEON_LLM_MODEL": "llama3.1",
        "AEON_LLM_API_KEY": SECRET,
        "AEON_LLM_TIMEOUT": "2.5",
        "AEON_LLM_FIRST_TOKEN_PER_1K_S": "0",
        "AEON_LLM_IDLE_TIMEOUT": "7.5",
        "AEON_LLM_WHOLE_REPLY_PER_1K_S": "45",
        "AEON_LLM_MAX_RETRIES": "0",
        "AEON_LLM_DELAY_MS": "15",
        "AEON_LLM_SCRIPT": "/tmp/script.json",
    }

    settings = read_env(LLMSettings, env)

    assert settings.kind == "openai"
    assert settings.base_url == "http://127.0.0.1:11434/v1" and settings.model == "llama3.1"
    assert settings.api_key is not None and settings.api_key.get_secret_value() == SECRET
    assert (settings.timeout, settings.max_retries, settings.delay_ms) == (2.5, 0, 15.0)
    assert (settings.prompt_s_per_1k, settings.idle_timeout) == (0.0, 7.5)
    assert settings.reply_s_per_1k == 45.0
    assert settings.script == Path("/tmp/script.json")


def test_the_key_falls_back_to_openai_api_key(read_env):
    settings = read_env(LLMSettings, {"OPENAI_API_KEY": SECRET})
    preferred = read_env(LLMSettings, {"OPENAI_API_KEY": "other", "AEON_LLM_API_KEY": SECRET})

    assert settings.api_key is not None and settings.api_key.get_secret_value() == SECRET
    assert preferred.api_key is not None and preferred.api_key.get_secret_value() == SECRET


def test_the_key_never_shows_in_repr_str_or_dump(read_env):
    settings = read_env(LLMSettings, {"AEON_LLM_API_KEY": SECRET})

    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert SECRET not in text


async def test_openai_adapter_is_built_from_settings(read_env):
    env = {
        "AEON_LLM": "openai",
        "AEON_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "AEON_LLM_MODEL": "m",
        "AEON_LLM_TIMEOUT": "3",
        "AEON_LLM_FIRST_TOKEN_PER_1K_S": "12",
        "AEON_LLM_IDLE_TIMEOUT": "4",
        "AEON_LLM_WHOLE_REPLY_PER_1K_S": "90",
        "AEON_LLM_MAX_RETRIES": "1",
    }

    adapter = build_adapter(read_env(LLMSettings, env))
    try:
        assert isinstance(adapter, OpenAIAdapter)
        assert (adapter.model, adapter.bounds.timeout, adapter.retries.max_retries) == ("m", 3.0, 1)
        assert (adapter.bounds.first_token_per_1k, adapter.bounds.idle_timeout) == (12.0, 4.0)
        assert adapter.bounds.whole_reply_per_1k == 90.0
        assert adapter.family == "openai"
    finally:
        await adapter.aclose()


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, "AEON_LLM_BASE_URL and AEON_LLM_MODEL"),
        ({"AEON_LLM_MODEL": "m"}, "AEON_LLM_BASE_URL"),
        ({"AEON_LLM_BASE_URL": "http://h/v1"}, "AEON_LLM_MODEL"),
    ],
)
def test_openai_without_endpoint_or_model_is_refused_when_read(env, missing, read_env):
    with pytest.raises(SettingsError, match=f"needs {missing} "):
        read_env(LLMSettings, {"AEON_LLM": "openai", **env})


async def test_scripted_adapter_reads_its_script_and_delay(tmp_path, read_env):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"PLAN_GENERATION_USER": "x"}), encoding="utf-8")
    env = {"AEON_LLM": "scripted", "AEON_LLM_SCRIPT": str(path), "AEON_LLM_DELAY_MS": "20"}

    adapter = build_adapter(read_env(LLMSettings, env))

    assert isinstance(adapter, ScriptedLLM)
    assert adapter.delay == 0.02
    assert isinstance(adapter.fallback, OfflineLLM) and adapter.fallback.delay == 0.02


def test_scripted_without_a_script_is_refused(read_env):
    with pytest.raises(SettingsError, match="AEON_LLM_SCRIPT"):
        read_env(LLMSettings, {"AEON_LLM": "scripted"})


def test_an_unreadable_script_names_the_variable(tmp_path, read_env):
    settings = read_env(LLMSettings, {"AEON_LLM": "scripted", "AEON_LLM_SCRIPT": "/nonexistent"})

    with pytest.raises(SettingsError, match="AEON_LLM_SCRIPT: cannot read"):
        build_adapter(settings)


def test_offline_delay_comes_from_milliseconds(read_env):
    adapter = build_adapter(read_env(LLMSettings, {"AEON_LLM_DELAY_MS": "250"}))

    assert isinstance(adapter, OfflineLLM) and adapter.delay == 0.25


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AEON_LLM": "gpt"}, "AEON_LLM='gpt': must be 'offline', 'openai' or 'scripted'"),
        ({"AEON_LLM_TIMEOUT": "soon"}, "AEON_LLM_TIMEOUT='soon': must be a number"),
        ({"AEON_LLM_TIMEOUT": "0"}, "AEON_LLM_TIMEOUT='0': must be more than 0"),
        ({"AEON_LLM_TIMEOUT": "nan"}, "AEON_LLM_TIMEOUT='nan': must be a finite number"),
        ({"AEON_LLM_IDLE_TIMEOUT": "0"}, "AEON_LLM_IDLE_TIMEOUT='0': must be more than 0"),
        (
            {"AEON_LLM_FIRST_TOKEN_PER_1K_S": "-1"},
            "AEON_LLM_FIRST_TOKEN_PER_1K_S='-1': must be at least 0",
        ),
        (
            {"AEON_LLM_WHOLE_REPLY_PER_1K_S": "-1"},
            "AEON_LLM_WHOLE_REPLY_PER_1K_S='-1': must be at least 0",
        ),
        ({"AEON_LLM_MAX_RETRIES": "2.5"}, "AEON_LLM_MAX_RETRIES='2.5': must be a whole number"),
        ({"AEON_LLM_MAX_RETRIES": "-1"}, "AEON_LLM_MAX_RETRIES='-1': must be at least 0"),
        ({"AEON_LLM_DELAY_MS": "-5"}, "AEON_LLM_DELAY_MS='-5': must be at least 0"),
        ({"AEON_LLM_STRUCTURED_OUTPUT": "xml"}, "AEON_LLM_STRUCTURED_OUTPUT='xml': must be"),
    ],
)
def test_bad_values_name_the_variable(env, message, read_env):
    with pytest.raises(SettingsError, match=re.escape(message)):
        read_env(LLMSettings, env)


def test_blank_values_mean_the_default(read_env):
    settings = read_env(
        LLMSettings, {"AEON_LLM": " ", "AEON_LLM_TIMEOUT": "", "AEON_LLM_MODEL": ""}
    )

    assert (settings.kind, settings.timeout, settings.model) == ("offline", 60.0, None)
