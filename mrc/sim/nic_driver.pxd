# C layout of nic_driver.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.packet cimport Packet
from mrc.sim.engine cimport Simulator
from mrc.sim.ports cimport OutPort
from mrc.sim.recorder cimport Recorder
from mrc.transport.qp_base cimport QpBase

# constants: typed copies of imported names
cdef long long CNP, FLAG_RETX, PROBE

@cython.locals(n=Py_ssize_t, start=Py_ssize_t, i=Py_ssize_t, qp=QpBase)
cpdef poll_round_robin(list senders, list rr, long long now, long long plane)
cpdef drain_events(QpBase qp, on_event)
@cython.locals(sim_port=OutPort)
cdef _kick_port(port)

cdef class NicDriver:
    # What a packet sent or received reads first (the last two QPs received for, the
    # engine, the recorder, the sending QPs, the timer's callback, the per-QP recorders),
    # in the C struct's first cache lines; the rest after.
    cdef public long long _rx_qpn, _rx_qpn2
    cdef public QpBase _rx_qp, _rx_qp2
    cdef public Simulator _sim
    cdef public Recorder recorder
    cdef public bint _defer, strict
    cdef public list _senders, _rr
    cdef public list _ports
    cdef public set _down
    cdef public object _on_timer_cb
    cdef public dict recorders
    cdef public Py_ssize_t _kick_from
    cdef public object _send_later_cb
    cdef public object sched
    cdef public object ports
    cdef public object on_event, _placed, _count
    cdef public dict qps
    cdef public dict counters
    cdef public object first_rejection

    cpdef pull(self, long long now, long long plane)
    @cython.locals(floor=cython.longlong, scheduled=cython.longlong, control=list, qp=QpBase,
                   senders=list, pkt=Packet)
    cpdef pull_port(self, long long now, long long plane, long long paused)
    @cython.locals(qpn=cython.longlong, before=cython.longlong, placed=cython.longlong,
                   qp=QpBase)
    cpdef on_receive(self, long long now, Packet pkt)
    @cython.locals(n=Py_ssize_t, start=Py_ssize_t, i=Py_ssize_t, mine=list, ports=list)
    cpdef _kick(self, QpBase qp, long long now)
    @cython.locals(control=list)
    cpdef _service(self, QpBase qp, long long now)
    @cython.locals(deadline=cython.longlong, at=cython.longlong, scheduled=cython.longlong)
    cpdef _arm(self, QpBase qp, long long now)
    cpdef _at(self, long long time_ps, fn, arg)
    cpdef _send_polled(self, list control, long long now)
    @cython.locals(pkt=Packet, ports=list, sim_port=OutPort)
    cpdef _send_control(self, list control, long long now)
    cpdef _send_later(self, list control)
    @cython.locals(now=cython.longlong, armed=cython.longlong, deadline=cython.longlong)
    cpdef _on_timer(self, QpBase qp)
