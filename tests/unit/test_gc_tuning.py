"""`aeon worker` tunes the cycle collector for many runs in flight; it must not turn it off."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from aeonloop.bus.worker import GC_THRESHOLDS, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_start_up_objects_are_frozen_and_collections_are_rarer(restore_gc: None) -> None:
    tune_gc()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700, "the youngest generation must be collected less often"


def test_cycles_are_still_collected_without_an_explicit_collect(restore_gc: None) -> None:
    tune_gc()

    class Node:
        partner: object = None

    def cycle() -> Node:
        a, b = Node(), Node()
        a.partner, b.partner = b, a
        return a

    first = weakref.ref(cycle())
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collections.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        for _ in range(GC_THRESHOLDS[0]):
            cycle()
    finally:
        gc.callbacks.remove(seen)
    assert collections, "allocating past the threshold must start a collection by itself"
    assert first() is None, "an unreachable cycle must be freed"
