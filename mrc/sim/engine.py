# cython: boundscheck=False, wraparound=False
"""Discrete-event engine in integer picoseconds.

An event is a time, a sequence number and a callback with its one argument; events run in
``(time_ps, seq)`` order, ``seq`` breaking ties in scheduling order, so a run is a pure
function of its inputs and seed. Callbacks take one argument (bound methods plus a payload)
because that is the cheapest call Python has, and the per-packet path is dominated by event
overhead. Hot paths (the network's ports) call :meth:`Simulator.schedule`: ``at`` without
the past-time check.

``run_until`` is ``run`` for callers that step the clock from outside (the live fabric).

Two layouts of one event queue. The same order, the same counting and the same API come from two
data layouts, because interpreted and compiled code want opposite things (a toy loop: 1.5 us
per event with ``heapq`` on tuples in CPython, 2.6 us for the same code compiled, where
boxing the ints into tuples dominates, 0.5 us with plain C records):

* pure Python: ``(time_ps, seq, fn, arg)`` tuples on a ``heapq`` list (``heap``);
* compiled (``mrc/sim/engine.pxd``, see :mod:`mrc._build`): 16-byte C records
  ``(time, seq << 24 | slot)``, each event's callback and argument side by side in one list
  by slot, freed slots recycled; the records wait in a calendar of 2 ns buckets (4.2 us of
  them, unsorted) and a heap beyond it, and a bucket's records are sorted into a run when its
  turn comes (scheduling is an append; a pop reads the run's next record, or the root of a
  small heap of what was scheduled into the bucket since). Only this module knows which one
  runs (``cython.compiled``).
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

from mrc.sim.collector import building, collection_paused
from mrc.units import PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US, ns, us

__all__ = ["PS_PER_MS", "PS_PER_NS", "PS_PER_S", "PS_PER_US", "Handler", "Simulator",
           "ns", "us"]

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
#: The compiled heap's calendar ("the compiled heap" below): buckets of 2**11 ps, a ring of
#: 2048 of them (4.2 us ahead), and its bitmap's 64-bit words. (1 and 0.5 ns buckets ran
#: the same instructions at 1024 hosts and more misses at 128: callgrind, 2 MB L2.)
_BUCKET_SHIFT = 11
_BUCKETS = 2048
_BUCKET_MASK = 2047
_BUCKET_WORDS = 32
#: ... and its chunks of bucket records: 16 words (the next chunk, a count, 7 records), 512
#: of them to begin with (the pool doubles when all are in use).
_CHUNK_WORDS = 16
_CHUNK_RECORDS = 7
_INITIAL_CHUNKS = 512
#: A bucket's events run from a sorted array (the run) when sorting it took at most this
#: many record moves per event; else through the heap (insertion sort is quadratic at
#: worst).
_SORT_MOVES = 16

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

    def _warm_slot(slots: list[Any], i: int) -> None:
        """Prefetch the objects in ``slots[i]`` and ``slots[i + 1]`` (compiled only)."""
        raise NotImplementedError

    def _warm_line(slots: list[Any], i: int) -> None:
        """Prefetch ``slots[i]`` itself (compiled only)."""
        raise NotImplementedError

    def _ctz(bits: int) -> int:
        """The index of the lowest set bit (compiled only: the calendar's bitmap)."""
        return (bits & -bits).bit_length() - 1

    def _align(buf: bytearray) -> Any:
        """The first 64-byte boundary in ``buf`` (compiled only)."""
        raise NotImplementedError


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
                 "_kept",
                 # the compiled heap (engine.pxd: C fields; unused in pure Python)
                 "_seq", "_n", "_cap", "_nfree", "_heap", "_free", "_heapbuf", "_freebuf",
                 "_slots", "_base", "_ring_n", "_far_n", "_heads", "_tails", "_bits", "_far",
                 "_bucketbuf", "_farbuf", "_chunks", "_spare", "_nchunks", "_nspare",
                 "_chunkbuf", "_sparebuf", "_run", "_runbuf", "_run_i", "_run_n", "_run_cap")

    def __init__(self, seed: int = 0) -> None:
        self.now = 0
        self.seed = seed
        # Mersenne Twister seeded with an int is stable across processes and versions.
        self.rng = random.Random(seed)
        self.events_processed = 0
        self._stopped = False
        #: built inside ``collection_paused(building=True)``: what its runs make is kept with
        #: what the build made (:mod:`mrc.sim.collector`)
        self._kept = building()
        if cython.compiled:
            self._seq = 0
            self._n = 0
            self._cap = 0
            self._nfree = 0
            self._base = 0
            self._ring_n = 0
            self._far_n = 0
            self._nchunks = 0
            self._nspare = 0
            self._run_i = 0
            self._run_n = 0
            self._run_cap = 0
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
        with collection_paused(keep=self._kept):
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
            before = self.pending()
            first_seq = self._seq
            slots = self._slots
            try:
                while self._n or self._run_i < self._run_n or self._refill():
                    # the first event: the run's next or the heap's root (not cached: a
                    # callback may grow the arrays)
                    from_run = self._run_first()
                    first = self._run + 2 * self._run_i if from_run else self._heap + 2
                    t = first[0]
                    slot = 2 * (first[1] & _SLOT_MASK)
                    if t > limit:
                        break
                    self._pop_first(from_run)
                    fn = _take(slots, slot)
                    arg = _take(slots, slot + 1)
                    self.now = t
                    # Prefetch what the next events will touch first, while this one runs
                    # (1.4 us per event at 1024 hosts, where nearly every first touch of
                    # an object misses the L2): the callback and argument of the run's next
                    # event and of the heap's root (one of them runs next), and the slot of
                    # the run's event after that. Hints only: a callback that schedules
                    # earlier events costs a wasted prefetch, never a different order.
                    n = self._run_n - self._run_i
                    if n:
                        run = self._run + 2 * self._run_i
                        _warm_slot(slots, 2 * (run[1] & _SLOT_MASK))
                        if n > 1:
                            _warm_line(slots, 2 * (run[3] & _SLOT_MASK))
                    if self._n:
                        _warm_slot(slots, 2 * (self._heap[3] & _SLOT_MASK))
                    if isinstance(fn, Handler):
                        cython.cast(Handler, fn).fire(arg)
                    else:
                        fn(arg)
            except _Halt:
                return True
            finally:
                self.events_processed += before + (self._seq - first_seq) - self.pending()
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
            if not self._n and self._run_i == self._run_n:
                self._refill()
            from_run = self._run_first()
            first = self._run + 2 * self._run_i if from_run else self._heap + 2
            slot = 2 * (first[1] & _SLOT_MASK)
            self._pop_first(from_run)
            _take(self._slots, slot)
            _take(self._slots, slot + 1)
        else:
            heapq.heappop(self.heap)

    # ------------------------------------------------------------------ views
    def pending(self) -> int:
        if cython.compiled:
            return self._n + (self._run_n - self._run_i) + self._ring_n + self._far_n
        return len(self.heap)

    def next_time(self) -> int | None:
        """When the next event is due (None: nothing scheduled)."""
        if cython.compiled:
            if not self._n and self._run_i == self._run_n and not self._refill():
                return None
            if self._run_first():
                return self._run[2 * self._run_i]
            return self._heap[2]
        return self.heap[0][0] if self.heap else None

    # ------------------------------------------------------------------ the compiled heap
    # Used only when compiled (engine.pxd types them). Records are 16 bytes: the time, and a
    # key ``seq << _SLOT_BITS | slot`` (seqs are unique, so comparing keys compares seqs).
    # Slot s holds the event's callback and argument in _slots[2s] and _slots[2s + 1] (None
    # when free), one cache line; _free[0:_nfree] are the unused slots. The list is read and
    # written with _take and _put (engine.pxd: a reference moved out of or into a list item in
    # a few C instructions, where an indexed store through Cython's generic helper costs a
    # function call and type checks); it stays a list so that the cycle collector sees what
    # the pending events hold.
    #
    # A calendar in front of a heap. Time is cut into buckets of 2**_BUCKET_SHIFT ps (2 ns);
    # _base is the bucket being run. Every pending event is in exactly one of four places:
    # * bucket _base, as the bucket was when its turn came: the run (_run, records
    #   _run_i.._run_n - 1), sorted, read front to back;
    # * bucket <= _base, scheduled since (or the bucket too far from sorted to sort
    #   cheaply: _SORT_MOVES): the heap (_heap, records 1.._n); the next event is the
    #   earlier of the run's next and the heap's root (_run_first);
    # * _base < bucket < _base + _BUCKETS (4.2 us ahead, where nearly every packet event
    #   falls): the ring, an unsorted list of records per bucket, kept in chunks of seven
    #   (128 bytes: the next chunk, a count, the records) from a pool (_chunks, with a stack
    #   of free chunks, _spare); _heads/_tails give each bucket's first and last chunk and
    #   _bits has a bit per non-empty bucket;
    # * further ahead (timers): a second heap, _far (records 1.._far_n).
    # When the run and the heap are both done, _base moves to the next non-empty bucket
    # (_next_bucket) or, with the ring empty, to the first far event's; far events now within
    # the window move to the ring (or, in the new bucket, the heap), and the new bucket's
    # records to the run, sorted by insertion (_sort_run: a bucket's records come in
    # ``seq`` order, so the many events of one instant in a synchronized step are sorted
    # already). A pop is then a read of the next record, not a heap deletion: the heap
    # stays nearly empty, and the cost of an event no longer grows with the events per
    # bucket (some 5 at 128 hosts, 40 at 1024, over a thousand at one instant). Scheduling
    # appends to a chunk, and a bucket is read in order, two cache lines per seven events.
    # The events come out in the same order: every event of a bucket is in the run or the
    # heap before any of them runs, later buckets' after, and ``(time, seq)`` is a total
    # order.
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
        b = time_ps >> _BUCKET_SHIFT
        if b <= self._base:
            self._n += 1
            _heap_insert(self._heap, self._n, time_ps, key)
        elif b - self._base < _BUCKETS:
            self._bucket_append(b, time_ps, key)
        else:
            self._far_n += 1
            _heap_insert(self._far, self._far_n, time_ps, key)

    def _bucket_append(self, b: int, t: int, key: int) -> None:
        """Add record ``(t, key)`` to bucket ``b``'s last chunk (a new one when it is full)."""
        i = b & _BUCKET_MASK
        c = self._tails[i]
        if c < 0 or self._chunks[_CHUNK_WORDS * c + 1] == _CHUNK_RECORDS:
            if not self._nspare:
                self._grow_chunks()
            self._nspare -= 1
            new = self._spare[self._nspare]
            self._chunks[_CHUNK_WORDS * new] = -1
            self._chunks[_CHUNK_WORDS * new + 1] = 0
            if c < 0:
                self._heads[i] = new
                self._bits[i >> 6] |= cython.cast(cython.ulonglong, 1) << (i & 63)
            else:
                self._chunks[_CHUNK_WORDS * c] = new
            self._tails[i] = new
            c = new
        r = _CHUNK_WORDS * c
        n = self._chunks[r + 1]
        self._chunks[r + 2 + 2 * n] = t
        self._chunks[r + 3 + 2 * n] = key
        self._chunks[r + 1] = n + 1
        self._ring_n += 1

    def _grow_chunks(self) -> None:
        """Double the chunk pool (all chunks in use: the new ones are the spares)."""
        old = self._nchunks
        cap = 2 * old if old else _INITIAL_CHUNKS
        chunkbuf = bytearray(8 * _CHUNK_WORDS * cap + 128)
        sparebuf = bytearray(8 * cap)
        chunks = _align(chunkbuf)
        if cython.cast(cython.size_t, chunks) & 64:
            chunks += 8  # (a chunk is two cache lines: the pair the L2 fetches together)
        for i in range(_CHUNK_WORDS * old):
            chunks[i] = self._chunks[i]
        self._chunkbuf: bytearray = chunkbuf
        self._sparebuf: bytearray = sparebuf
        self._chunks: Any = chunks
        self._spare = cython.cast(cython.p_longlong, cython.cast(cython.p_char, sparebuf))
        for i in range(cap - old):
            self._spare[i] = cap - 1 - i
        self._nspare = cap - old
        self._nchunks = cap

    def _pop_first(self, from_run: bool) -> None:
        """Remove the first record, the run's next (``from_run``) or the heap's root, and
        free its slot (the caller takes its callback and argument out of the list)."""
        if from_run:
            self._free[self._nfree] = self._run[2 * self._run_i + 1] & _SLOT_MASK
            self._run_i += 1
        else:
            self._free[self._nfree] = self._heap[3] & _SLOT_MASK
            self._n -= 1
            _heap_remove_root(self._heap, self._n)
        self._nfree += 1

    def _run_first(self) -> bool:
        """Whether the first pending event is the run's next one (else the heap's root)."""
        if self._run_i == self._run_n:
            return False
        if not self._n:
            return True
        run = self._run + 2 * self._run_i
        t = self._heap[2]
        return run[0] < t or (run[0] == t and run[1] < self._heap[3])

    def _refill(self) -> bool:
        """The heap and the run are empty: move the next bucket's events into them. False if
        nothing is pending."""
        if self._ring_n:
            b = self._next_bucket()
        elif self._far_n:
            b = self._far[2] >> _BUCKET_SHIFT
        else:
            return False
        self._base = b
        while self._far_n and (self._far[2] >> _BUCKET_SHIFT) - b < _BUCKETS:
            t = self._far[2]
            key = self._far[3]
            self._far_n -= 1
            _heap_remove_root(self._far, self._far_n)
            if t >> _BUCKET_SHIFT <= b:
                self._n += 1
                _heap_insert(self._heap, self._n, t, key)
            else:
                self._bucket_append(t >> _BUCKET_SHIFT, t, key)
        i = b & _BUCKET_MASK
        c = self._heads[i]
        if c >= 0:
            self._heads[i] = -1
            self._tails[i] = -1
            self._bits[i >> 6] &= ~(cython.cast(cython.ulonglong, 1) << (i & 63))
            n = 0
            while c >= 0:
                r = _CHUNK_WORDS * c
                m = self._chunks[r + 1]
                if n + m > self._run_cap:
                    self._grow_run(2 * (n + m), n)
                for j in range(m):
                    self._run[2 * n] = self._chunks[r + 2 + 2 * j]
                    self._run[2 * n + 1] = self._chunks[r + 3 + 2 * j]
                    n += 1
                self._ring_n -= m
                self._spare[self._nspare] = c
                self._nspare += 1
                c = self._chunks[r]
            if _sort_run(self._run, n, _SORT_MOVES * n):
                self._run_i = 0
                self._run_n = n
            else:  # too far from sorted: a heap (the records are all there, reordered)
                for j in range(n):
                    self._n += 1
                    _heap_insert(self._heap, self._n, self._run[2 * j], self._run[2 * j + 1])
        return True

    def _grow_run(self, cap: int, keep: int) -> None:
        """Room for ``cap`` records in the run (its first ``keep`` are kept)."""
        buf = bytearray(16 * cap + 64)
        run = _align(buf)
        for i in range(2 * keep):
            run[i] = self._run[i]
        self._runbuf: bytearray = buf
        self._run: Any = run
        self._run_cap = cap

    def _next_bucket(self) -> int:
        """The first non-empty bucket after _base (the ring is not empty): a scan of the
        bitmap from _base + 1, wrapping around."""
        start = (self._base + 1) & _BUCKET_MASK
        w = start >> 6
        bits = self._bits[w] & (~cython.cast(cython.ulonglong, 0) << (start & 63))
        while not bits:
            w = (w + 1) & (_BUCKET_WORDS - 1)
            bits = self._bits[w]
        i = w * 64 + _ctz(bits)
        return self._base + 1 + ((i - start) & _BUCKET_MASK)

    def _grow(self, cap: int) -> None:
        """Room for ``cap`` events (C arrays in bytearrays; the old content is kept)."""
        old = self._cap
        if cap > _SLOT_MASK + 1:
            raise OverflowError(f"more than {_SLOT_MASK + 1} events pending")
        heapbuf = bytearray(16 * (cap + 1) + 64)  # records 1..cap, from a 64-byte boundary
        farbuf = bytearray(16 * (cap + 1) + 64)
        freebuf = bytearray(8 * cap)
        heap = _align(heapbuf)
        far = _align(farbuf)
        if old:
            for i in range(2, 2 * self._n + 2):
                heap[i] = self._heap[i]
            for i in range(2, 2 * self._far_n + 2):
                far[i] = self._far[i]
        else:
            self._bucketbuf: bytearray = bytearray(16 * _BUCKETS + 8 * _BUCKET_WORDS + 64)
            self._heads = _align(self._bucketbuf)
            self._tails = self._heads + _BUCKETS
            self._bits = cython.cast(cython.p_ulonglong, self._tails + _BUCKETS)
            for i in range(2 * _BUCKETS):
                self._heads[i] = -1  # (and _tails)
            self._grow_chunks()
        self._heapbuf: bytearray = heapbuf
        self._farbuf: bytearray = farbuf
        self._freebuf: bytearray = freebuf
        self._heap: Any = heap
        self._far: Any = far
        self._free = cython.cast(cython.p_longlong, cython.cast(cython.p_char, freebuf))
        self._slots.extend([None] * (2 * (cap - old)))
        # every slot is in use when the heap grows (or none: the first call)
        self._nfree = cap - old
        for i in range(cap - old):
            self._free[i] = cap - 1 - i
        self._cap = cap


def _heap_insert(heap: Any, i: int, t: int, key: int) -> None:
    """Place record ``(t, key)`` in the 1-based heap whose new last record is ``i``, sifting
    it up. (Compiled only, like the rest of the compiled heap: record j is heap[2j],
    heap[2j + 1], so the two children of record j, 2j and 2j + 1, are the 32 bytes at 32j,
    one cache line.)"""
    while i > 1:
        parent = i >> 1
        pt = heap[2 * parent]
        if pt < t or (pt == t and heap[2 * parent + 1] < key):
            break
        heap[2 * i] = pt
        heap[2 * i + 1] = heap[2 * parent + 1]
        i = parent
    heap[2 * i] = t
    heap[2 * i + 1] = key


def _sort_run(run: Any, n: int, moves: int) -> bool:
    """Sort records 0..n-1 of a run by (time, key), or give up (False) after ``moves``
    record moves, leaving them in some order. Insertion sort: linear on what arrives in
    order (a bucket's records are appended in ``seq`` order, so events of one time, the
    thousand arrivals of a synchronized step, already are), cheap on the few dozen of a
    bucket, and stopped before it turns quadratic. (Compiled only.)"""
    for i in range(1, n):
        t = run[2 * i]
        k = run[2 * i + 1]
        j = i
        while j and (run[2 * j - 2] > t or (run[2 * j - 2] == t and run[2 * j - 1] > k)):
            run[2 * j] = run[2 * j - 2]
            run[2 * j + 1] = run[2 * j - 1]
            j -= 1
        run[2 * j] = t
        run[2 * j + 1] = k
        moves -= i - j
        if moves < 0:
            return False
    return True


def _heap_remove_root(heap: Any, n: int) -> None:
    """Remove the root of the 1-based heap that held records 1..n + 1 (n stay).

    Bottom-up deletion (Floyd's): the hole the root leaves moves down to a leaf along the
    smaller child, one comparison per level, and the last record is sifted up from there.
    That record was scheduled late and belongs near the bottom, so it rarely climbs, where a
    plain sift-down would compare it at every level too."""
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
    _heap_insert(heap, hole, t, k)

