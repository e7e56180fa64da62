# C layout of recovery.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.transport.mrc.cc cimport CongestionControl
from mrc.packet cimport Packet
from mrc.transport.mrc.config cimport MrcStats
from mrc.transport.mrc.evmap cimport EvMap
from mrc.transport.mrc.paths cimport PathManager
from mrc.transport.mrc.receiver cimport Receiver
from mrc.transport.mrc.records cimport Ev, Msg, Seg, Tx, TxQueue
from mrc.transport.mrc.reorder cimport Reorder
from mrc.transport.mrc.sender cimport Sender
from mrc.transport.mrc.spray cimport Spray
from mrc.transport.qp_base cimport QpBase
from mrc.packet cimport psn_diff

# constants: typed copies of imported names
cdef long long FLAG_ECN_ECHO, FLAG_TRIM, NACK, PSN_MASK, SACK_BITS
cdef long long ACKED, INFLIGHT, LOST, SUSPECT

cdef class Recovery:
    # What an ACK (on_ack) and the timer query after it (next_timer) read first, in the C
    # struct's first cache lines (the watchdog's progress too: an ACK that advances resets
    # it); settings after.
    cdef public long long _snd_una, _psn0
    cdef public object _sacked
    cdef public bint _overdue
    cdef public long long _hold
    cdef public object _fixed_window
    cdef public list scopes
    cdef public Reorder qscope
    cdef public Spray _spray
    cdef public MrcStats stats
    cdef public Sender sender
    cdef public CongestionControl cc
    cdef public EvMap _ev_index
    cdef public QpBase qp
    cdef public Receiver receiver
    cdef public TxQueue _gq, _suspects
    cdef public long long rto
    cdef public PathManager paths
    cdef public object watchdog_at
    cdef public double _margin, _gain
    cdef public long long _retries, _last_progress
    cdef public long long _timeout  # (the watchdog's backoff shifts a Python int copy)
    cdef public object config
    cdef public object events
    cdef public long long qpn
    cdef public long long _grace
    cdef public long long _strikes
    cdef public object _mark_bad
    cdef public long long _linear, _error_after

    @cython.locals(stats=MrcStats, nack=bint, snd=Sender, una=cython.longlong,
                   psn0=cython.longlong, una_psn=cython.longlong, cum=cython.longlong,
                   nxt=cython.longlong, span=object, out=list, mask=cython.longlong,
                   newly=list, seg=Seg, seq=cython.longlong, rel=cython.longlong,
                   acked_bytes=cython.longlong, progress=bint, ts=cython.longlong,
                   overdue=bint, learn=bint, e=Ev, index=EvMap, hold=cython.longlong,
                   ecn=bint, echo_seq=cython.longlong, scan=list, scopes=list, qscope=Reorder,
                   touched=Reorder, last=Reorder, state=cython.longlong, certain=bint,
                   sent=cython.longlong, sc=Reorder, age=cython.longlong, msg=Msg,
                   spray=Spray)
    cpdef on_ack(self, long long now, Packet pkt)
    @cython.locals(seg=Seg, snd=Sender, e=Ev, seq=cython.longlong, out=list)
    cpdef bint _on_trim(self, long long now, Packet pkt, long long una,
                        long long una_psn) except? False
    @cython.locals(fifo=TxQueue, tx=cython.longlong, t=Tx, seg=Seg)
    cpdef _infer_losses(self, long long now, Seg acked)
    cpdef _suspect(self, long long now, Tx t, bint overdue)
    @cython.locals(window=cython.longlong, bound=cython.longlong, q=TxQueue,
                   t=Tx, seg=Seg)
    cpdef _scan_overdue(self, long long now, Reorder sc)
    @cython.locals(sc=Reorder, q=Reorder, a=cython.longlong, b=cython.longlong)
    cpdef long long _overdue_bound(self, long long plane) except? -1
    @cython.locals(stats=MrcStats, e=Ev)
    cpdef _overdue_lost(self, long long now, Seg seg)
    cpdef evict(self, Ev e)
    @cython.locals(n=cython.longlong, t=Tx, seg=Seg)
    cpdef long long _lose_fifo(self, Ev e) except? -1
    @cython.locals(snd=Sender)
    cpdef _lose(self, Seg seg)
    @cython.locals(e=Ev)
    cpdef _fifo_lost(self, long long now, Seg seg)
    cpdef long long _psn(self, Seg seg)
    cpdef arm_watchdog(self, long long now)
    cpdef progress(self, long long now)
    @cython.locals(have=bint, best=cython.longlong, q=TxQueue, t=Tx, seg=Seg,
                   at=cython.longlong)
    cpdef next_timer(self)
    @cython.locals(receiver=Receiver, q=TxQueue, t=Tx, seg=Seg, limit=cython.longlong,
                   live=bint)
    cpdef handle_timer(self, long long now)
    @cython.locals(e=Ev, lost=cython.longlong)
    cpdef _ev_timeout(self, long long now, Seg seg)
    @cython.locals(timeout=object)
    cpdef _watchdog(self, long long now)
    cpdef _fail(self, long long now, str reason)
