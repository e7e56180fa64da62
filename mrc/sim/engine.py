"""Discrete-event engine in integer picoseconds.

Events are ``(time_ps, seq, fn, arg)`` tuples on a binary heap; ``seq`` breaks ties in
scheduling order, so a run is a pure function of its inputs and seed. Callbacks take one
argument (bound methods plus a payload) because that is the cheapest call Python has, and
the per-packet path is dominated by event overhead.

``run_until`` is ``run`` for callers that step the clock from outside (the live fabric).

Hot paths (the network's ports) may push onto ``heap`` directly as
``heapq.heappush(sim.heap, (t, sim.next_seq(), fn, arg))``: that skips one Python call per
event and is exactly what ``at`` does, minus the past-time check.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from mrc.units import PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US, ns, us

__all__ = ["PS_PER_MS", "PS_PER_NS", "PS_PER_S", "PS_PER_US", "Simulator", "ns", "us"]

_FOREVER = 1 << 126
#: Allocations between young-generation collections while ``run`` is inside its loop.
#: Every event allocates (heap entries, packets) and almost nothing makes reference cycles,
#: so CPython's default of 700 spends ~10% of a run in the cycle collector finding nothing.
RUN_GC_THRESHOLD = 100_000


class _Halt(Exception):
    """Raised only by the stop sentinel, never inside a user callback."""


def _halt(_: object) -> None:
    raise _Halt


class Simulator:
    """The clock, the event heap and the run's seeded random generator."""

    __slots__ = ("now", "heap", "next_seq", "rng", "seed", "events_processed", "_stopped")

    def __init__(self, seed: int = 0) -> None:
        self.now = 0
        #: ``(time_ps, seq, fn, arg)`` entries; public so hot paths can push without a call.
        self.heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        #: Tie-breaking sequence numbers (a C-level counter: cheaper than ``self._seq += 1``).
        self.next_seq: Callable[[], int] = itertools.count(1).__next__
        self.seed = seed
        # Mersenne Twister seeded with an int is stable across processes and versions.
        self.rng = random.Random(seed)
        self.events_processed = 0
        self._stopped = False

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at absolute time ``time_ps`` (never in the past)."""
        if time_ps < self.now:
            raise ValueError(f"cannot schedule at {time_ps} ps, before now={self.now} ps")
        heapq.heappush(self.heap, (time_ps, self.next_seq(), fn, arg))

    def after(self, delay_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.at(self.now + delay_ps, fn, arg)

    def stop(self) -> None:
        """Make ``run`` return after the current event.

        Rather than testing a flag per event (about 1% of a packet-hop), this schedules a
        sentinel that sorts before everything else (time now, sequence 0) and ends the loop."""
        if self._stopped:
            return
        self._stopped = True
        heapq.heappush(self.heap, (self.now, 0, _halt, None))

    def run(self, until_ps: int | None = None) -> int:
        """Process events in time order up to and including ``until_ps``; returns now.

        When the heap empties early the clock stays at the last event; when ``until_ps`` is
        given the clock is advanced to it, so bins and timers see a consistent end time.
        """
        heap = self.heap
        pop = heapq.heappop
        limit = until_ps if until_ps is not None else _FOREVER
        if self._stopped:  # stop() outside run() is a no-op: drop its sentinel (the minimum)
            pop(heap)
            self._stopped = False
        before = len(heap)
        first_seq = self.next_seq()
        thresholds = gc.get_threshold()
        if 0 < thresholds[0] < RUN_GC_THRESHOLD:
            gc.set_threshold(RUN_GC_THRESHOLD, *thresholds[1:])
        try:
            while heap:
                t, seq, fn, arg = pop(heap)
                if t > limit:
                    heapq.heappush(heap, (t, seq, fn, arg))  # not ours: back, same seq
                    break
                self.now = t
                fn(arg)
        except _Halt:
            pass
        finally:
            gc.set_threshold(*thresholds)
            # Events run = events there before + events scheduled since - events left
            # (the sentinel cancels out); counted here rather than per event.
            pushed = self.next_seq() - first_seq - 1
            self.events_processed += before + pushed - len(heap)
        if until_ps is not None and not self._stopped and self.now < until_ps:
            self.now = until_ps
        self._stopped = False
        return self.now

    def run_until(self, time_ps: int) -> int:
        """Process the events due at or before ``time_ps``, in order; returns how many ran.

        For a caller that advances time in small steps from outside, as the live fabric does
        on every datagram burst and timer: the same order and counting as ``run``, without its
        per-call setup (collector tuning). The clock ends at ``time_ps`` (the last event's time
        if ``stop`` ended it early)."""
        heap = self.heap
        pop = heapq.heappop
        if self._stopped:  # a stop() made outside: drop its sentinel, as run() does
            pop(heap)
            self._stopped = False
        before = len(heap)
        first_seq = self.next_seq()
        halted = False
        try:
            while heap and heap[0][0] <= time_ps:
                t, _, fn, arg = pop(heap)
                self.now = t
                fn(arg)
        except _Halt:
            halted = True
            self._stopped = False
        finally:
            done = before + self.next_seq() - first_seq - 1 - len(heap)
            self.events_processed += done
        if not halted and self.now < time_ps:
            self.now = time_ps
        return done

    def pending(self) -> int:
        return len(self.heap)

    def next_time(self) -> int | None:
        return self.heap[0][0] if self.heap else None
