# C layout of mrc/packet.py for the compiled build (mrc/_build.py); the .py is the source.
# Fields that can exceed 63 bits stay Python ints: the 64-bit wire fields (RETH offset,
# message length, SACK bitmap); the address is two unsigned 64-bit halves and the digest
# (simulation only, always a u64) is unsigned; the rest are C integers.
cimport cython

cdef class Packet:
    # In the order of the C struct: what every hop reads or writes first (ports, switches,
    # the NIC's delivery), so a packet that went cold in its queue costs one or two cache
    # lines per hop, not four; the transport's fields after.
    cdef public long long kind, size, hop_epoch, prio, ecn
    cdef public bint trimmed
    cdef public unsigned long long da_hi, da_lo
    cdef public long long hop_limit, plane, dst, qpn
    cdef public long long src, psn, ev, msg_id
    cdef public object offset
    cdef public long long length
    cdef public object msg_len
    cdef public long long flags, ts, imm, echo_psn, sack_base
    cdef public object sack
    cdef public object payload
    cdef public unsigned long long digest
    cdef public object frame

cpdef long long data_bytes(long long length, bint imm=*)
cpdef long long psn_add(long long psn, long long n) noexcept
@cython.locals(d=cython.longlong)
cpdef long long psn_diff(long long a, long long b) noexcept
cpdef long long natural_size(long long kind, long long length=*, long long flags=*)
@cython.locals(pkt=Packet)
cpdef Packet make_packet(long long kind, long long src, long long dst, long long qpn,
                         long long psn, long long ev, long long msg_id, offset,
                         long long length, msg_len, long long flags, long long ts,
                         long long imm, long long echo_psn, long long sack_base, sack,
                         unsigned long long da_hi, unsigned long long da_lo, long long size,
                         payload, unsigned long long digest, long long plane)
