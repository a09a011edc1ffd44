"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from aeonloop.bus.settings import BusSettings
from aeonloop.testing import quick_settings


@pytest.fixture
def settings(redis_url: str, redis_prefix: str) -> BusSettings:
    """Bus settings on the test's Redis under its own prefix and consumer name, with short
    blocks, claims and backoffs so that recovery happens within the test's patience: the test
    harness's (aeonloop.testing.quick_settings)."""
    return quick_settings(redis_url, redis_prefix)
