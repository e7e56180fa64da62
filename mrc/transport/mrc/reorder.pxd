# C layout of reorder.py for the compiled build (mrc/_build.py); the .py is the source.

cdef class Reorder:
    cdef public object dq
    cdef public long long newest, min_rtt, srtt, cur_max, cur_start, prev_max, window

    cpdef sample(self, long long now, long long rtt, long long hold_rtts)
    cpdef long long refresh(self, long long rto, double margin, double gain) except? -1
