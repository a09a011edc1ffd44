"""The answer text poller's log of a Redis outage (runs.answer_text): a line when it starts, a
line a minute with a count, a line when it ends; never a line a round (issue 41, finding 6)."""

from __future__ import annotations

import logging

import pytest

from aeonloop.runs import answer_text


def test_an_outage_is_said_once_then_once_a_minute_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(answer_text.time, "monotonic", lambda: now[0])
    outage = answer_text._Outage(every_s=60)
    with caplog.at_level(logging.INFO, logger="aeon.bus"):
        for _ in range(3 * 60 * 2):  # 3 minutes, a round every 0.5 s
            outage.failed(ConnectionError("refused"))
            now[0] += 0.5
        outage.ended()
        outage.ended()  # a round that reads, with no outage: nothing said
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1 + 2 + 1, said
    assert said[0].startswith("answer text not read (ConnectionError)")
    assert said[1] == (
        "answer text still not read (ConnectionError): 120 rounds failed in the last 60 s"
    )
    assert said[-1] == "answer text read again, after 360 rounds that failed"
