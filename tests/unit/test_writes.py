"""A refused write is recognised however redis-py words it, and said plainly (bus.redis_errors,
which bus.writes' gate asks)."""

from __future__ import annotations

import pytest
from redis.exceptions import OutOfMemoryError, ResponseError

from aeonloop.bus.redis_errors import refuses_writes, said

OOM = "command not allowed when used memory > 'maxmemory'."


@pytest.mark.parametrize(
    "error",
    [
        OutOfMemoryError(OOM),
        ResponseError(
            f"Command # 1 (EVAL local holder ...) of pipeline caused error: ('OOM {OOM}')"
        ),
        ResponseError(f"Error running script (call to f_1): @user_script:5: -OOM {OOM}"),
        ResponseError("READONLY You can't write against a read only replica."),
        ResponseError("Command # 2 (SET k v) of pipeline caused error: MISCONF Redis is unable"),
    ],
    ids=["oom", "oom in a pipeline", "oom in a script (Redis 6)", "read-only", "misconf"],
)
def test_refused_writes_are_recognised(error: Exception) -> None:
    assert refuses_writes(error)


@pytest.mark.parametrize(
    "error",
    [
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ConnectionError("gone"),
    ],
)
def test_other_errors_are_not_refusals(error: Exception) -> None:
    assert not refuses_writes(error)


def test_said_drops_the_pipeline_preamble_and_the_script() -> None:
    error = ResponseError(
        f"Command # 1 (EVAL local x = 1\nreturn x) of pipeline caused error: {OOM}"
    )
    assert said(error) == OOM
