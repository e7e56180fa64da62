# cython: boundscheck=False, wraparound=False
"""Discrete-event engine in integer picoseconds.

An event is a time, a sequence number and a callback with its one argument; events run in
``(time_ps, seq)`` order, ``seq`` breaking ties in scheduling order, so a run is a pure
function of its inputs and seed. Callbacks take one argument (bound methods plus a payload)
because that is the cheapest call Python has, and the per-packet path is dominated by event
overhead. Hot paths (the network's ports) call :meth:`Simulator.schedule`: ``at`` without
the past-time check.

``run_until`` is ``run`` for callers that step the clock from outside (the live fabric).

The queue itself takes the shape each build runs fastest, in the same order: pure Python keeps
``(time_ps, seq, fn, arg)`` tuples on a ``heapq`` list; the compiled build keeps 16-byte C
records ``(time, seq << 24 | slot)`` in a calendar of 2 ns buckets in front of a heap
(``engine_c.h``, in C, says how), each event's callback and argument side by side in a list
by slot. (A toy loop: 1.5 us per event with ``heapq`` on tuples in CPython, 2.6 us for the
same code compiled, where boxing the ints into tuples dominates, 0.5 us with plain C
records.) ``(time, seq)`` is a total order, so both run every event in the same order.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:
    from cython.cimports.mrc.sim.engine_c import (
        _put,
        _take,
        mrc_cal_first,
        mrc_cal_free,
        mrc_cal_grow,
        mrc_cal_pending,
        mrc_cal_pop,
        mrc_cal_push,
        mrc_cal_slot,
        mrc_cal_warm,
        mrc_calendar,
    )

from mrc.sim.collector import building, collection_paused
from mrc.units import PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US, ns, us

__all__ = ["PS_PER_MS", "PS_PER_NS", "PS_PER_S", "PS_PER_US", "Handler", "Simulator",
           "ns", "us"]

_FOREVER = (1 << 63) - 1  # no limit (the compiled queue's times are signed 64-bit)
#: Initial capacity of the compiled queue (it doubles when full).
_INITIAL_SLOTS = 1024
#: The compiled queue's record key is ``seq << 24 | slot``: room for 16.7 million pending
#: events and 5.5 * 10^11 events scheduled in one simulator (two days of a 1024-host run at
#: today's speed); past either the engine raises rather than misorder.
_MAX_SLOTS = 16_777_216  # 1 << 24
_MAX_SEQ = cython.declare(cython.longlong, 549_755_813_887)  # (1 << 39) - 1


class _Halt(Exception):
    """Raised only by the stop sentinel, never inside a user callback."""


def _halt(_: object) -> None:
    raise _Halt


@cython.cclass
class Handler:
    """An event callback the compiled engine calls in C: scheduling a Handler ``h`` with
    ``arg`` runs ``h.fire(arg)``.

    Any callable will do as a callback, but calling one from compiled code is Python's call
    protocol: a bound method of a compiled class goes through its vectorcall, the argument
    parsing of its Python wrapper and a type check of the argument (about a hundred
    instructions, on every event). A class compiled with the core that derives from Handler
    is called through its C ``fire`` instead (a C method, so only compiled classes can
    provide it; a ``cpdef`` one, which Python subclasses could override, measured 20
    instructions more per event). The per-packet events use it: a port is the callback of
    its own packets' arrivals (``OutPort.fire``), and a NIC port's transmit-done has one
    (``mrc.sim.host``). Calling a Handler runs ``fire`` too, so it is an ordinary callable
    wherever else it goes."""

    __slots__ = ()

    @cython.cfunc
    @cython.annotation_typing(True)
    def fire(self, arg: object) -> cython.void:
        raise NotImplementedError

    def __call__(self, arg: Any) -> None:
        self.fire(arg)


@cython.final
@cython.cclass
class Simulator:
    """The clock, the event queue and the run's seeded random generator."""

    now: cython.longlong  # picoseconds (signed 64-bit: ~106 days)
    seed: int
    rng: random.Random
    events_processed: cython.longlong
    _stopped: cython.bint
    #: built inside ``collection_paused(building=True)``: what its runs make is kept with what
    #: the build made (:mod:`mrc.sim.collector`)
    _kept: cython.bint
    # the compiled queue: its records (C), the last sequence number given out, and slot s's
    # callback at 2s, its argument at 2s + 1 (one cache line; a list, so that the cycle
    # collector sees what the pending events hold)
    _cal: mrc_calendar
    _seq: cython.longlong
    _slots: list[Any]
    # pure Python's queue: ``(time_ps, seq, fn, arg)`` entries, and its sequence numbers (a
    # C-level counter: cheaper than ``+= 1``)
    heap: list[tuple[int, int, Callable[[Any], None], Any]]
    next_seq: Callable[[], int]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, seed: int = 0) -> None:
        self.now = 0
        self.seed = seed
        # Mersenne Twister seeded with an int is stable across processes and versions.
        self.rng = random.Random(seed)
        self.events_processed = 0
        self._stopped = False
        self._kept = building()
        self._seq = 0
        self._slots = []
        self.heap = []
        self.next_seq = itertools.count(1).__next__
        if cython.compiled:
            self._grow(_INITIAL_SLOTS)

    def __dealloc__(self) -> None:
        if cython.compiled:
            mrc_cal_free(cython.address(self._cal))

    # ------------------------------------------------------------------ scheduling
    @cython.ccall
    @cython.annotation_typing(True)
    def at(self, time_ps: cython.longlong, fn: object, arg: object = None) -> None:
        """Run ``fn(arg)`` at absolute time ``time_ps`` (never in the past)."""
        if time_ps < self.now:
            raise ValueError(f"cannot schedule at {time_ps} ps, before now={self.now} ps")
        self.schedule(time_ps, fn, arg)

    @cython.ccall
    @cython.annotation_typing(True)
    def after(self, delay_ps: cython.longlong, fn: object, arg: object = None) -> None:
        self.at(self.now + delay_ps, fn, arg)

    @cython.ccall
    @cython.annotation_typing(True)
    def schedule(self, time_ps: cython.longlong, fn: Any, arg: Any) -> cython.void:
        """``at`` for hot paths that never schedule in the past: no check."""
        if cython.compiled:
            self._seq += 1
            self._push(time_ps, self._seq, fn, arg)
        else:
            heapq.heappush(self.heap, (time_ps, self.next_seq(), fn, arg))

    def stop(self) -> None:
        """Make ``run`` return after the current event.

        Rather than testing a flag per event (about 1% of a packet-hop), this schedules a
        sentinel that sorts before everything else (time now, sequence 0) and ends the loop."""
        if self._stopped:
            return
        self._stopped = True
        if cython.compiled:
            self._push(self.now, 0, _halt, None)
        else:
            sentinel: tuple[int, int, Callable[[Any], None], Any] = (self.now, 0, _halt, None)
            heapq.heappush(self.heap, sentinel)

    # ------------------------------------------------------------------ running
    def run(self, until_ps: int | None = None) -> int:
        """Process events in time order up to and including ``until_ps``; returns now.

        When the queue empties early the clock stays at the last event; when ``until_ps`` is
        given the clock is advanced to it, so bins and timers see a consistent end time.
        """
        limit = until_ps if until_ps is not None else _FOREVER
        if self._stopped:  # stop() outside run() is a no-op: drop its sentinel (the minimum)
            self._discard_first()
            self._stopped = False
        # No cycle collection inside the loop: every event allocates (packets, records) and
        # nothing there makes reference cycles, so the collector would only walk the
        # packets in flight again and again (15-20% of a compiled run, ~10% in CPython even
        # at a threshold of 100,000).
        with collection_paused(keep=self._kept):
            self._loop(limit)
        if until_ps is not None and not self._stopped and self.now < until_ps:
            self.now = until_ps
        self._stopped = False
        return self.now

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=False)
    def run_until(self, time_ps: cython.longlong) -> cython.Py_ssize_t:
        """Process the events due at or before ``time_ps``, in order; returns how many ran.

        For a caller that advances time in small steps from outside, as the live fabric does
        on every datagram burst and timer: the same order and counting as ``run``, without its
        per-call setup (pausing the cycle collector). The clock ends at ``time_ps`` (the last
        event's time if ``stop`` ended it early)."""
        if self._stopped:  # a stop() made outside: drop its sentinel, as run() does
            self._discard_first()
            self._stopped = False
        before: cython.longlong = self.events_processed
        halted: cython.bint = self._loop(time_ps)
        if halted:
            self._stopped = False
        elif self.now < time_ps:
            self.now = time_ps
        return self.events_processed - before

    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(True, check=True)
    def _loop(self, limit: cython.longlong) -> cython.bint:
        """Run events due by ``limit``; True when the stop sentinel ended it. Events run =
        events there before + events scheduled since - events left (the sentinel cancels
        out), counted here rather than per event, and kept right when a callback raises."""
        if not cython.compiled:
            return self._loop_heap(limit)
        before: cython.Py_ssize_t = self.pending()
        first_seq: cython.longlong = self._seq
        slots: list = self._slots
        q: cython.pointer[mrc_calendar] = cython.address(self._cal)
        t: cython.longlong
        slot: cython.longlong
        try:
            while True:
                t = mrc_cal_first(q)
                if t < 0:
                    if t == -2:
                        raise MemoryError
                    break
                if t > limit:
                    break
                slot = 2 * mrc_cal_pop(q)
                fn = _take(slots, slot)
                arg = _take(slots, slot + 1)
                self.now = t
                mrc_cal_warm(q, slots)  # (prefetches what the next events touch first)
                if isinstance(fn, Handler):
                    cython.cast(Handler, fn).fire(arg)
                else:
                    fn(arg)
        except _Halt:
            return True
        finally:
            self.events_processed += before + (self._seq - first_seq) - self.pending()
        return False

    def _loop_heap(self, limit: int) -> bool:
        """``_loop`` of pure Python: the same order, from the heap of tuples."""
        heap = self.heap
        pop = heapq.heappop
        before = len(heap)
        first_seq = self.next_seq()
        try:
            while heap:
                t, seq, fn, arg = pop(heap)
                if t > limit:
                    heapq.heappush(heap, (t, seq, fn, arg))  # not ours: back, same seq
                    break
                self.now = t
                fn(arg)
        except _Halt:
            return True
        finally:
            self.events_processed += before + self.next_seq() - first_seq - 1 - len(heap)
        return False

    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=False)
    def _discard_first(self) -> cython.int:
        """Drop the first pending event (the stop sentinel)."""
        if cython.compiled:
            mrc_cal_first(cython.address(self._cal))
            slot: cython.longlong = 2 * mrc_cal_pop(cython.address(self._cal))
            _take(self._slots, slot)
            _take(self._slots, slot + 1)
        else:
            heapq.heappop(self.heap)
        return 0

    # ------------------------------------------------------------------ views
    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(check=False)
    def pending(self) -> cython.Py_ssize_t:
        if cython.compiled:
            return mrc_cal_pending(cython.address(self._cal))
        return len(self.heap)

    def next_time(self) -> int | None:
        """When the next event is due (None: nothing scheduled)."""
        if cython.compiled:
            t = mrc_cal_first(cython.address(self._cal))
            if t == -2:
                raise MemoryError
            return None if t < 0 else t
        return self.heap[0][0] if self.heap else None

    # ------------------------------------------------------------------ the compiled queue
    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=False)
    def _push(self, time_ps: cython.longlong, seq: cython.longlong, fn: object,
              arg: object) -> cython.int:
        """Queue ``fn(arg)`` at ``time_ps`` with sequence number ``seq`` (compiled only)."""
        if not self._cal.nfree:
            self._grow(2 * self._cal.cap)
        if seq > _MAX_SEQ:
            raise OverflowError(f"more than {_MAX_SEQ} events scheduled in one simulator")
        slot: cython.longlong = mrc_cal_slot(cython.address(self._cal))
        _put(self._slots, 2 * slot, fn)
        _put(self._slots, 2 * slot + 1, arg)
        if mrc_cal_push(cython.address(self._cal), time_ps, (seq << 24) | slot) < 0:
            raise MemoryError
        return 0

    @cython.cfunc
    @cython.annotation_typing(True)
    def _grow(self, cap: cython.Py_ssize_t) -> None:
        """Room for ``cap`` pending events (compiled only; every slot is in use)."""
        if cap > _MAX_SLOTS:
            raise OverflowError(f"more than {_MAX_SLOTS} events pending")
        old: cython.Py_ssize_t = self._cal.cap
        if mrc_cal_grow(cython.address(self._cal), cap) < 0:
            raise MemoryError
        self._slots.extend([None] * (2 * (cap - old)))
