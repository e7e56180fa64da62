# C layout of mrc/wire/encoder.py for the compiled build (see mrc/_build.py). The .py is the
# source; this types what every encoded packet reads: the packet's fields (a C struct, read
# without a Python attribute lookup each) and the header words built from them, all of them
# 64-bit values (_check_fields keeps them in their wire widths). The header itself is
# still one struct.pack.

cimport cython
from mrc.packet cimport Packet

@cython.locals(kind=cython.longlong, qpn=cython.longlong, psn=cython.longlong,
               src=cython.longlong, dst=cython.longlong, ev=cython.longlong,
               flags=cython.longlong, ecn=cython.longlong, hlim=cython.longlong,
               da_hi=cython.ulonglong, da_lo=cython.ulonglong, fl=cython.longlong,
               sport=cython.longlong, tc_out=cython.longlong, tc_in=cython.longlong,
               vtf_out=cython.longlong, vtf_in=cython.longlong, bth_psn=cython.longlong,
               n=cython.longlong, msg_id=cython.longlong, iplen=cython.longlong,
               syndrome=cython.longlong)
cpdef bytes _encode(Packet p, object payload_sum=*)
# the parts of _encode: static C functions of this module (no Python call per packet; the C
# compiler is free to inline them)
cdef int _check_fields(long long qpn, long long psn, long long src, long long dst,
                      long long ev, long long ecn, long long hlim) except -1
@cython.locals(kind=cython.longlong, src=cython.longlong, dst=cython.longlong,
               iplen=cython.longlong)
cdef bytes _probe_or_cnp_header(Packet p, long long vtf_out, long long vtf_in,
                                long long hlim, long long sport, long long bth_psn)
cdef object _seal(Packet p, object hdr, long long iplen, long long n, object payload,
                  object payload_sum)
