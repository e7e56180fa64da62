# C layout of memory.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython

cdef unsigned long long _MASK64, _K1, _K2, _K3, _K4
@cython.locals(x=cython.ulonglong)
cpdef unsigned long long segment_digest(unsigned long long key, unsigned long long offset,
                                        unsigned long long length) noexcept
# 64-bit wrapping arithmetic is exactly the masked Python result (digests are 64-bit)
cpdef unsigned long long _fold(unsigned long long offset, unsigned long long digest) noexcept

cdef class ReceiveBuffer:
    cdef public long long msg_id, length, mtu, placed, first_ts  # msg_id as Packet has it
    cdef public bytearray _seen
    cdef public unsigned long long _checksum
    cdef public object _data

    # offset: a wire field (u64): Python semantics for any value a packet may carry, until
    # it is known to lie inside the message
    @cython.locals(mtu=cython.longlong, end=cython.longlong, off=cython.longlong,
                   index=cython.longlong, rem=cython.longlong)
    cpdef long long place(self, offset, long long length, unsigned long long digest,
                          payload=*) except? -1
