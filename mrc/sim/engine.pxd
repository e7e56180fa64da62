# C layout of mrc/sim/engine.py for the compiled build (see mrc/_build.py). The .py is the
# source; this only declares types. Times are signed 64-bit picoseconds (~106 days).

cimport cython

# References moved out of or into the items of a list, for the heap's slot list (engine.py,
# "the compiled heap") and the ports' queues (ports.Fifo): _slot_take moves the reference
# out of an item (None left behind: the caller owns what it returns), _slot_put stores into
# an item (releasing what it held); _take and _put do the same on a list by index, and
# _item_array gives a list's item array itself (valid until the list is resized). Indexes
# are always in range (the heap and the queues hand out only their own slots).
from cpython.object cimport PyObject
cdef extern from *:
    """
    static CYTHON_INLINE PyObject **mrc_item_array(PyObject *list) {
        return ((PyListObject *)list)->ob_item;
    }
    static CYTHON_INLINE PyObject *mrc_slot_take(PyObject **items, Py_ssize_t i) {
        PyObject *obj = items[i];
        Py_INCREF(Py_None);
        items[i] = Py_None;
        return obj;
    }
    static CYTHON_INLINE void mrc_slot_put(PyObject **items, Py_ssize_t i, PyObject *obj) {
        PyObject *old = items[i];
        Py_INCREF(obj);
        items[i] = obj;
        Py_DECREF(old);
    }
    #define mrc_engine_take(list, i) mrc_slot_take(mrc_item_array(list), (i))
    #define mrc_engine_put(list, i, obj) mrc_slot_put(mrc_item_array(list), (i), (obj))
    /* Prefetches (for writing: the first touch of an object is its reference count) of the
       callback and argument in slot i, and of the slot itself: Simulator._loop. */
    static CYTHON_INLINE void mrc_warm_slot(PyObject *list, Py_ssize_t i) {
        PyObject **items = mrc_item_array(list) + i;
        __builtin_prefetch(items[0], 1, 3);
        __builtin_prefetch(items[1], 1, 3);
    }
    static CYTHON_INLINE void mrc_warm_line(PyObject *list, Py_ssize_t i) {
        __builtin_prefetch(mrc_item_array(list) + i, 1, 3);
    }
    static CYTHON_INLINE int mrc_ctz(unsigned long long x) { return __builtin_ctzll(x); }
    static CYTHON_INLINE long long *mrc_engine_align(PyObject *buf) {
        size_t p = (size_t)PyByteArray_AS_STRING(buf);
        return (long long *)((p + 63) & ~(size_t)63);
    }
    """
    PyObject** _item_array "mrc_item_array"(list items)
    object _slot_take "mrc_slot_take"(PyObject** items, Py_ssize_t i)
    void _slot_put "mrc_slot_put"(PyObject** items, Py_ssize_t i, object obj)
    object _take "mrc_engine_take"(list slots, Py_ssize_t i)
    void _put "mrc_engine_put"(list slots, Py_ssize_t i, object obj)
    long long* _align "mrc_engine_align"(bytearray buf)
    int _ctz "mrc_ctz"(unsigned long long x) noexcept
    void _warm_slot "mrc_warm_slot"(list slots, Py_ssize_t i) noexcept
    void _warm_line "mrc_warm_line"(list slots, Py_ssize_t i) noexcept

# the compiled heap's record keys and its ring of buckets (engine.py)
cdef long long _SLOT_BITS, _SLOT_MASK, _MAX_SEQ
cdef long long _BUCKET_SHIFT, _BUCKETS, _BUCKET_MASK, _BUCKET_WORDS
cdef long long _CHUNK_WORDS, _CHUNK_RECORDS, _INITIAL_CHUNKS, _SORT_MOVES

@cython.locals(parent=Py_ssize_t, pt=cython.longlong)
cdef void _heap_insert(long long* heap, Py_ssize_t i, long long t, long long key) noexcept
@cython.locals(t=cython.longlong, k=cython.longlong, child=Py_ssize_t, hole=Py_ssize_t,
               ct=cython.longlong, dt=cython.longlong)
cdef void _heap_remove_root(long long* heap, Py_ssize_t n) noexcept
@cython.locals(i=Py_ssize_t, j=Py_ssize_t, t=cython.longlong, k=cython.longlong)
cdef bint _sort_run(long long* run, Py_ssize_t n, Py_ssize_t moves) noexcept

cdef class Handler:
    cdef void fire(self, object arg)

@cython.final
cdef class Simulator:
    cdef public long long now
    cdef public object seed
    cdef public object rng
    cdef public long long events_processed
    cdef bint _stopped, _kept
    # the compiled heap (engine.py: "the compiled heap")
    cdef long long _seq
    cdef Py_ssize_t _n, _cap, _nfree
    cdef long long* _heap
    cdef long long* _free
    cdef bytearray _heapbuf, _freebuf
    cdef list _slots
    cdef long long _base
    cdef Py_ssize_t _ring_n, _far_n, _nchunks, _nspare
    cdef long long* _heads
    cdef long long* _tails
    cdef unsigned long long* _bits
    cdef long long* _far
    cdef long long* _chunks
    cdef long long* _spare
    cdef bytearray _bucketbuf, _farbuf, _chunkbuf, _sparebuf
    cdef long long* _run
    cdef bytearray _runbuf
    cdef Py_ssize_t _run_i, _run_n, _run_cap

    cpdef at(self, long long time_ps, object fn, object arg=*)
    cpdef after(self, long long delay_ps, object fn, object arg=*)
    cpdef void schedule(self, long long time_ps, object fn, object arg) except *
    cpdef Py_ssize_t run_until(self, long long time_ps) except -1
    @cython.locals(before=Py_ssize_t, first_seq=cython.longlong, slot=cython.longlong,
                   t=cython.longlong, slots=list, n=Py_ssize_t, run=cython.p_longlong,
                   from_run=bint, first=cython.p_longlong)
    cdef bint _loop(self, long long limit) except? True
    @cython.locals(slot=cython.longlong, from_run=bint, first=cython.p_longlong)
    cdef int _discard_first(self) except -1
    cpdef Py_ssize_t pending(self) noexcept
    @cython.locals(slot=cython.longlong, key=cython.longlong, b=cython.longlong)
    cdef int _push(self, long long time_ps, long long seq, object fn, object arg) except -1
    @cython.locals(i=cython.longlong, c=cython.longlong, new=cython.longlong,
                   r=cython.longlong, n=cython.longlong)
    cdef int _bucket_append(self, long long b, long long t, long long key) except -1
    @cython.locals(old=Py_ssize_t, cap=Py_ssize_t, i=Py_ssize_t, chunks=cython.p_longlong)
    cdef _grow_chunks(self)
    cdef void _pop_first(self, bint from_run) noexcept
    @cython.locals(run=cython.p_longlong, t=cython.longlong)
    cdef inline bint _run_first(self) noexcept
    @cython.locals(b=cython.longlong, t=cython.longlong, key=cython.longlong,
                   i=cython.longlong, c=cython.longlong, r=cython.longlong, j=cython.longlong,
                   n=Py_ssize_t, m=cython.longlong)
    cdef bint _refill(self) except? False
    @cython.locals(buf=bytearray, run=cython.p_longlong, i=Py_ssize_t)
    cdef _grow_run(self, Py_ssize_t cap, Py_ssize_t keep)
    @cython.locals(start=cython.longlong, w=cython.longlong, bits=cython.ulonglong)
    cdef long long _next_bucket(self) noexcept
    @cython.locals(old=Py_ssize_t, i=Py_ssize_t, heap=cython.p_longlong,
                   far=cython.p_longlong)
    cdef _grow(self, Py_ssize_t cap)
