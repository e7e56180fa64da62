# cython: boundscheck=False, wraparound=False
"""Discrete-event engine in integer picoseconds.

An event is a time, a sequence number and a callback with its one argument; events run in
``(time_ps, seq)`` order, ``seq`` breaking ties in scheduling order, so a run is a pure
function of its inputs and seed. Callbacks take one argument (bound methods plus a payload)
because that is the cheapest call Python has, and the per-packet path is dominated by event
overhead. Hot paths (the network's ports) call :meth:`Simulator.schedule`: ``at`` without
the past-time check.

``run_until`` is ``run`` for callers that step the clock from outside (the live fabric).

Two layouts of one heap. The same order, the same counting and the same API come from two
data layouts, because interpreted and compiled code want opposite things (a toy loop: 1.5 us
per event with ``heapq`` on tuples in CPython, 2.6 us for the same code compiled, where
boxing the ints into tuples dominates, 0.5 us with plain C records):

* pure Python: ``(time_ps, seq, fn, arg)`` tuples on a ``heapq`` list (``heap``);
* compiled (``mrc/sim/engine.pxd``, see :mod:`mrc._build`): a binary heap of 16-byte C
  records ``(time, seq << 24 | slot)`` in one cache-aligned array (a sift reads
  neighbouring memory, two siblings share a cache line), each event's callback and argument
  side by side in one list by slot, freed slots recycled. Only this module knows which one
  runs (``cython.compiled``).
"""

from __future__ import annotations

import gc
import heapq
import itertools
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.units import PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US, ns, us

__all__ = ["PS_PER_MS", "PS_PER_NS", "PS_PER_S", "PS_PER_US", "Handler", "Simulator",
           "collection_paused", "ns", "us"]

_FOREVER = (1 << 63) - 1  # no limit (the compiled heap's times are signed 64-bit)
#: Initial slots of the compiled heap (it doubles when full).
_INITIAL_SLOTS = 1024
#: The compiled heap's record key is ``seq << _SLOT_BITS | slot``: room for 16.7 million
#: pending events and 5.5 * 10^11 events scheduled in one simulator (two days of a 1024-host
#: run at today's speed); past either the engine raises rather than misorder.
#: (Written out: compiled, ``1 << 39`` would be a 32-bit C shift.)
_SLOT_BITS = 24
_SLOT_MASK = 16_777_215  # (1 << _SLOT_BITS) - 1
_MAX_SEQ = 549_755_813_887  # (1 << (63 - _SLOT_BITS)) - 1

if not cython.compiled:  # (the compiled build has them from engine.pxd, in C)
    def _take(slots: list[Any], i: int) -> Any:
        """Move the object out of ``slots[i]``, leaving None."""
        obj = slots[i]
        slots[i] = None
        return obj

    def _put(slots: list[Any], i: int, obj: Any) -> None:
        """``slots[i] = obj``."""
        slots[i] = obj

    def _item_array(items: list[Any]) -> Any:
        """A list's item array (compiled only: ``ports.Fifo``'s ring)."""
        raise NotImplementedError

    def _slot_take(items: Any, i: int) -> Any:
        raise NotImplementedError

    def _slot_put(items: Any, i: int, obj: Any) -> None:
        raise NotImplementedError

    def _align(buf: bytearray) -> Any:
        """The first 64-byte boundary in ``buf`` (compiled only)."""
        raise NotImplementedError


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cycle collection inside the block; the collector's state is restored after it.

    A simulation is a few million small objects, and none of them is garbage until the run
    ends. Building one (the fabric, then a connection and its EV table per host) with the
    collector on walks the objects made so far again and again: the young generations on
    every few hundred allocations and, each time the old generation grows by a quarter, all
    of it (at 1024 hosts, half of the 1.5-1.9 s of setup). Running one, every event allocates
    and the collector would walk the packets in flight (:meth:`Simulator.run`). Cyclic
    garbage made meanwhile waits for the first collection after the block."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class _Halt(Exception):
    """Raised only by the stop sentinel, never inside a user callback."""


def _halt(_: object) -> None:
    raise _Halt


class Handler:
    """An event callback the compiled engine calls in C: scheduling a Handler ``h`` with
    ``arg`` runs ``h.fire(arg)``.

    Any callable will do as a callback, but calling one from compiled code is Python's call
    protocol: a bound method of a compiled class goes through its vectorcall, the argument
    parsing of its Python wrapper and a type check of the argument (about a hundred
    instructions, on every event). A class compiled with the core that derives from Handler
    is called through its C ``fire`` instead (``engine.pxd``: a C method, so only compiled
    classes can provide it; a ``cpdef`` one, which Python subclasses could override, measured
    20 instructions more per event). The per-packet events use it: a port is the callback
    of its own packets' arrivals (``OutPort.fire``), and a NIC port's transmit-done has one
    (``mrc.sim.host``). Calling a Handler runs ``fire`` too, so it is an ordinary callable
    wherever else it goes."""

    __slots__ = ()

    def fire(self, arg: Any) -> None:
        raise NotImplementedError

    def __call__(self, arg: Any) -> None:
        self.fire(arg)


class Simulator:
    """The clock, the event heap and the run's seeded random generator."""

    __slots__ = ("now", "heap", "next_seq", "rng", "seed", "events_processed", "_stopped",
                 # the compiled heap (engine.pxd: C fields; unused in pure Python)
                 "_seq", "_n", "_cap", "_nfree", "_heap", "_free", "_heapbuf", "_freebuf",
                 "_slots")

    def __init__(self, seed: int = 0) -> None:
        self.now = 0
        self.seed = seed
        # Mersenne Twister seeded with an int is stable across processes and versions.
        self.rng = random.Random(seed)
        self.events_processed = 0
        self._stopped = False
        if cython.compiled:
            self._seq = 0
            self._n = 0
            self._cap = 0
            self._nfree = 0
            #: slot s: the callback at 2s, its argument at 2s + 1 (one cache line)
            self._slots: list[Any] = []
            self._grow(_INITIAL_SLOTS)
        else:
            #: ``(time_ps, seq, fn, arg)`` entries
            self.heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
            #: Tie-breaking sequence numbers (a C-level counter: cheaper than ``+= 1``).
            self.next_seq: Callable[[], int] = itertools.count(1).__next__

    # ------------------------------------------------------------------ scheduling
    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at absolute time ``time_ps`` (never in the past)."""
        if time_ps < self.now:
            raise ValueError(f"cannot schedule at {time_ps} ps, before now={self.now} ps")
        self.schedule(time_ps, fn, arg)

    def after(self, delay_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.at(self.now + delay_ps, fn, arg)

    def schedule(self, time_ps: int, fn: Callable[[Any], None], arg: Any) -> None:
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
            heapq.heappush(self.heap, (self.now, 0, _halt, None))

    # ------------------------------------------------------------------ running
    def run(self, until_ps: int | None = None) -> int:
        """Process events in time order up to and including ``until_ps``; returns now.

        When the heap empties early the clock stays at the last event; when ``until_ps`` is
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
        with collection_paused():
            self._loop(limit)
        if until_ps is not None and not self._stopped and self.now < until_ps:
            self.now = until_ps
        self._stopped = False
        return self.now

    def run_until(self, time_ps: int) -> int:
        """Process the events due at or before ``time_ps``, in order; returns how many ran.

        For a caller that advances time in small steps from outside, as the live fabric does
        on every datagram burst and timer: the same order and counting as ``run``, without its
        per-call setup (pausing the cycle collector). The clock ends at ``time_ps`` (the last event's time
        if ``stop`` ended it early)."""
        if self._stopped:  # a stop() made outside: drop its sentinel, as run() does
            self._discard_first()
            self._stopped = False
        before = self.events_processed
        halted = self._loop(time_ps)
        if halted:
            self._stopped = False
        elif self.now < time_ps:
            self.now = time_ps
        return self.events_processed - before

    def _loop(self, limit: int) -> bool:
        """Run events due by ``limit``; True when the stop sentinel ended it. Events run =
        events there before + events scheduled since - events left (the sentinel cancels
        out), counted here rather than per event, and kept right when a callback raises."""
        if cython.compiled:
            before = self._n
            first_seq = self._seq
            slots = self._slots
            try:
                while self._n:
                    t = self._heap[2]  # the root (not cached: a callback may grow the arrays)
                    slot = 2 * (self._heap[3] & _SLOT_MASK)
                    if t > limit:
                        break
                    self._pop_first()
                    fn = _take(slots, slot)
                    arg = _take(slots, slot + 1)
                    self.now = t
                    if isinstance(fn, Handler):
                        cython.cast(Handler, fn).fire(arg)
                    else:
                        fn(arg)
            except _Halt:
                return True
            finally:
                self.events_processed += before + (self._seq - first_seq) - self._n
            return False
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

    def _discard_first(self) -> None:
        if cython.compiled:
            slot = 2 * (self._heap[3] & _SLOT_MASK)
            self._pop_first()
            _take(self._slots, slot)
            _take(self._slots, slot + 1)
        else:
            heapq.heappop(self.heap)

    # ------------------------------------------------------------------ views
    def pending(self) -> int:
        if cython.compiled:
            return self._n
        return len(self.heap)

    def next_time(self) -> int | None:
        """When the next event is due (None: nothing scheduled)."""
        if cython.compiled:
            if not self._n:
                return None
            return self._heap[2]
        return self.heap[0][0] if self.heap else None

    # ------------------------------------------------------------------ the compiled heap
    # Used only when compiled (engine.pxd types them). Records are 16 bytes: the time, and a
    # key ``seq << _SLOT_BITS | slot`` (seqs are unique, so comparing keys compares seqs);
    # record i (1-based: the root is record 1) is heap[2i], heap[2i + 1], so the two
    # children of record i, records 2i and 2i + 1, are the 32 bytes at 32i: one cache line
    # (the array starts on a 64-byte boundary). With 1024 hosts some 27,000 events are
    # pending; the lower levels of the heap are cold, and a pop that walks down them costs a
    # cache miss per level (two where 24-byte records straddled a line). Slot s holds the
    # event's callback and argument in _slots[2s] and _slots[2s + 1] (None when free), again
    # one line; _free[0:_nfree] are the unused slots. The list is read and written with _take
    # and _put (engine.pxd: a reference moved out of or into a list item in a few C
    # instructions, where an indexed store through Cython's generic helper costs a function
    # call and type checks); it stays a list so that the cycle collector sees what the
    # pending events hold.
    def _push(self, time_ps: int, seq: int, fn: Callable[[Any], None], arg: Any) -> None:
        if not self._nfree:
            self._grow(2 * self._cap)
        if seq > _MAX_SEQ:
            raise OverflowError(f"more than {_MAX_SEQ} events scheduled in one simulator")
        self._nfree -= 1
        slot = self._free[self._nfree]
        _put(self._slots, 2 * slot, fn)
        _put(self._slots, 2 * slot + 1, arg)
        key = (seq << _SLOT_BITS) | slot
        heap = self._heap
        i = self._n + 1
        self._n = i
        while i > 1:  # sift up
            parent = i >> 1
            t = heap[2 * parent]
            if t < time_ps or (t == time_ps and heap[2 * parent + 1] < key):
                break
            heap[2 * i] = t
            heap[2 * i + 1] = heap[2 * parent + 1]
            i = parent
        heap[2 * i] = time_ps
        heap[2 * i + 1] = key

    def _pop_first(self) -> None:
        """Remove the first event's record from the heap and free its slot (the caller takes
        its callback and argument out of the list).

        Bottom-up deletion (Floyd's): the hole the root leaves moves down to a leaf along the
        smaller child, one comparison per level, and the last record is sifted up from there.
        That record was scheduled late and belongs near the bottom, so it rarely climbs,
        where a plain sift-down would compare it at every level too. The events come out in
        the same order: ``(time, seq)`` is a total order, so any correct heap pops the same
        sequence. A 4-ary heap (half the levels) measured slower."""
        heap = self._heap
        self._free[self._nfree] = heap[3] & _SLOT_MASK
        self._nfree += 1
        n = self._n - 1  # records 1..n stay; the last one, record n + 1, is placed again
        self._n = n
        if not n:
            return
        hole = 1
        child = 2
        while child < n:  # two children: the smaller one moves up into the hole
            ct = heap[2 * child]
            dt = heap[2 * child + 2]
            if dt < ct or (dt == ct and heap[2 * child + 3] < heap[2 * child + 1]):
                child += 1
            heap[2 * hole] = heap[2 * child]
            heap[2 * hole + 1] = heap[2 * child + 1]
            hole = child
            child = 2 * child
        if child == n:  # an only child
            heap[2 * hole] = heap[2 * child]
            heap[2 * hole + 1] = heap[2 * child + 1]
            hole = child
        t = heap[2 * n + 2]  # the last record, sifted up from the leaf the hole reached
        k = heap[2 * n + 3]
        i = hole
        while i > 1:
            parent = i >> 1
            pt = heap[2 * parent]
            if pt < t or (pt == t and heap[2 * parent + 1] < k):
                break
            heap[2 * i] = pt
            heap[2 * i + 1] = heap[2 * parent + 1]
            i = parent
        heap[2 * i] = t
        heap[2 * i + 1] = k

    def _grow(self, cap: int) -> None:
        """Room for ``cap`` events (C arrays in bytearrays; the old content is kept)."""
        old = self._cap
        if cap > _SLOT_MASK + 1:
            raise OverflowError(f"more than {_SLOT_MASK + 1} events pending")
        heapbuf = bytearray(16 * (cap + 1) + 64)  # records 1..cap, from a 64-byte boundary
        freebuf = bytearray(8 * cap)
        heap = _align(heapbuf)
        if old:
            for i in range(2, 2 * self._n + 2):
                heap[i] = self._heap[i]
        self._heapbuf: bytearray = heapbuf
        self._freebuf: bytearray = freebuf
        self._heap: Any = heap
        self._free = cython.cast(cython.p_longlong, cython.cast(cython.p_char, freebuf))
        self._slots.extend([None] * (2 * (cap - old)))
        # every slot is in use when the heap grows (or none: the first call)
        self._nfree = cap - old
        for i in range(cap - old):
            self._free[i] = cap - 1 - i
        self._cap = cap
