/* The compiled build's table of mrc/transport/mrc/evmap.py (evmap_c.pxd declares it to
   Cython; pure Python keeps a dict of tuples, with the same answers).

   One C array of 4-word entries (the key plus one, so that 0 marks an empty entry, then the
   three values), open addressing with linear probing at a load of at most one half, from a
   64-byte boundary: a lookup reads the map and, nearly always, one entry's cache line.
   Keys (EV values) are in [0, 2**63 - 1); their hash is Fibonacci hashing (the key times
   2**64 / golden ratio, top `bits` bits). Entries are only added or replaced. */

#ifndef MRC_EVMAP_C_H
#define MRC_EVMAP_C_H

#include <stdlib.h>
#include <string.h>

#define MRC_EV_MAX_KEY 9223372036854775806LL /* 2**63 - 2 */
#define MRC_EV_GOLDEN 11400714819323198485ULL
#define MRC_EV_WORDS 4

typedef struct {
    unsigned long long *tab;
    void *mem;
    int bits; /* 2**bits entries */
    Py_ssize_t n;
} mrc_evmap;

/* A zeroed table of 2**bits entries for m (the old one, if any, is the caller's). */
static int mrc_evmap_alloc(mrc_evmap *m, int bits) {
    size_t bytes = (size_t)8 * MRC_EV_WORDS << bits;
    char *p = (char *)calloc(bytes + 64, 1);
    if (!p)
        return -1;
    m->mem = p;
    m->tab = (unsigned long long *)(((size_t)p + 63) & ~(size_t)63);
    m->bits = bits;
    return 0;
}

static void mrc_evmap_free(mrc_evmap *m) {
    free(m->mem);
    memset(m, 0, sizeof(*m));
}

/* The entry of `ev`, or NULL when it is not in the map. */
static CYTHON_INLINE unsigned long long *mrc_evmap_find(const mrc_evmap *m, long long ev) {
    unsigned long long key, mask, h, *e;
    if (ev < 0 || ev > MRC_EV_MAX_KEY)
        return NULL;
    key = (unsigned long long)ev + 1;
    mask = (1ULL << m->bits) - 1;
    h = (key * MRC_EV_GOLDEN) >> (64 - m->bits);
    for (;;) {
        e = m->tab + MRC_EV_WORDS * h;
        if (e[0] == key)
            return e;
        if (e[0] == 0)
            return NULL;
        h = (h + 1) & mask;
    }
}

/* Write an entry into a table of 2**bits; 1 when the key was new. */
static int mrc_evmap_store(unsigned long long *tab, int bits, unsigned long long key,
                           unsigned long long a, unsigned long long b, unsigned long long c) {
    unsigned long long mask = (1ULL << bits) - 1, h = (key * MRC_EV_GOLDEN) >> (64 - bits);
    for (;;) {
        unsigned long long *e = tab + MRC_EV_WORDS * h;
        if (e[0] == key || e[0] == 0) {
            int fresh = e[0] == 0;
            e[0] = key;
            e[1] = a;
            e[2] = b;
            e[3] = c;
            return fresh;
        }
        h = (h + 1) & mask;
    }
}

/* Map ev (in range: the caller checked) to (a, b, c), doubling the table first if that
   would fill it past one half; 1 when ev was new, 0 when it was replaced, -1 (no memory). */
static int mrc_evmap_put(mrc_evmap *m, long long ev, long long a, unsigned long long b,
                         unsigned long long c) {
    int fresh;
    if (2 * (m->n + 1) > ((Py_ssize_t)1 << m->bits)) {
        mrc_evmap bigger = *m;
        Py_ssize_t i, old = (Py_ssize_t)1 << m->bits;
        if (mrc_evmap_alloc(&bigger, m->bits + 1) < 0)
            return -1;
        for (i = 0; i < old; i++) {
            const unsigned long long *e = m->tab + MRC_EV_WORDS * i;
            if (e[0])
                mrc_evmap_store(bigger.tab, bigger.bits, e[0], e[1], e[2], e[3]);
        }
        free(m->mem);
        *m = bigger;
    }
    fresh = mrc_evmap_store(m->tab, m->bits, (unsigned long long)ev + 1,
                            (unsigned long long)a, b, c);
    m->n += fresh;
    return fresh;
}

/* Entry i of the table (0 <= i < 2**bits), empty when its first word is 0. */
static CYTHON_INLINE const unsigned long long *mrc_evmap_entry(const mrc_evmap *m,
                                                               Py_ssize_t i) {
    return m->tab + MRC_EV_WORDS * i;
}

#endif
