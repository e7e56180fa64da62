"""CPython's cycle collector around simulations: paused while one is built or run, what a
build and its runs made handed straight to the oldest generation, reclaimed before the next
build, and left to the process's exit by a command.

Why: a simulation is a few million small objects, all in reference cycles (ports and the
simulator hold each other), none of them garbage until the run ends. The collector, left to
itself, walks the young ones on every few hundred allocations while they are made, then all
of them again as they age through its generations: at 1024 hosts half of the 1.5-1.9 s of
setup before it was paused, and 0.25 s of a permutation before what the build and the run
made was promoted (a walk of each when its block ends, one more of the middle generation
after; 0.26 s of the 8-plane one). The cost is that a dropped simulation's objects wait for a
full collection: the next build runs one when blocks promoted more than
:data:`RECLAIM_AFTER` objects since the last, so a process that builds many (a sweep's
worker, a test run) holds at most about that many objects of garbage more than it did. A
simulation made outside a building block (a stack built directly) is left to the collector
as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["building", "collection_paused", "spare_exit_collection"]

#: Objects promoted by :func:`_promote_young` since the last full collection (numbered, by
#: ``gc.get_stats``, ``_promoted_after``): a new build first reclaims them past this many
#: (about 50-100 MB of simulation objects).
RECLAIM_AFTER = 500_000
_promoted = 0
_promoted_after = -1
_building = 0  # building blocks open (nested ones count)


@contextmanager
def collection_paused(*, building: bool = False, keep: bool = False) -> Iterator[None]:
    """No cycle collection inside the block; the collector's state is restored after it.

    ``building``: the block builds a simulation, which lives on after it. What it made goes
    to the oldest generation unwalked (:func:`_promote_young`), and first, when builds
    promoted more than :data:`RECLAIM_AFTER` objects since the last full collection, one
    runs (a simulation built and dropped earlier in this process is cyclic garbage that its
    promotion hid from the young collections). ``keep``: the block runs a simulation that
    was built so (:func:`building` said True when its engine was made): what the run makes
    (the records of the segments in flight, what the recorder keeps) is promoted too."""
    global _building
    collecting = gc.isenabled()
    if collecting and building:
        _reclaim_promoted()
    gc.disable()
    _building += building
    try:
        yield
    finally:
        _building -= building
        if collecting:
            if building or keep:
                _promote_young()
            gc.enable()


def building() -> bool:
    """Whether a ``collection_paused(building=True)`` block is open: a simulation made now
    has its runs' objects promoted as well (``Simulator.run``)."""
    return _building > 0


def _full_collections() -> int:
    return int(gc.get_stats()[-1]["collections"])


def _promote_young() -> None:
    """Move every object the collector tracks into its oldest generation without walking
    them: ``gc.freeze`` moves them all to the permanent generation, ``gc.unfreeze`` that to
    the oldest. A full collection still examines them. Skipped while anything else is frozen
    (a pre-fork server's heap stays frozen)."""
    global _promoted, _promoted_after
    if gc.get_freeze_count():
        return
    full = _full_collections()
    if full != _promoted_after:  # a full collection saw what was promoted before
        _promoted, _promoted_after = 0, full
    _promoted += gc.get_count()[0]  # (the youngest's allocations less its frees: its size)
    gc.freeze()
    gc.unfreeze()


def _reclaim_promoted() -> None:
    if _promoted > RECLAIM_AFTER and _full_collections() == _promoted_after:
        gc.collect()


def spare_exit_collection() -> None:
    """Leave what is alive now to the process's exit: the interpreter's last collection skips it.

    For a command about to exit. At exit the interpreter walks every object still in a
    reference cycle, and a simulation is millions of them: 45 ms of a 0.4 s perm128 run,
    0.8 s of a 6 s perm1024 one, spent freeing memory the operating system takes back anyway.
    Frozen objects are never collected, so nothing that still needs a finalizer may be left
    to one (outputs are closed by ``with`` before this; ``atexit`` handlers still run). Never
    call it in a process that goes on (a test run, a notebook): what is alive then would
    never be freed."""
    gc.freeze()
