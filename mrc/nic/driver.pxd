# C layout of mrc/nic/driver.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.nic.runtime cimport PortSink, RecorderSink, Scheduler
from mrc.packet cimport Packet
from mrc.transport.qp_base cimport QpBase

# constants: typed copies of imported names
cdef long long CNP, FLAG_RETX, PROBE

@cython.final
cdef class QpContext:
    cdef public QpBase qp
    cdef public long long floor, timer, last_placed, last_retx
    cdef public RecorderSink recorder
    cdef public list ports, gaps
    cdef public bint registered

@cython.locals(n=Py_ssize_t, start=Py_ssize_t, i=Py_ssize_t, ctx=QpContext)
cpdef poll_round_robin(list senders, list rr, long long now, long long plane)
cpdef drain_events(QpBase qp, on_event)

cdef class NicDriver:
    # What a packet sent or received reads first (the last two QPs received for, the
    # clock, the recorder, the sending QPs, the timer's callback), in the C struct's first
    # cache lines; the rest after.
    cdef public long long _rx_qpn, _rx_qpn2
    cdef public QpContext _rx_ctx, _rx_ctx2
    cdef public Scheduler sched
    cdef public RecorderSink recorder
    cdef public bint strict
    cdef public long long gap_floor_ps
    cdef public list _senders, _rr
    cdef public list ports
    cdef public set _down
    cdef public object _on_timer_cb
    cdef public Py_ssize_t _kick_from
    cdef public object _after_poll_cb
    cdef public dict _contexts
    cdef public object on_event
    cdef public dict counters
    cdef public object first_rejection

    @cython.locals(ctx=QpContext, senders=list, pkt=Packet, qp=QpBase, control=list,
                   floor=cython.longlong, scheduled=cython.longlong)
    cpdef pull(self, long long now, long long plane, long long paused=*)
    @cython.locals(qpn=cython.longlong, before=cython.longlong, placed=cython.longlong,
                   last=cython.longlong, ctx=QpContext, qp=QpBase)
    cpdef on_receive(self, long long now, Packet pkt)
    @cython.locals(n=Py_ssize_t, start=Py_ssize_t, i=Py_ssize_t, mine=list, ports=list,
                   port=PortSink)
    cpdef _kick(self, QpContext ctx, long long now)
    @cython.locals(qp=QpBase, pkt=Packet)
    cpdef _send_into_dead_port(self, QpContext ctx, PortSink port, long long now)
    @cython.locals(qp=QpBase, control=list)
    cpdef _defer_leftovers(self, QpContext ctx, long long now)
    @cython.locals(qp=QpBase, control=list)
    cpdef _service(self, QpContext ctx, long long now)
    @cython.locals(deadline=cython.longlong, at=cython.longlong, scheduled=cython.longlong)
    cpdef _arm(self, QpContext ctx, long long now)
    @cython.locals(pkt=Packet, ports=list, port=PortSink, kind=cython.longlong,
                   recorder=RecorderSink)
    cpdef _send_control(self, list control, long long now, QpContext ctx)
    @cython.locals(ctx=QpContext, control=list)
    cpdef _after_poll(self, tuple job)
    @cython.locals(qp=QpBase, now=cython.longlong, armed=cython.longlong,
                   deadline=cython.longlong)
    cpdef _on_timer(self, QpContext ctx)
