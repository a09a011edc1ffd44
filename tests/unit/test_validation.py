"""The request's cap on passes against AEON_MAX_PASSES: one cap, refused in one line above it.

`aeon ask --max-ttl`, the HTTP API's `max_ttl` and `AeonClient.submit(max_ttl=...)` all check
with `check_max_ttl`; the end-to-end refusals (exit 2, 422) are in tests/e2e.
"""

from __future__ import annotations

import pytest

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.http.api import _checked
from aeonloop.gateway.http.errors import ApiError
from aeonloop.gateway.validation import BadInput, FileSettings, check_max_ttl
from aeonloop.phases.deps import LoopSettings

LIMITS = FileSettings(max_files=2, max_file_bytes=100, max_files_bytes=150)


@pytest.mark.parametrize("asked", [1, 5, 8])
def test_a_cap_up_to_aeon_max_passes_is_taken(asked: int) -> None:
    assert check_max_ttl(asked, 8) == asked


def test_no_cap_asked_for_is_aeon_max_passes_itself() -> None:
    assert check_max_ttl(None, 8) is None


@pytest.mark.parametrize("asked", [9, 100, 101])
def test_a_cap_above_aeon_max_passes_is_refused_naming_both_and_what_to_do(asked: int) -> None:
    with pytest.raises(BadInput) as refused:
        check_max_ttl(asked, 8)
    message = str(refused.value)
    assert "\n" not in message
    assert f"max TTL {asked} is above AEON_MAX_PASSES=8" in message
    assert "ask for 8 or fewer, or set AEON_MAX_PASSES higher (at most 100)" in message


@pytest.mark.parametrize("asked", [0, -3])
def test_a_cap_below_one_is_refused(asked: int) -> None:
    with pytest.raises(BadInput, match=rf"max TTL {asked} is not a number of passes from 1 to 8"):
        check_max_ttl(asked, 8)


def _client(max_passes: int) -> AeonClient:
    """A client as the HTTP API holds one (not connected: checking a body needs no Redis)."""
    return AeonClient(
        settings=BusSettings(), loop=LoopSettings(max_passes=max_passes), file_limits=LIMITS
    )


def test_the_http_body_is_checked_against_the_servers_cap() -> None:
    assert _checked({"request": "Explain tides"}, _client(8))["max_ttl"] is None
    assert _checked({"request": "Explain tides", "max_ttl": 20}, _client(20))["max_ttl"] == 20
    with pytest.raises(ApiError) as refused:
        _checked({"request": "Explain tides", "max_ttl": 9}, _client(8))
    assert (refused.value.status, refused.value.field) == (422, "max_ttl")
    assert "above AEON_MAX_PASSES=8" in refused.value.reason
