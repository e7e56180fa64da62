# C layout of evmap.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython

cdef long long _MAX_KEY
cdef unsigned long long _GOLDEN
cdef long long _ENTRY_WORDS, _MIN_BITS

cdef class EvMap:
    # the values find() leaves, then the table
    cdef public long long a
    cdef public unsigned long long b, c
    cdef unsigned long long* _tab
    cdef int _bits
    cdef Py_ssize_t _n
    cdef bytearray _buf
    cdef dict _d

    @cython.locals(key=cython.ulonglong, mask=cython.ulonglong, h=cython.ulonglong,
                   tab=cython.p_ulonglong, e=cython.p_ulonglong)
    cpdef bint find(self, long long ev) noexcept
    cpdef put(self, object ev, long long a, unsigned long long b, unsigned long long c)
    @cython.locals(tab=cython.p_ulonglong, e=cython.p_ulonglong, i=Py_ssize_t, out=list)
    cpdef list items(self)
    @cython.locals(buf=bytearray, start=cython.size_t)
    cdef _alloc(self, int bits)
    @cython.locals(mask=cython.ulonglong, h=cython.ulonglong, tab=cython.p_ulonglong,
                   e=cython.p_ulonglong, new=bint)
    cdef bint _store(self, unsigned long long key, long long a, unsigned long long b,
                     unsigned long long c) noexcept
    @cython.locals(old=cython.p_ulonglong, n=Py_ssize_t, i=Py_ssize_t, e=cython.p_ulonglong)
    cdef _rehash(self, int bits)
