# C layout of mrc/sim/switch.py for the compiled build (mrc/_build.py).
cimport cython
from mrc.packet cimport Packet

# constants: typed copies (C integers)
cdef unsigned long long _LOW64, _HIGH32, _LOW32


cdef class Switch:
    # What forwarding reads first, in the C struct's first cache line; the rest after.
    cdef public bint up
    cdef public long long usid, _block
    cdef public long long _next_first, _ua_first
    cdef public list _next_ports, _ua_ports
    cdef public object name, net
    cdef public long long plane, tier, index
    cdef public dict _next, _ua
    cdef public list uplinks, downlinks
    cdef public dict drops

    cpdef receive(self, Packet pkt)
    @cython.locals(top=cython.ulonglong, active=cython.longlong, own=cython.longlong,
                   shift=cython.int, i=Py_ssize_t, low=cython.ulonglong,
                   carrier=cython.ulonglong)
    cpdef object forward(self, Packet pkt)
    cpdef _no_route(self, Packet pkt)
    cpdef _count_drop(self, Packet pkt, str reason)
