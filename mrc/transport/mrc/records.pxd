# C layout of records.py for the compiled build (mrc/_build.py); the .py is the source.

cdef class Ev:
    cdef public long long ev, plane
    cdef public object t1, address
    cdef public unsigned long long addr_hi, addr_lo
    cdef public object state
    cdef public bint usable
    cdef public list fifo
    cdef public long long epoch, probe_seq, probe_ok
    cdef public list probes_out
    cdef public long long sent, acked, lost, trims, timeouts, strikes, last_sent, slow

cdef class Msg:
    cdef public object msg_id
    cdef public long long length
    cdef public object key, payload, imm
    cdef public long long posted_ps, next_offset, unacked
    cdef public bint segmented

cdef class Seg:
    cdef public long long seq
    cdef public Msg msg
    cdef public long long offset, length
    cdef public Ev ev
    cdef public long long tx, sent_ps, state, sends
