# C layout of spray.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.transport.mrc.config cimport MrcStats
from mrc.transport.mrc.records cimport Ev

cdef class SprayPlane:
    cdef public long long rr, explore
    cdef public object recycle
    cdef public long long age, at

cdef class Spray:
    # What every choice and feedback reads first (the C struct's order); the rest after.
    cdef public list _planes
    cdef public bint _reps, _aware
    cdef public long long _every
    cdef public long long _ref, _floor, _margin
    cdef public long long _step, _horizon, _now_min, _old_min, _min_until
    cdef public MrcStats _stats
    cdef public list _good
    cdef public double _margin_f
    cdef public bint _tail

    @cython.locals(p=SprayPlane, ref=cython.longlong)
    cpdef feedback(self, long long now, Ev e, long long age, bint marked)
    @cython.locals(recent=cython.longlong)
    cpdef long long slow_after(self) except? -1
    @cython.locals(planes=list, p=SprayPlane, a=cython.longlong, fresh=cython.longlong,
                   best=cython.longlong, b=cython.longlong, k=Py_ssize_t, good=list)
    cpdef bint declines(self, long long now, long long plane, long long unsent,
                        long long window) except? False
    cpdef _set_floor(self, long long age)
    @cython.locals(p=SprayPlane, n=cython.longlong, e=Ev, count=Py_ssize_t, i=Py_ssize_t)
    cpdef Ev choose(self, long long plane, list good, Ev avoid)
