# C layout of records.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython

cdef class Tx

cdef class TxQueue:
    cdef public Tx head, tail
    cdef public long long link

    @cython.locals(tail=Tx, link=cython.longlong)
    cpdef void push(self, Tx t) noexcept
    @cython.locals(t=Tx, link=cython.longlong)
    cpdef void pop(self) noexcept

cdef class Ev(TxQueue):
    # What a packet's send (spray, transmit) and its ACK touch first, after the FIFO's ends
    # (TxQueue's fields), in one or two cache lines of the C struct; the probe state and
    # the rarer counters after.
    cdef public long long ev, plane
    cdef public bint usable
    cdef public unsigned long long addr_hi, addr_lo
    cdef public long long sent, last_sent, acked, strikes
    cdef public object state
    cdef public object t1, address
    cdef public long long epoch, probe_seq, probe_ok
    cdef public list probes_out
    cdef public long long lost, trims, timeouts, slow

cdef class Msg:
    cdef public object msg_id
    cdef public long long length
    cdef public object key, payload, imm
    cdef public long long posted_ps, next_offset, unacked
    cdef public bint segmented

cdef class Seg:
    cdef public long long seq
    cdef public Msg msg
    cdef public long long offset, length
    cdef public Ev ev
    cdef public long long tx, sent_ps, state, sends

cdef class Tx:
    cdef public long long sent_ps
    cdef public Seg seg
    cdef public long long tx
    cdef public Tx next_sent, next_ev, next_plane, next_qp
    cdef public long long due
    cdef public bint overdue
    cdef public Tx next_suspect

cdef long long _EV, _SENT, _PLANE, _QP

@cython.locals(seg=Seg)
cpdef Seg new_seg(long long seq, Msg msg, long long offset, long long length)
@cython.locals(t=Tx)
cpdef Tx new_tx(long long sent_ps, Seg seg, long long tx)
