# C layout of reorder.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from mrc.transport.mrc.records cimport TxQueue

cdef class Reorder:
    cdef public TxQueue dq
    cdef public long long newest, min_rtt, srtt, cur_max, cur_start, prev_max, window
    cdef public bint touched
    cdef public Reorder next_touched

    @cython.locals(srtt=cython.longlong)
    cpdef sample(self, long long now, long long rtt, long long hold_rtts)
    cpdef long long refresh(self, long long rto, double margin, double gain) except? -1
