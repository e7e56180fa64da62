# C layout of mrc/stack/recorder.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.nic.runtime cimport RecorderSink

cdef class _Series:
    cdef public list values

cdef class Recorder(RecorderSink):
    cdef public long long planes, bin_ps
    cdef public _Series goodput
    cdef public list goodput_plane
    cdef public long long _bin, _bin_bytes
    cdef public long long[::1] _bin_plane
    cdef public dict counters
    cdef public long long bytes_delivered, packets_delivered
    cdef public dict _gauge_now, _gauge_changes
    cdef public bint pfc
    cdef public long long _paused_now
    cdef public list _paused_changes
    cdef public dict samples

    @cython.locals(index=cython.longlong)
    cpdef placed(self, long long now, long long plane, long long nbytes)
    @cython.locals(index=cython.longlong, plane=Py_ssize_t, amount=cython.longlong)
    cpdef _close_bin(self)
    cpdef count(self, name, long long now, long long amount=*)
