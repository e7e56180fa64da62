# C layout of paths.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.packet cimport Packet
from mrc.transport.mrc.config cimport MrcStats
from mrc.transport.mrc.evmap cimport EvMap
from mrc.transport.mrc.records cimport Ev
from mrc.packet cimport psn_diff

# constants: typed copies of imported names
cdef long long PROBE, PSN_MASK

cdef class PathManager:
    cdef public object qp, config
    cdef public MrcStats stats
    cdef public object events
    cdef public list evs
    cdef public EvMap index
    cdef public list plane_evs, good
    cdef public object probe_q
    cdef public long long _probe_timeout
    cdef public object progress, evict
    cdef public long long good_count, bad_count, min_active

    cpdef set_state(self, long long now, Ev e, new, str reason)
    cpdef bint mark_bad(self, long long now, Ev e, str reason) except? False
    @cython.locals(e=Ev, epoch=cython.longlong)
    cpdef next_probe(self)
    @cython.locals(e=Ev, epoch=cython.longlong, interval=cython.longlong)
    cpdef send_due_probes(self, long long now)
    @cython.locals(limit=cython.longlong)
    cpdef _send_probe(self, long long now, Ev e)
    @cython.locals(e=Ev, s=cython.longlong)
    cpdef on_probe_reply(self, long long now, Packet pkt)
