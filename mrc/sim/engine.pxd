# C layout of mrc/sim/engine.py for the compiled build (see mrc/_build.py). The .py is the
# source; this only declares types. Times are signed 64-bit picoseconds (~106 days).

cimport cython

cdef class Simulator:
    cdef public long long now
    cdef public object seed
    cdef public object rng
    cdef public long long events_processed
    cdef bint _stopped
    # the compiled heap (engine.py: "the compiled heap")
    cdef long long _seq
    cdef Py_ssize_t _n, _cap, _nfree
    cdef long long* _heap
    cdef long long* _free
    cdef bytearray _heapbuf, _freebuf
    cdef list _fns, _args

    cpdef at(self, long long time_ps, object fn, object arg=*)
    cpdef after(self, long long delay_ps, object fn, object arg=*)
    cpdef void schedule(self, long long time_ps, object fn, object arg) except *
    cpdef long long run_until(self, long long time_ps) except? -1
    @cython.locals(before=Py_ssize_t, first_seq=cython.longlong, slot=cython.longlong,
                   t=cython.longlong, fns=list, args=list)
    cdef bint _loop(self, long long limit) except? True
    @cython.locals(slot=cython.longlong)
    cdef void _discard_first(self) noexcept
    cpdef Py_ssize_t pending(self) noexcept
    @cython.locals(slot=cython.longlong, heap=cython.p_longlong, i=Py_ssize_t,
                   parent=Py_ssize_t, t=cython.longlong)
    cdef int _push(self, long long time_ps, long long seq, object fn, object arg) except -1
    @cython.locals(heap=cython.p_longlong, n=Py_ssize_t, last=cython.longlong,
                   t=cython.longlong, s=cython.longlong, i=Py_ssize_t, child=Py_ssize_t,
                   ct=cython.longlong, cs=cython.longlong, dt=cython.longlong,
                   ds=cython.longlong)
    cdef void _pop_first(self) noexcept
    @cython.locals(old=Py_ssize_t, i=Py_ssize_t)
    cdef _grow(self, Py_ssize_t cap)
