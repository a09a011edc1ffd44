"""`aeon asyncapi`: the AsyncAPI 3.0 document FastStream generates from Aeon's declarations
(gateway/faststream_interop.py). docs/asyncapi.json is that document for the default settings;
this keeps it equal to the code (`aeon asyncapi --out docs/asyncapi.json` refreshes it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.cli.main import main
from aeonloop.gateway.faststream_interop import asyncapi_json
from aeonloop.phases.events import EVENT_TYPES
from aeonloop.phases.worker import PHASE_INPUTS

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "asyncapi.json"


@pytest.fixture(scope="module")
def generated() -> dict:
    return json.loads(asyncapi_json(BusSettings()))


def test_the_committed_document_is_the_generated_one(generated: dict) -> None:
    committed = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    assert committed == generated, "run `aeon asyncapi --out docs/asyncapi.json`"


def test_every_stream_group_and_event_is_in_it(generated: dict) -> None:
    keys = Keys("aeon")
    channels = generated["channels"]
    assert generated["asyncapi"] == "3.0.0"
    for stream in {t.STREAM for t in EVENT_TYPES.values()}:
        assert channels[stream]["address"] == keys.stream(stream, 0)
    for phase, consumed in PHASE_INPUTS.items():
        binding = channels[f"phase-{phase}"]["bindings"]["redis"]
        assert binding["groupName"] == f"phase-{phase}"
        assert binding["channel"] == keys.stream(consumed[0].STREAM, 0)
    assert set(EVENT_TYPES) <= set(generated["components"]["schemas"])


def test_the_command_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AEON_REDIS_URL", "AEON_PREFIX", "AEON_SHARDS"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "asyncapi.json"
    assert main(["asyncapi", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(DOCUMENT.read_text())
