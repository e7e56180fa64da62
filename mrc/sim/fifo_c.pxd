# The C of mrc/sim/fifo.py (fifo_c.h, which says how it works). Declarations only.
from cpython.object cimport PyObject

cdef extern from "mrc/sim/fifo_c.h":
    ctypedef struct mrc_fifo:
        Py_ssize_t mask, head, count
    void mrc_fifo_init(mrc_fifo* q) noexcept
    void mrc_fifo_free(mrc_fifo* q) noexcept
    bint mrc_fifo_full(const mrc_fifo* q) noexcept
    void mrc_fifo_push(mrc_fifo* q, object obj) noexcept
    void mrc_fifo_push_front(mrc_fifo* q, object obj) noexcept
    object mrc_fifo_pop(mrc_fifo* q)
    PyObject* mrc_fifo_at(const mrc_fifo* q, Py_ssize_t i) noexcept
    list mrc_fifo_move(mrc_fifo* q, Py_ssize_t length)
