# C layout of qp.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.transport.mrc.cc cimport CongestionControl
from mrc.packet cimport Packet
from mrc.transport.mrc.config cimport MrcStats
from mrc.transport.mrc.paths cimport PathManager
from mrc.transport.mrc.receiver cimport Receiver
from mrc.transport.mrc.recovery cimport Recovery
from mrc.transport.mrc.sender cimport Sender
from mrc.transport.mrc.watchdog cimport Watchdog
from mrc.transport.qp_base cimport QpBase

# constants: typed copies of imported names
cdef long long ACK, DATA, NACK, PROBE, PROBE_REPLY

cdef class MrcQueuePair(QpBase):
    # The rooms every packet is handed to, and the control queue, first (next to QpBase's
    # fields in the C struct's first cache line); the rest after.
    cdef public Sender _sender
    cdef public Receiver _receiver
    cdef public Recovery _recovery
    cdef public list control
    cdef public Watchdog _watchdog
    cdef public PathManager _path_manager
    cdef public long long host, peer, peer_qpn, mtu
    cdef public object config, key_seed
    cdef public object error_reason
    cdef public MrcStats stats
    cdef public CongestionControl cc
    cdef public long long _rto

    cpdef poll(self, long long now, long long plane)
    @cython.locals(kind=cython.longlong)
    cpdef receive(self, long long now, Packet pkt)
    cpdef list take_control(self)
    cpdef next_timer(self)
    cpdef handle_timer(self, long long now)
