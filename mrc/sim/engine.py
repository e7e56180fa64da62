"""Discrete-event engine in integer picoseconds.

Events are ``(time_ps, seq, fn, arg)`` tuples on a binary heap; ``seq`` breaks ties in
scheduling order, so a run is a pure function of its inputs and seed. Callbacks take one
argument (bound methods plus a payload) because that is the cheapest call Python has, and
the per-packet path is dominated by event overhead.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

PS_PER_NS = 1_000
PS_PER_US = 1_000_000
PS_PER_MS = 1_000_000_000
PS_PER_S = 1_000_000_000_000


def us(value: float) -> int:
    """Microseconds to integer picoseconds."""
    return int(round(value * PS_PER_US))


def ns(value: float) -> int:
    """Nanoseconds to integer picoseconds."""
    return int(round(value * PS_PER_NS))


class Simulator:
    """The clock, the event heap and the run's seeded random generator."""

    __slots__ = ("now", "_heap", "_seq", "rng", "seed", "events_processed", "_stopped")

    def __init__(self, seed: int = 0) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._seq = 0
        self.seed = seed
        # Mersenne Twister seeded with an int is stable across processes and versions.
        self.rng = random.Random(seed)
        self.events_processed = 0
        self._stopped = False

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at absolute time ``time_ps`` (never in the past)."""
        if time_ps < self.now:
            raise ValueError(f"cannot schedule at {time_ps} ps, before now={self.now} ps")
        self._seq += 1
        heapq.heappush(self._heap, (time_ps, self._seq, fn, arg))

    def after(self, delay_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.at(self.now + delay_ps, fn, arg)

    def stop(self) -> None:
        """Make ``run`` return after the current event."""
        self._stopped = True

    def run(self, until_ps: int | None = None) -> int:
        """Process events in time order up to and including ``until_ps``; returns now.

        When the heap empties early the clock stays at the last event; when ``until_ps`` is
        given the clock is advanced to it, so bins and timers see a consistent end time.
        """
        heap = self._heap
        pop = heapq.heappop
        limit = until_ps if until_ps is not None else 1 << 126
        processed = 0
        self._stopped = False
        while heap and heap[0][0] <= limit:
            t, _, fn, arg = pop(heap)
            self.now = t
            fn(arg)
            processed += 1
            if self._stopped:
                break
        self.events_processed += processed
        if until_ps is not None and not self._stopped and self.now < until_ps:
            self.now = until_ps
        return self.now

    def pending(self) -> int:
        return len(self._heap)

    def next_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None
