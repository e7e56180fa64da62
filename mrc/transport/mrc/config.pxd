# C layout of config.py for the compiled build (mrc/_build.py); the .py is the source.

cdef class MrcStats:
    # The counters every packet moves first (sender, receiver, ACK), so they share the
    # struct's first cache line; the rest in the order of config.py.
    cdef public long long data_sent, bytes_sent, acks_received, data_received, acks_sent
    cdef public long long retransmissions
    cdef public long long nacks_sent, nacks_received, trims
    cdef public long long ecn_echoes, losses, overdue_losses, evicted
    cdef public long long timeouts, packets_timed_out, qp_timeouts, probes_sent
    cdef public long long probes_answered, probe_replies_sent, paths_marked_bad, reintegrated
    cdef public long long spurious_losses, duplicates, trimmed_received
    cdef public long long bad_packets, messages_sent, messages_received, reply_fallbacks
    cdef public long long dropped_after_error, bad_refused_min_active, wimm_waits, beyond_mpr
    cdef public long long slow_deliveries
