# The engine's C (engine_c.h, which says how it works): the compiled build's event queue and
# the list-slot helpers it uses. Declarations only.

cdef extern from "mrc/sim/engine_c.h":
    ctypedef struct mrc_calendar:
        Py_ssize_t cap, nfree
        long long first_key
    long long MRC_SLOT_BITS
    long long MRC_SLOT_MASK
    int mrc_cal_grow(mrc_calendar* q, Py_ssize_t cap) noexcept
    void mrc_cal_free(mrc_calendar* q) noexcept
    long long mrc_cal_slot(mrc_calendar* q) noexcept
    int mrc_cal_push(mrc_calendar* q, long long t, long long key) noexcept
    long long mrc_cal_first(mrc_calendar* q) noexcept
    long long mrc_cal_pop(mrc_calendar* q) noexcept
    Py_ssize_t mrc_cal_pending(const mrc_calendar* q) noexcept
    void mrc_cal_warm(const mrc_calendar* q, list slots) noexcept

    object _take "mrc_list_take"(list slots, Py_ssize_t i)
    void _put "mrc_list_put"(list slots, Py_ssize_t i, object obj)
