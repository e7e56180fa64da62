# C layout of qp_base.py for the compiled build (mrc/_build.py); the .py is the source.
from mrc.packet cimport Packet

cdef class QpBase:
    cdef public long long qpn
    cdef public object events
    cdef public long long bytes_placed
    cdef public bint failed

    cpdef poll(self, long long now, long long plane)
    cpdef receive(self, long long now, Packet pkt)
    cpdef list take_control(self)
    cpdef next_timer(self)
    cpdef handle_timer(self, long long now)
