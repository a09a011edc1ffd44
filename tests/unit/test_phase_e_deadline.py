"""Phase E's checks and refinement end at the run's deadline (phases.phase_e): at the deadline
(and CHECKS_PAST_DEADLINE_S) the candidate in hand, the model's answer, is published with a
note saying its checks were cut. Checks had no bound: 100 slow rule patterns a run kept eight
runs' answers 32 to 134 s past a 300 s deadline (issue 41, finding 3)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

from aeonloop.phases import phase_e, verification
from aeonloop.phases.events import FinalAnswerReady, utcnow
from aeonloop.phases.outcome import outcome_of
from tests.unit.test_verification import loop_script


async def test_checks_that_outlast_the_deadline_are_cut_and_the_answer_published(
    harness: Any, replies: Any, make_request: Any, drive: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness(loop_script(replies))
    exited = (await drive(make_request(), h.deps))[-1]
    exited = exited.model_copy(update={"deadline": utcnow() + timedelta(seconds=0.5)})

    async def slow_checks(*_args: Any, **_kwargs: Any) -> verification.Verified:
        await asyncio.sleep(60)  # 100 backtracking patterns, say
        raise AssertionError("not cut")

    monkeypatch.setattr(verification, "verified", slow_checks)
    monkeypatch.setattr(phase_e, "CHECKS_PAST_DEADLINE_S", 0.2)
    started = time.monotonic()
    (out,) = await phase_e.handle(exited, h.deps)
    took = time.monotonic() - started
    assert isinstance(out, FinalAnswerReady)
    final = out.result.final_answer
    assert took < 0.5 + 0.2 + 1.0, f"published {took:.1f} s after Phase E began"
    assert "Green, black and oolong are three teas." in final.answer_text
    assert phase_e.CHECKS_CUT_NOTE in outcome_of(final.metadata).run_notes
