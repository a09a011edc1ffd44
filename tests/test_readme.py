"""The README is part of the product: what it documents must match the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.llm.factory import LLMSettings
from aeonloop.phases.deps import LoopSettings
from aeonloop.phases.events import RequestSubmitted
from aeonloop.settings import AeonSettings
from aeonloop.telemetry.metrics import MetricsSettings
from aeonloop.telemetry.tracing import TracingSettings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_request_schema_in_readme_is_the_codes() -> None:
    block = README.split("<summary>RequestSubmitted JSON schema</summary>", 1)[1]
    schema = re.search(r"```json\n(.*?)\n```", block, re.S)
    assert schema, "the README lost its RequestSubmitted schema block"
    assert json.loads(schema.group(1)) == RequestSubmitted.model_json_schema()


#: Every settings class: each of its variables must be in the README (most in Configuration).
SETTINGS = (
    BusSettings,
    LoopSettings,
    LLMSettings,
    MetricsSettings,
    TracingSettings,
    HttpSettings,
)


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda cls: cls.__name__)
def test_every_setting_is_documented(settings: type[AeonSettings]) -> None:
    for name in settings.model_fields:
        assert f"`{settings.variable(name)}`" in README, name


def test_the_run_page_screenshot_is_there() -> None:
    root = Path(__file__).resolve().parents[1]
    for image in ("docs/img/run-page.png", "docs/img/run-page-phone.png"):
        assert image in README, image
        assert (root / image).stat().st_size > 10_000, image


def test_set_up_commands_are_the_ones_ci_runs() -> None:
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert 'pip install ".[test]" && pytest' in README
    assert re.search(r'^pip install -q "\.\[test\]"$', ci, re.M)
    assert re.search(r"^pytest$", ci, re.M)
