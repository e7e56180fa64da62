# C layout of watchdog.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.transport.mrc.config cimport MrcStats
from mrc.transport.mrc.paths cimport PathManager
from mrc.transport.mrc.receiver cimport Receiver
from mrc.transport.mrc.sender cimport Sender
from mrc.transport.qp_base cimport QpBase

cdef class Watchdog:
    # What every ACK's progress writes first; what an expiry reads after.
    cdef public object at
    cdef public long long _retries, _last_progress
    cdef public long long _timeout  # (the backoff shifts a Python int copy)
    cdef public Sender sender
    cdef public QpBase qp
    cdef public Receiver receiver
    cdef public PathManager paths
    cdef public MrcStats stats
    cdef public object config, events
    cdef public long long qpn, _linear, _error_after

    cpdef configure(self, cfg)
    cpdef arm(self, long long now)
    cpdef progress(self, long long now)
    @cython.locals(timeout=object)
    cpdef expire(self, long long now)
    cpdef fail(self, long long now, str reason)
