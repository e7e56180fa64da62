# C layout of requester.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.packet cimport Packet, psn_diff
from mrc.transport.memory cimport segment_digest

# constants: typed copies of imported names
cdef long long ACK, DATA, DATA_HEADER_BYTES, FLAG_ACK_REQ, FLAG_ECN_ECHO, FLAG_LAST
cdef long long FLAG_RETX, PSN_MASK

cdef class _SendMsg:
    cdef public object msg_id
    cdef public long long length, start, end
    cdef public object key
    cdef public long long posted_ps
    cdef public object payload

cdef class RcRequester:
    cdef public object qp, stats, config
    cdef public long long qpn, host, peer, plane
    cdef public dict paths
    cdef public list order
    cdef public object t1, addr
    cdef public long long ev
    cdef public object msgs
    cdef public set _msg_ids
    cdef public long long _cur, una, _nxt, max_sent, _tail
    cdef public double cwnd
    cdef public long long _wnd, _cut_guard, anchor, _retries, _reroute_anchor
    cdef public object timeout_ps, reroute_ps
    cdef public long long _mtu, _psn0, _ack_every
    cdef public object rp  # the DCQCN reaction point (mrc.transport.rc.dcqcn), or None
    cdef public long long _next_tx
    cdef public bint _paced
    cdef public long long _tx_start, _tx_wire, _ovh, _prio

    @cython.locals(seq=cython.longlong, m=_SendMsg, mtu=cython.longlong,
                   offset=cython.longlong, length=cython.longlong, flags=cython.longlong,
                   size=cython.longlong, wire=cython.longlong)
    cpdef poll(self, long long now, long long plane)
    @cython.locals(nak=bint, next_psn=cython.longlong, una=cython.longlong,
                   upto=cython.longlong)
    cpdef on_ack(self, long long now, Packet pkt)
    @cython.locals(acked=cython.longlong, popped=cython.longlong, m=_SendMsg)
    cpdef _progress(self, long long now, long long upto)
    cpdef _on_ecn(self)
    cpdef _rewind(self, long long seq)
    cpdef handle_timer(self, long long now)
    cpdef next_timer(self)
    cpdef _reroute(self, long long now)
    cpdef on_cnp(self, long long now)
    cpdef _repace(self)
