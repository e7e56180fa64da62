# C layout of cc.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython

cdef class CongestionControl:
    cdef public long long window

    cpdef on_ack(self, long long now, long long acked_bytes, rtt_ps, bint ecn, long long ev)
    cpdef on_trim(self, long long now, long long ev)
    cpdef on_loss(self, long long now, long long ev)

cdef class FixedWindow(CongestionControl):
    pass

cdef class Nscc(CongestionControl):
    cdef public long long min_window, max_window, base_rtt, target
    cdef public double gamma, max_md_jump, pi_gain, fi, fi_scale, eta
    cdef public bint quick_adapt
    cdef public long long qa_delay, qa_floor
    cdef public bint learn_base_rtt
    cdef public double loss_md
    cdef public long long adjust_bytes, adjust_period
    cdef public long long _rtt, _hold_until, _qa_interval, _qa_start, _qa_acked
    cdef public bint _qa_armed
    cdef public double _inc
    cdef public long long _adj_bytes, _adj_start, _fast_bytes
    cdef public long long decreases, quick_adapts, trims, ecn_acks, adjustments
    cdef public double avg_delay
    cdef public long long _dec_at

    @cython.locals(delay=cython.longlong, target=cython.longlong, window=cython.longlong,
                   factor=cython.double, avg=cython.double)
    cpdef on_ack(self, long long now, long long acked_bytes, rtt_ps, bint ecn, long long ev)
    cpdef on_trim(self, long long now, long long ev)
    cpdef on_loss(self, long long now, long long ev)
    @cython.locals(inc=cython.double, whole=cython.longlong)
    cpdef _adjust(self, long long now, bint below_target)
    cpdef _decrease(self, long long now, double factor)
    @cython.locals(achieved=cython.longlong, acted=bint)
    cpdef bint _quick_adapt(self, long long now, long long acked_bytes,
                            long long delay) except? False
