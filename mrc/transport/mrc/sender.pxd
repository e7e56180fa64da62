# C layout of sender.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.transport.mrc.cc cimport CongestionControl
from mrc.packet cimport Packet, make_packet, psn_diff
from mrc.transport.mrc.config cimport MrcStats
from mrc.transport.memory cimport segment_digest
from mrc.transport.mrc.records cimport Ev, Msg, Seg, Tx, TxQueue, new_seg, new_tx
from mrc.transport.mrc.spray cimport Spray

# constants: typed copies of imported names
cdef long long DATA, DATA_HEADER_BYTES, FLAG_ACK_REQ, FLAG_IMM, FLAG_LAST, FLAG_RETX
cdef long long IMMDT_BYTES, PSN_MASK, SACK_BITS, INFLIGHT, LOST

cdef class Sender:
    # In the order of the C struct: what every packet sent or acknowledged reads first, so a
    # sender gone cold since its last packet costs three cache lines rather than five; what
    # a message's start or end reads after.
    cdef public MrcStats stats
    cdef public long long host, peer, peer_qpn, mtu
    cdef public CongestionControl cc
    cdef public long long psn0
    cdef public bint _overdue
    cdef public list good
    cdef public Msg cur
    cdef public object retx
    cdef public long long _tx, pipe
    cdef public TxQueue sent
    cdef public list sent_on_plane
    cdef public TxQueue sent_on_qp
    cdef public long long _mpr_psns, unsent
    cdef public list outstanding
    cdef public long long snd_nxt, una, outstanding_count
    cdef public object _sacked
    cdef public Spray spray
    cdef public object events
    cdef public long long qpn
    cdef public bint _ack_req_on_last, _completions, sendable
    cdef public object queue
    cdef public long long _max_wimm, wimm_out
    cdef public object held

    cpdef post(self, Msg msg)
    cpdef bint has_work(self) except? False
    @cython.locals(good=list, pipe=cython.longlong, window=cython.longlong,
                   unsent=cython.longlong, seg=Seg, msg=Msg, offset=cython.longlong,
                   length=cython.longlong, seq=cython.longlong, ring=list)
    cpdef poll(self, long long now, long long plane)
    @cython.locals(una=cython.longlong, nxt=cython.longlong, out=list, mask=cython.longlong,
                   newly=list, seg=Seg, seq=cython.longlong, rel=cython.longlong, span=object)
    cpdef list take_acked(self, long long cum, sack, long long sack_base)
    @cython.locals(ring=list, mask=cython.longlong, seg=Seg)
    cpdef _grow_outstanding(self)
    @cython.locals(e=Ev, tx=cython.longlong, t=Tx, q=TxQueue, length=cython.longlong,
                   stats=MrcStats, msg=Msg, offset=cython.longlong, flags=cython.longlong,
                   size=cython.longlong, digest=cython.ulonglong)
    cpdef Packet _transmit(self, long long now, Seg seg, long long plane, list good, bint retx)
    cpdef completed(self, long long now, Msg msg)
