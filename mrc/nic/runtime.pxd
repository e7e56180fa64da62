# C layout of mrc/nic/runtime.py for the compiled build (mrc/_build.py); the .py is the source.
from mrc.packet cimport Packet

cdef class PortSink:
    cdef public long long plane

    cpdef kick(self)
    cpdef send(self, Packet pkt)
    cpdef drop_unsent(self, Packet pkt)

cdef class Scheduler:
    cpdef long long now(self) except? -1
    cpdef at(self, long long time_ps, fn, arg)

cdef class RecorderSink:
    cpdef placed(self, long long now, long long plane, long long nbytes)
    cpdef count(self, name, long long now, long long amount=*)
