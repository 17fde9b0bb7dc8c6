"""switchboard.process.heap: the startup heap is frozen, so a full collection walks only what came after."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from switchboard.process.heap import freeze_startup_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process's heap goes back to being collected


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_freeze_moves_the_heap_out_of_full_collections(unfrozen: None) -> None:
    gc.collect()
    before = len(gc.get_objects(generation=2))
    assert before > 10_000  # pytest and its imports: what a full collection walks today

    frozen = freeze_startup_heap()

    assert frozen == gc.get_freeze_count() > before * 0.9  # (less what the collection freed)
    assert len(gc.get_objects(generation=2)) < before // 10  # what a full collection walks now


def test_startup_garbage_is_collected_not_frozen(unfrozen: None) -> None:
    cycle = _Cycle()
    gc.collect()
    gc.collect()  # the cycle is in the oldest generation, as startup's are
    alive = weakref.ref(cycle)
    del cycle  # a reference cycle: only the collector frees it
    freeze_startup_heap()
    assert alive() is None  # freed, not frozen (a frozen one would never be freed)


def test_objects_made_after_the_freeze_are_still_collected(unfrozen: None) -> None:
    freeze_startup_heap()
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert alive() is None


def test_a_cycle_frozen_alive_is_never_collected(unfrozen: None) -> None:
    """Why startup collects before freezing: the permanent generation is never walked."""
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    gc.freeze()
    del cycle
    gc.collect()
    assert alive() is not None
    gc.unfreeze()
    gc.collect()
    assert alive() is None
