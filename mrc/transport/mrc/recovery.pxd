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
from mrc.transport.mrc.watchdog cimport Watchdog
from mrc.transport.qp_base cimport QpBase
from mrc.packet cimport psn_diff

# constants: typed copies of imported names, and the timer table's
cdef long long FLAG_ECN_ECHO, FLAG_TRIM, NACK, PSN_MASK
cdef long long ACKED, INFLIGHT, LOST, SUSPECT
cdef long long TIMERS, NEVER, _ACK, _GRACE, _RTO, _PROBE

cdef class Recovery:
    # What an ACK (on_ack) and the timer query after it (next_timer) read first, in the C
    # struct's first cache lines (the watchdog too: an ACK that advances resets it);
    # settings after.
    cdef public long long _psn0
    cdef public bint _overdue
    cdef public long long _hold
    cdef public object _fixed_window
    cdef public list scopes
    cdef public Reorder qscope
    cdef public Reorder _touched, _touched_last
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
    cdef public Watchdog watchdog
    cdef public double _margin, _gain
    cdef public long long _grace
    cdef public long long _strikes
    cdef public object _mark_bad

    @cython.locals(stats=MrcStats, nack=bint, snd=Sender, una=cython.longlong,
                   psn0=cython.longlong, una_psn=cython.longlong, cum=cython.longlong,
                   newly=list, acked_bytes=cython.longlong, progress=bint,
                   ts=cython.longlong, index=EvMap, sc=Reorder)
    cpdef on_ack(self, long long now, Packet pkt)
    @cython.locals(snd=Sender, stats=MrcStats, ts=cython.longlong, ecn=bint,
                   echo_seq=cython.longlong, scan=list, overdue=bint,
                   acked_bytes=cython.longlong, seg=Seg, state=cython.longlong, e=Ev,
                   certain=bint, msg=Msg, touched=Reorder, sc=Reorder,
                   spray=Spray)
    cpdef long long _delivered(self, long long now, Packet pkt, list newly, long long una,
                               long long una_psn, bint nack) except? -1
    @cython.locals(qscope=Reorder, age=cython.longlong, last=Reorder)
    cpdef _newest(self, long long now, long long sent, Reorder sc)
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
    @cython.locals(best=cython.longlong, timer=cython.longlong, at=cython.longlong)
    cpdef next_timer(self)
    @cython.locals(timer=cython.longlong, watchdog=Watchdog)
    cpdef handle_timer(self, long long now)
    @cython.locals(q=TxQueue, t=Tx, seg=Seg)
    cdef long long _due(self, long long timer) except? -1
    @cython.locals(receiver=Receiver, q=TxQueue, t=Tx, seg=Seg, limit=cython.longlong,
                   live=bint)
    cdef _serve(self, long long timer, long long now)
    @cython.locals(e=Ev, lost=cython.longlong)
    cpdef _ev_timeout(self, long long now, Seg seg)
