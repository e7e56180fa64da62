# C layout of mrc/sim/pfc_ports.py for the compiled build (mrc/_build.py); the .py is the
# source. Each port declares the pause state of mrc.sim.pfc.PauseState (its Python mixin,
# PAUSE_SLOTS) as C fields beside its own, what every packet-hop reads first.
cimport cython
from mrc.nic.driver cimport NicDriver
from mrc.packet cimport Packet
from mrc.sim.fifo cimport Fifo
from mrc.sim.host cimport Host, NicPort
from mrc.sim.pfc cimport PfcIngress
from mrc.sim.ports cimport OutPort

# constants: typed copies of imported names
cdef long long DATA, ECN_CE, ECN_NOT_ECT, PAUSE, LOST_EPOCH

cdef class PfcPort(OutPort):
    # What every packet-hop reads first (as in OutPort: the C struct's order), then the rest
    # of PauseState (PAUSE_SLOTS) and of PfcPort.
    cdef public PfcIngress ingress
    cdef public long long pfc_prio
    cdef public Host _host
    cdef public long long _lqb
    cdef public bint paused, _turn, rx_stalled, storm
    cdef public Fifo lq
    cdef public long long _clock_at, _kmin
    cdef public object reverse
    cdef public long long quantum_ps
    cdef public long long pause_since, pause_gen, pause_until, pause_received, pause_sent
    cdef public long long paused_ps, watchdog_ps, restore_ps
    cdef public long long storms, last_pause_rx
    cdef public object _expire_cb, _pause_cb
    cdef public long long peak_lqbytes
    cdef public object _clock_cb
    cdef public object held
    cdef public long long _kmax
    cdef public double _pslope

    cpdef send(self, Packet pkt)
    @cython.locals(now=cython.longlong, kind=cython.longlong, lossless=bint,
                   size=cython.longlong, lqb=cython.longlong)
    cpdef send_from(self, Packet pkt, PfcIngress src)
    @cython.locals(t=cython.longlong, size=cython.longlong, pkt=Packet, src=PfcIngress,
                   paused=bint, turn=bint, lqb=cython.longlong)
    cpdef _drain(self, long long now)
    @cython.locals(t=cython.longlong)
    cpdef _arm_clock(self)
    @cython.locals(now=cython.longlong)
    cpdef _clock(self, _)
    @cython.locals(now=cython.longlong)
    cpdef bint _arrival(self, Packet pkt) except? False
    cpdef arrive(self, Packet pkt)
    @cython.locals(port=PfcPort)
    cpdef _arrive_switch(self, Packet pkt)
    @cython.locals(now=cython.longlong)
    cpdef _lost(self, Packet pkt)
    cpdef sync(self)
    cpdef tuple backlog(self)
    cpdef long long set_down(self) except? -1

cdef class PfcNicPort(NicPort):
    # What every packet-hop reads first (as in OutPort), then the rest of PauseState
    # (PAUSE_SLOTS)
    cdef public PfcIngress ingress
    cdef public Packet _parked
    cdef public bint paused, storm
    cdef public long long pfc_prio
    cdef public object reverse
    cdef public long long quantum_ps
    cdef public long long pause_since, pause_gen, pause_until, pause_received, pause_sent
    cdef public long long paused_ps, watchdog_ps, restore_ps
    cdef public long long storms, last_pause_rx
    cdef public object _expire_cb, _pause_cb

    @cython.locals(now=cython.longlong, port=PfcPort)
    cpdef _arrive_switch(self, Packet pkt)
    @cython.locals(pkt=Packet, end=cython.longlong, host=Host, nic=NicDriver)
    cpdef _next(self, long long now)
    cpdef long long set_down(self) except? -1
