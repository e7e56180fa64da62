# C layout of receiver.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.packet cimport Packet, make_packet
from mrc.transport.memory cimport ReceiveBuffer
from mrc.transport.mrc.config cimport MrcStats
from mrc.transport.mrc.evmap cimport EvMap
from mrc.packet cimport psn_diff

# constants: typed copies of imported names, and this module's private ones
cdef long long ACK, ACK_BYTES, ECN_CE, FLAG_ACK_REQ, FLAG_ECN_ECHO, FLAG_IMM, FLAG_TRIM, NACK
# (not SACK_BITS: 1 << SACK_BITS needs 65 bits)
cdef long long PROBE_BYTES, PROBE_REPLY, PSN_MASK
cdef object _SMALL  # (1 << 62: a Python int, compared with the Python-int bitmap)
cdef unsigned long long _BIT0
cdef object _ONE

cdef class Receiver:
    # What a data packet and its ACK read first, in the C struct's first cache lines; what a
    # message's start or a probe reads after.
    cdef public object qp
    cdef public MrcStats stats
    cdef public long long host, peer, peer_qpn, _ack_every, _ack_delay
    cdef public EvMap _reply
    cdef public long long _rcv_next
    cdef public object _rcv_bits
    cdef public ReceiveBuffer _cur
    cdef public list _unrep
    cdef public object ack_due
    cdef public long long _max_ahead
    cdef public object events
    cdef public long long qpn, mtu
    cdef public list _evs
    cdef public dict _rx, _rx_imm

    @cython.locals(stats=MrcStats, nxt=cython.longlong, seq=cython.longlong,
                   rel=cython.longlong, bits=object, small=cython.ulonglong, seen=bint,
                   buf=ReceiveBuffer, placed=cython.longlong,
                   unrep=list, item=tuple, ecn=bint)
    cpdef long long on_data(self, long long now, Packet pkt) except? -1
    @cython.locals(small=cython.ulonglong, run=cython.longlong)
    cpdef _arrived(self, long long nxt, long long rel, bits)
    @cython.locals(msg_id=object)
    cpdef _complete(self, long long now, ReceiveBuffer buf)
    cpdef ack_timeout(self, long long now)
    @cython.locals(nxt=cython.longlong, items=list, top=cython.longlong, base=cython.longlong,
                   k=Py_ssize_t, first=bint, echo=tuple)
    cpdef _send_acks(self, long long now, tuple trigger, bint ecn)
    @cython.locals(seq=cython.longlong, ev=cython.longlong, ts=cython.longlong,
                   path=EvMap, shift=cython.longlong, small=cython.ulonglong)
    cpdef _emit_ack(self, long long nxt, long long base, bits, tuple echo, bint ecn)
    @cython.locals(nxt=cython.longlong, top=cython.longlong, base=cython.longlong,
                   path=EvMap)
    cpdef _send_nack(self, Packet pkt)
    @cython.locals(path=EvMap)
    cpdef reply_probe(self, Packet pkt)
    @cython.locals(reply=EvMap)
    cpdef EvMap _reply_path(self, long long ev)
