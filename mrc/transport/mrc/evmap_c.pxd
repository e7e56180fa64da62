# The C of mrc/transport/mrc/evmap.py (evmap_c.h, which says how it works). Declarations only.

cdef extern from "mrc/transport/mrc/evmap_c.h":
    ctypedef struct mrc_evmap:
        int bits
    int mrc_evmap_alloc(mrc_evmap* m, int bits) noexcept
    void mrc_evmap_free(mrc_evmap* m) noexcept
    unsigned long long* mrc_evmap_find(const mrc_evmap* m, long long ev) noexcept
    int mrc_evmap_put(mrc_evmap* m, long long ev, long long a, unsigned long long b,
                      unsigned long long c) noexcept
    const unsigned long long* mrc_evmap_entry(const mrc_evmap* m, Py_ssize_t i) noexcept
