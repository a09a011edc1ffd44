"""Fixtures shared by the integration tests."""

from __future__ import annotations

import uuid

import pytest

from aeonloop.bus.settings import BusSettings


@pytest.fixture
def settings(redis_url: str, redis_prefix: str) -> BusSettings:
    """Bus settings on the test's Redis under its own prefix and consumer name, with short
    blocks, claims and backoffs so that recovery happens within the test's patience."""
    return BusSettings(
        redis_url=redis_url,
        prefix=redis_prefix,
        block_ms=100,
        claim_idle_ms=1000,
        claim_interval_s=0.2,
        retry_backoff_s=0.01,
        consumer_name=f"test-{uuid.uuid4().hex[:6]}",
    )
