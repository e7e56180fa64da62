# C layout of mrc/sim/host.py for the compiled build (mrc/_build.py).
cimport cython
from mrc.nic.driver cimport NicDriver
from mrc.packet cimport Packet
from mrc.sim.engine cimport Handler, Simulator
from mrc.sim.ports cimport OutPort

cdef unsigned long long _CARRIER_HI, _CARRIER_LO

cdef class Host:
    # What a delivery reads first, in the C struct's first cache line; the rest after.
    cdef public long long index
    cdef public bint _rx_nic
    cdef public NicDriver nic
    cdef public object _on_receive
    cdef public long long rx_packets, rx_bytes
    cdef public Simulator sim
    cdef public object name, net
    cdef public list ports
    cdef public object agent
    cdef public dict drops

    cpdef send_control(self, Packet pkt)
    cpdef kick(self, long long plane)
    cpdef receive(self, Packet pkt)

cdef class NicPort(OutPort):
    cdef public object _tx_done_cb
    cdef public Host host
    cdef public long long paused_priority

    cpdef send(self, Packet pkt)
    cpdef kick(self)
    cpdef _drain(self, long long now)
    cpdef tuple backlog(self)
    cpdef _tx_done(self, long long epoch)
    @cython.locals(pkt=Packet, end=cython.longlong, host=Host, nic=NicDriver)
    cpdef _next(self, long long now)
    cpdef long long set_down(self) except? -1
    cpdef set_up(self)
    cpdef set_rate_fraction(self, fraction)
    cpdef drop_unsent(self, Packet pkt)

cdef class _TxDone(Handler):
    cdef public NicPort port

    cdef void fire(self, object epoch)
