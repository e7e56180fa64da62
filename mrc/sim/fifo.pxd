# C layout of mrc/sim/fifo.py for the compiled build (mrc/_build.py); the .py is the source.
cimport cython
from cpython.object cimport PyObject
from mrc.sim.engine_c cimport _item_array, _slot_put, _slot_take

# Fifo's inline ring: fill its n slots with None, release its n slots (NULL after)
cdef extern from *:
    """
    static CYTHON_INLINE void mrc_ring_fill(PyObject **ring, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(Py_None); ring[i] = Py_None; }
    }
    static CYTHON_INLINE void mrc_ring_clear(PyObject **ring, Py_ssize_t n) {
        for (Py_ssize_t i = 0; i < n; i++) { Py_CLEAR(ring[i]); }
    }
    """
    void _ring_fill "mrc_ring_fill"(PyObject** ring, Py_ssize_t n) noexcept
    void _ring_clear "mrc_ring_clear"(PyObject** ring, Py_ssize_t n) noexcept

cdef Py_ssize_t _INLINE

@cython.final
cdef class Fifo:
    cdef PyObject** _slots
    cdef public Py_ssize_t _mask, _head, _count
    cdef PyObject* _ring[4]  # (_INLINE of them)
    cdef list _items

    cpdef void append(self, item) except *
    cpdef void appendleft(self, item) except *
    cpdef popleft(self)
    cpdef remove(self, item)
    cdef _set_items(self, list items)
    cdef _grow(self)
    @cython.locals(out=list, mask=Py_ssize_t, head=Py_ssize_t, i=Py_ssize_t)
    cdef list _in_order(self)
