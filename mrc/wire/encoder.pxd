# C layout of mrc/wire/encoder.py for the compiled build (see mrc/_build.py). The .py is the
# source; this types what every encoded packet reads: the packet's fields (a C struct, read
# without a Python attribute lookup each) and the header words built from them, all of them
# 64-bit values (the checks in _encode keep them in their wire widths). The header itself is
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
