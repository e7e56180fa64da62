# C layout of responder.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.packet cimport Packet, psn_diff
from mrc.transport.memory cimport ReceiveBuffer
from mrc.transport.rc.requester cimport RcRequester

# constants: typed copies of imported names
cdef long long ACK, CNP, ECN_CE, FLAG_ACK_REQ, FLAG_ECN_ECHO, FLAG_SEQ_ERR, NACK, PSN_MASK

cdef class RcResponder:
    cdef public object qp
    cdef public RcRequester requester
    cdef public object stats
    cdef public long long qpn, host, peer, plane, _mtu, _ack_every
    cdef public object _cnp_ps
    cdef public long long _epsn
    cdef public ReceiveBuffer _rx
    cdef public long long _rx_posted, _unacked
    cdef public bint _in_gap
    cdef public long long _gap_last
    cdef public object _dup_last
    cdef public bint _ce_pending
    cdef public object _last_cnp
    cdef public object _ack_timer_ps, ack_due  # None: no coalescing timer / none armed
    cdef public long long _last_ev
    cdef public object _np_ps  # None: cc = "window"

    @cython.locals(d=cython.longlong, rx=ReceiveBuffer, cnp=bint)
    cpdef on_data(self, long long now, Packet pkt)
    @cython.locals(flags=cython.longlong, req=RcRequester)
    cpdef _send_ack(self, long long now, long long kind, long long psn, long long ev)
    cpdef on_timer(self, long long now)
    cpdef _send_cnp(self, long long now, long long ev)
