# C layout of mrc/sim/nic.py for the compiled build (mrc/_build.py); the .py is the source.
from mrc.nic.driver cimport NicDriver
from mrc.nic.runtime cimport PortSink, Scheduler
from mrc.packet cimport Packet
from mrc.sim.engine cimport Simulator
from mrc.sim.host cimport Host, NicPort

cdef class SimClock(Scheduler):
    cdef public Simulator sim

    cpdef long long now(self) except? -1
    cpdef at(self, long long time_ps, fn, arg)

cdef class PortLink(PortSink):
    cdef public NicPort port

    cpdef kick(self)
    cpdef send(self, Packet pkt)
    cpdef drop_unsent(self, Packet pkt)

cdef class Nic(NicDriver):
    cdef public Host host
