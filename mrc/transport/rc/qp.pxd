# C layout of qp.py for the compiled build (mrc/_build.py); the .py is the source.
from mrc.packet cimport Packet
from mrc.transport.qp_base cimport QpBase
from mrc.transport.rc.requester cimport RcRequester
from mrc.transport.rc.responder cimport RcResponder

# constants: typed copies of imported names
cdef long long ACK, CNP, DATA, FLAG_SEQ_ERR, NACK

cdef class RcQp(QpBase):
    cdef public long long host, peer, plane
    cdef public object config, error_reason, error_time_ps, stats, listener
    cdef public RcRequester requester
    cdef public RcResponder responder
    cdef public list _ctrl

    cpdef poll(self, long long now, long long plane)
    cpdef receive(self, long long now, Packet pkt)
    cpdef handle_timer(self, long long now)
    cpdef list take_control(self)
    cpdef next_timer(self)
    cpdef _emit(self, event)
