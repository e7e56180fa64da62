"""mrc.sim.collector: the cycle collector paused around a simulation, what a block made
promoted to the oldest generation unwalked, and reclaimed before the next build."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from mrc.sim import collector
from mrc.sim.collector import collection_paused


class _Node:
    """A reference cycle of one: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def test_collection_paused_restores_the_collector_state() -> None:
    """Building a simulation pauses the cycle collector and gives back whatever state it
    found, also when the block raises."""
    was = gc.isenabled()
    try:
        for before in (True, False):
            if before:
                gc.enable()
            else:
                gc.disable()
            with collection_paused():
                assert not gc.isenabled()
            assert gc.isenabled() is before
            with pytest.raises(RuntimeError), collection_paused(building=True):
                raise RuntimeError("boom")
            assert gc.isenabled() is before
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_what_a_build_made_leaves_it_in_the_oldest_generation(collector_on: None) -> None:
    with collection_paused(building=True):
        made = [_Node() for _ in range(1000)]
        assert any(o is made[0] for o in gc.get_objects(generation=0))
    assert gc.get_count()[0] < 100  # (nothing young left to walk)
    for younger in (0, 1):
        assert not any(o is made[0] or o is made[-1] for o in gc.get_objects(younger))
    assert any(o is made[0] for o in gc.get_objects(generation=2))
    assert gc.get_freeze_count() == 0
    with collection_paused():  # a run: what it made stays young, for the young collections
        ran = _Node()
    assert any(o is ran for o in gc.get_objects(generation=0))


def test_a_new_build_reclaims_what_earlier_blocks_promoted(collector_on: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "RECLAIM_AFTER", 100)
    gc.collect()  # (counting from a full collection)
    with collection_paused(building=True):
        garbage = [_Node() for _ in range(500)]
    watch = weakref.ref(garbage[0])
    del garbage
    assert watch() is not None  # a cycle, promoted: no young collection frees it
    with collection_paused():  # running, not building: nothing reclaimed
        assert watch() is not None
    gc.collect(1)  # (nor by a collection of the younger generations)
    assert watch() is not None
    with collection_paused(building=True):  # the next build: a full collection first
        assert watch() is None


def test_a_small_promotion_is_not_reclaimed(collector_on: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "RECLAIM_AFTER", 10_000)
    gc.collect()
    with collection_paused(building=True):
        garbage = [_Node() for _ in range(50)]
    watch = weakref.ref(garbage[0])
    del garbage
    with collection_paused(building=True):
        assert watch() is not None  # (left to the collector's own full collections)
    gc.collect()
    assert watch() is None


def test_what_another_froze_stays_frozen(collector_on: None) -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collection_paused(building=True):
            _Node()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_the_runs_of_a_simulation_built_so_are_kept_too(collector_on: None) -> None:
    """``Simulator.run`` promotes what it made when the engine was made in a building block
    (the lab runner's, the bench's), and leaves it young otherwise (a stack made directly)."""
    from mrc.sim.engine import Simulator

    assert not collector.building()
    with collection_paused(building=True):
        assert collector.building()
        with collection_paused(building=True):  # (nested blocks count)
            pass
        assert collector.building()
        kept = Simulator()
    assert not collector.building()
    plain = Simulator()
    for sim, young in ((kept, False), (plain, True)):
        made: list[_Node] = []
        sim.at(1, lambda _, made=made: made.append(_Node()))
        sim.run()
        assert any(o is made[0] for o in gc.get_objects(generation=0)) is young
