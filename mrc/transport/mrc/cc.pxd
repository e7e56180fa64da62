# C layout of cc.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython

cdef class CongestionControl:
    cdef public long long window

    cpdef on_ack(self, long long now, long long acked_bytes, rtt_ps, bint ecn, long long ev)
    cpdef on_marked_ack(self, long long now, long long acked_bytes, rtt_ps, long long ev,
                        long long slow_ps)
    cpdef on_trim(self, long long now, long long ev)
    cpdef on_loss(self, long long now, long long ev)

cdef class FixedWindow(CongestionControl):
    pass

cdef class Nscc(CongestionControl):
    # What every ACK reads or writes first (after the window), in the C struct's first
    # cache lines; the decrease and quick-adapt state and the settings read rarely after.
    cdef public long long base_rtt, target, _rtt, _fast_bytes
    cdef public double avg_delay, _inc
    cdef public long long _adj_bytes, _adj_start, adjust_bytes, adjust_period, _dec_at
    cdef public bint quick_adapt, learn_base_rtt
    cdef public long long ecn_acks
    cdef public long long min_window, max_window
    cdef public double gamma, max_md_jump, pi_gain, fi, fi_scale, eta
    cdef public long long qa_delay, qa_floor
    cdef public double loss_md
    cdef public long long _hold_until, _qa_interval, _qa_start, _qa_acked
    cdef public bint _qa_armed
    cdef public long long decreases, quick_adapts, trims, adjustments

    @cython.locals(delay=cython.longlong, target=cython.longlong, window=cython.longlong,
                   avg=cython.double)
    cpdef on_ack(self, long long now, long long acked_bytes, rtt_ps, bint ecn, long long ev)
    cpdef on_trim(self, long long now, long long ev)
    cpdef on_loss(self, long long now, long long ev)
    @cython.locals(inc=cython.double, whole=cython.longlong)
    cpdef _adjust(self, long long now, bint below_target)
    cpdef _decrease(self, long long now, double factor)
    @cython.locals(achieved=cython.longlong, acted=bint)
    cpdef bint _quick_adapt(self, long long now, long long acked_bytes,
                            long long delay) except? False
