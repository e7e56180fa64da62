/* The compiled engine's event queue (mrc/sim/engine.py, compiled build; engine_c.pxd
   declares it to Cython). Pure Python runs the same order from a heapq of tuples.

   A record is 16 bytes: the event's time (signed 64-bit picoseconds) and a key
   seq << MRC_SLOT_BITS | slot. Sequence numbers are unique, so comparing keys compares them,
   and (time, key) is a total order: the order the events run in. The slot names where the
   Simulator keeps the event's callback and argument (two items of a Python list, one cache
   line); free slots wait on a stack here.

   A calendar in front of a heap. Time is cut into buckets of 2**MRC_BUCKET_SHIFT ps (2 ns);
   `base` is the bucket being run. Every pending record is in exactly one of four places:
   - bucket base, as the bucket was when its turn came: the run (records run_i..run_n - 1),
     sorted, read front to back;
   - bucket <= base, scheduled since (or a bucket too far from sorted to sort cheaply): the
     heap (records 1..n, 1-based); the next event is the earlier of the run's next and the
     heap's root;
   - base < bucket < base + MRC_BUCKETS (4.2 us ahead, where nearly every packet event falls):
     the ring, an unsorted list of records per bucket, kept in chunks of seven (128 bytes:
     the next chunk, a count, the records) from a pool with a stack of free chunks; heads and
     tails give each bucket's first and last chunk, and `bits` has a bit per non-empty bucket;
   - further ahead (timers): a second heap, `far` (records 1..far_n).
   When the run and the heap are both done, base moves to the next non-empty bucket or, with
   the ring empty, to the first far record's; far records now within the window move to the
   ring (or, in the new bucket, the heap), and the new bucket's records to the run, sorted by
   insertion (a bucket's records come in seq order, so the many events of one instant in a
   synchronized step are sorted already). A pop is then a read of the next record, not a heap
   deletion: the heap stays nearly empty, and the cost of an event no longer grows with the
   events per bucket (some 5 at 128 hosts, 40 at 1024, over a thousand at one instant).
   Scheduling appends to a chunk, and a bucket is read in order, two cache lines per seven
   events. The events come out in (time, key) order: every record of a bucket is in the run
   or the heap before any of them runs, later buckets' after.

   Record j of a 1-based heap is heap[2j], heap[2j + 1], so the two children of record j,
   2j and 2j + 1, are the 32 bytes at 32j: one cache line. Arrays start on a 64-byte
   boundary (chunks on a 128-byte one: the pair of lines the L2 fetches together).
   Functions that allocate return -1 when memory runs out (the caller raises MemoryError). */

#ifndef MRC_ENGINE_C_H
#define MRC_ENGINE_C_H

#include <stdlib.h>
#include <string.h>

#define MRC_SLOT_BITS 24
#define MRC_SLOT_MASK 16777215LL /* (1 << MRC_SLOT_BITS) - 1 */
#define MRC_BUCKET_SHIFT 11
#define MRC_BUCKETS 2048
#define MRC_BUCKET_MASK 2047
#define MRC_BUCKET_WORDS 32
#define MRC_CHUNK_WORDS 16
#define MRC_CHUNK_RECORDS 7
#define MRC_INITIAL_CHUNKS 512
/* A bucket's records run from a sorted array (the run) when sorting it took at most this
   many record moves per record; else through the heap (insertion sort is quadratic at
   worst). */
#define MRC_SORT_MOVES 16

typedef struct {
    long long *heap, *far, *free_slots, *run, *heads, *tails, *chunks, *spare;
    unsigned long long *bits;
    void *heap_mem, *far_mem, *run_mem, *bucket_mem, *chunk_mem;
    Py_ssize_t cap;             /* slots (and records each heap can hold) */
    Py_ssize_t n, far_n, nfree, ring_n, nchunks, nspare, run_i, run_n, run_cap;
    long long base;             /* the bucket being run */
    long long first_key;        /* the key of the record mrc_cal_first found */
    int from_run;               /* ... and whether it is the run's next (else the heap's root) */
} mrc_calendar;

/* A block of `bytes` starting on an `align`-byte boundary; *mem gets what to free. */
static void *mrc_aligned(size_t bytes, size_t align, void **mem) {
    char *p = (char *)malloc(bytes + align);
    *mem = p;
    if (!p)
        return NULL;
    return (void *)(((size_t)p + align - 1) & ~(align - 1));
}

/* ---------------------------------------------------------------- 1-based record heaps */
/* Place record (t, key) in the heap whose new last record is i, sifting it up. */
static CYTHON_INLINE void mrc_heap_insert(long long *heap, Py_ssize_t i, long long t,
                                          long long key) {
    while (i > 1) {
        Py_ssize_t parent = i >> 1;
        long long pt = heap[2 * parent];
        if (pt < t || (pt == t && heap[2 * parent + 1] < key))
            break;
        heap[2 * i] = pt;
        heap[2 * i + 1] = heap[2 * parent + 1];
        i = parent;
    }
    heap[2 * i] = t;
    heap[2 * i + 1] = key;
}

/* Remove the root of the heap that held records 1..n + 1 (n stay). Bottom-up deletion
   (Floyd's): the hole the root leaves moves down to a leaf along the smaller child, one
   comparison per level, and the last record is sifted up from there. That record was
   scheduled late and belongs near the bottom, so it rarely climbs, where a plain sift-down
   would compare it at every level too. */
static void mrc_heap_remove_root(long long *heap, Py_ssize_t n) {
    Py_ssize_t hole = 1, child = 2;
    if (!n)
        return;
    while (child < n) { /* two children: the smaller one moves up into the hole */
        long long ct = heap[2 * child], dt = heap[2 * child + 2];
        if (dt < ct || (dt == ct && heap[2 * child + 3] < heap[2 * child + 1]))
            child++;
        heap[2 * hole] = heap[2 * child];
        heap[2 * hole + 1] = heap[2 * child + 1];
        hole = child;
        child = 2 * child;
    }
    if (child == n) { /* an only child */
        heap[2 * hole] = heap[2 * child];
        heap[2 * hole + 1] = heap[2 * child + 1];
        hole = child;
    }
    mrc_heap_insert(heap, hole, heap[2 * n + 2], heap[2 * n + 3]);
}

/* Sort records 0..n-1 of a run by (time, key), or give up (0) after `moves` record moves,
   leaving them in some order. Insertion sort: linear on what arrives in order, cheap on the
   few dozen of a bucket, and stopped before it turns quadratic. */
static int mrc_sort_run(long long *run, Py_ssize_t n, Py_ssize_t moves) {
    Py_ssize_t i, j;
    for (i = 1; i < n; i++) {
        long long t = run[2 * i], k = run[2 * i + 1];
        j = i;
        while (j && (run[2 * j - 2] > t || (run[2 * j - 2] == t && run[2 * j - 1] > k))) {
            run[2 * j] = run[2 * j - 2];
            run[2 * j + 1] = run[2 * j - 1];
            j--;
        }
        run[2 * j] = t;
        run[2 * j + 1] = k;
        moves -= i - j;
        if (moves < 0)
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- growth */
/* Double the chunk pool (all chunks in use: the new ones are the spares). */
static int mrc_cal_grow_chunks(mrc_calendar *q) {
    Py_ssize_t old = q->nchunks, cap = old ? 2 * old : MRC_INITIAL_CHUNKS, i;
    void *mem;
    long long *chunks = (long long *)mrc_aligned(8 * MRC_CHUNK_WORDS * cap, 128, &mem);
    long long *spare = (long long *)malloc(8 * cap);
    if (!chunks || !spare) {
        free(mem);
        free(spare);
        return -1;
    }
    if (old)
        memcpy(chunks, q->chunks, 8 * MRC_CHUNK_WORDS * old);
    free(q->chunk_mem);
    free(q->spare);
    q->chunk_mem = mem;
    q->chunks = chunks;
    q->spare = spare;
    for (i = 0; i < cap - old; i++)
        spare[i] = cap - 1 - i;
    q->nspare = cap - old;
    q->nchunks = cap;
    return 0;
}

/* Room for `cap` pending records (every slot is in use when it grows, or none: the first
   call); the free slots are then cap - 1 down to the old capacity. */
static int mrc_cal_grow(mrc_calendar *q, Py_ssize_t cap) {
    Py_ssize_t old = q->cap, i;
    void *heap_mem, *far_mem;
    long long *heap = (long long *)mrc_aligned(16 * (cap + 1), 64, &heap_mem);
    long long *far = (long long *)mrc_aligned(16 * (cap + 1), 64, &far_mem);
    long long *free_slots = (long long *)malloc(8 * cap);
    if (!heap || !far || !free_slots) {
        free(heap_mem);
        free(far_mem);
        free(free_slots);
        return -1;
    }
    if (old) {
        memcpy(heap + 2, q->heap + 2, 16 * q->n);
        memcpy(far + 2, q->far + 2, 16 * q->far_n);
    } else {
        q->heads = (long long *)mrc_aligned(16 * MRC_BUCKETS + 8 * MRC_BUCKET_WORDS, 64,
                                            &q->bucket_mem);
        if (!q->heads || mrc_cal_grow_chunks(q) < 0) {
            free(heap_mem);
            free(far_mem);
            free(free_slots);
            return -1;
        }
        q->tails = q->heads + MRC_BUCKETS;
        q->bits = (unsigned long long *)(q->tails + MRC_BUCKETS);
        for (i = 0; i < 2 * MRC_BUCKETS; i++)
            q->heads[i] = -1; /* (and tails) */
        memset(q->bits, 0, 8 * MRC_BUCKET_WORDS);
    }
    free(q->heap_mem);
    free(q->far_mem);
    free(q->free_slots);
    q->heap_mem = heap_mem;
    q->far_mem = far_mem;
    q->heap = heap;
    q->far = far;
    q->free_slots = free_slots;
    for (i = 0; i < cap - old; i++)
        free_slots[i] = cap - 1 - i;
    q->nfree = cap - old;
    q->cap = cap;
    return 0;
}

/* Room for `cap` records in the run (its first `keep` are kept). */
static int mrc_cal_grow_run(mrc_calendar *q, Py_ssize_t cap, Py_ssize_t keep) {
    void *mem;
    long long *run = (long long *)mrc_aligned(16 * cap, 64, &mem);
    if (!run)
        return -1;
    if (keep)
        memcpy(run, q->run, 16 * keep);
    free(q->run_mem);
    q->run_mem = mem;
    q->run = run;
    q->run_cap = cap;
    return 0;
}

static void mrc_cal_free(mrc_calendar *q) {
    free(q->heap_mem);
    free(q->far_mem);
    free(q->free_slots);
    free(q->run_mem);
    free(q->bucket_mem);
    free(q->chunk_mem);
    free(q->spare);
    memset(q, 0, sizeof(*q));
}

/* ---------------------------------------------------------------- scheduling */
/* Add record (t, key) to bucket b's last chunk (a new one when it is full). */
static int mrc_cal_bucket_append(mrc_calendar *q, long long b, long long t, long long key) {
    long long i = b & MRC_BUCKET_MASK, c = q->tails[i], r, n;
    if (c < 0 || q->chunks[MRC_CHUNK_WORDS * c + 1] == MRC_CHUNK_RECORDS) {
        long long fresh;
        if (!q->nspare && mrc_cal_grow_chunks(q) < 0)
            return -1;
        fresh = q->spare[--q->nspare];
        q->chunks[MRC_CHUNK_WORDS * fresh] = -1;
        q->chunks[MRC_CHUNK_WORDS * fresh + 1] = 0;
        if (c < 0) {
            q->heads[i] = fresh;
            q->bits[i >> 6] |= 1ULL << (i & 63);
        } else {
            q->chunks[MRC_CHUNK_WORDS * c] = fresh;
        }
        q->tails[i] = fresh;
        c = fresh;
    }
    r = MRC_CHUNK_WORDS * c;
    n = q->chunks[r + 1];
    q->chunks[r + 2 + 2 * n] = t;
    q->chunks[r + 3 + 2 * n] = key;
    q->chunks[r + 1] = n + 1;
    q->ring_n++;
    return 0;
}

/* A free slot (the caller saw q->nfree > 0). */
static CYTHON_INLINE long long mrc_cal_slot(mrc_calendar *q) {
    return q->free_slots[--q->nfree];
}

/* Queue record (t, key): the heap, the ring or the far heap, by its bucket. */
static CYTHON_INLINE int mrc_cal_push(mrc_calendar *q, long long t, long long key) {
    long long b = t >> MRC_BUCKET_SHIFT;
    if (b <= q->base) {
        mrc_heap_insert(q->heap, ++q->n, t, key);
        return 0;
    }
    if (b - q->base < MRC_BUCKETS)
        return mrc_cal_bucket_append(q, b, t, key);
    mrc_heap_insert(q->far, ++q->far_n, t, key);
    return 0;
}

/* ---------------------------------------------------------------- running */
/* The first non-empty bucket after base (the ring is not empty): a scan of the bitmap from
   base + 1, wrapping around. */
static long long mrc_cal_next_bucket(const mrc_calendar *q) {
    long long start = (q->base + 1) & MRC_BUCKET_MASK, w = start >> 6, i;
    unsigned long long bits = q->bits[w] & (~0ULL << (start & 63));
    while (!bits) {
        w = (w + 1) & (MRC_BUCKET_WORDS - 1);
        bits = q->bits[w];
    }
    i = w * 64 + __builtin_ctzll(bits);
    return q->base + 1 + ((i - start) & MRC_BUCKET_MASK);
}

/* The heap and the run are empty: move the next bucket's records into them. 1, or 0 if
   nothing is pending, or -1 (no memory). */
static int mrc_cal_refill(mrc_calendar *q) {
    long long b, i, c;
    if (q->ring_n)
        b = mrc_cal_next_bucket(q);
    else if (q->far_n)
        b = q->far[2] >> MRC_BUCKET_SHIFT;
    else
        return 0;
    q->base = b;
    while (q->far_n && (q->far[2] >> MRC_BUCKET_SHIFT) - b < MRC_BUCKETS) {
        long long t = q->far[2], key = q->far[3];
        mrc_heap_remove_root(q->far, --q->far_n);
        if (t >> MRC_BUCKET_SHIFT <= b)
            mrc_heap_insert(q->heap, ++q->n, t, key);
        else if (mrc_cal_bucket_append(q, t >> MRC_BUCKET_SHIFT, t, key) < 0)
            return -1;
    }
    i = b & MRC_BUCKET_MASK;
    c = q->heads[i];
    if (c >= 0) {
        Py_ssize_t n = 0, j;
        q->heads[i] = -1;
        q->tails[i] = -1;
        q->bits[i >> 6] &= ~(1ULL << (i & 63));
        while (c >= 0) {
            long long r = MRC_CHUNK_WORDS * c, m = q->chunks[r + 1];
            if (n + m > q->run_cap && mrc_cal_grow_run(q, 2 * (n + m), n) < 0)
                return -1;
            for (j = 0; j < m; j++) {
                q->run[2 * n] = q->chunks[r + 2 + 2 * j];
                q->run[2 * n + 1] = q->chunks[r + 3 + 2 * j];
                n++;
            }
            q->ring_n -= m;
            q->spare[q->nspare++] = c;
            c = q->chunks[r];
        }
        if (mrc_sort_run(q->run, n, MRC_SORT_MOVES * n)) {
            q->run_i = 0;
            q->run_n = n;
        } else { /* too far from sorted: a heap (the records are all there, reordered) */
            for (j = 0; j < n; j++)
                mrc_heap_insert(q->heap, ++q->n, q->run[2 * j], q->run[2 * j + 1]);
        }
    }
    return 1;
}

/* Whether the first pending record is the run's next one (else the heap's root). */
static CYTHON_INLINE int mrc_cal_run_first(const mrc_calendar *q) {
    const long long *run;
    if (q->run_i == q->run_n)
        return 0;
    if (!q->n)
        return 1;
    run = q->run + 2 * q->run_i;
    return run[0] < q->heap[2] || (run[0] == q->heap[2] && run[1] < q->heap[3]);
}

/* The time of the first pending record (its key in q->first_key), -1 when nothing is
   pending, -2 when memory ran out. */
static CYTHON_INLINE long long mrc_cal_first(mrc_calendar *q) {
    const long long *first;
    if (!q->n && q->run_i == q->run_n) {
        int found = mrc_cal_refill(q);
        if (found <= 0)
            return found ? -2 : -1;
    }
    q->from_run = mrc_cal_run_first(q);
    first = q->from_run ? q->run + 2 * q->run_i : q->heap + 2;
    q->first_key = first[1];
    return first[0];
}

/* Remove the record mrc_cal_first just found and free its slot; the slot's items in the
   Simulator's list are at 2 * the slot returned. */
static CYTHON_INLINE long long mrc_cal_pop(mrc_calendar *q) {
    long long slot = q->first_key & MRC_SLOT_MASK;
    if (q->from_run)
        q->run_i++;
    else
        mrc_heap_remove_root(q->heap, --q->n);
    q->free_slots[q->nfree++] = slot;
    return slot;
}

static CYTHON_INLINE Py_ssize_t mrc_cal_pending(const mrc_calendar *q) {
    return q->n + (q->run_n - q->run_i) + q->ring_n + q->far_n;
}

/* ---------------------------------------------------------------- the slot list */
/* References moved out of or into the items of a list: the Simulator's slot list.
   mrc_slot_take moves the reference out of an item (None left
   behind: the caller owns what it returns), mrc_slot_put stores into an item (releasing what
   it held); mrc_list_take and mrc_list_put do the same on a list by index, and
   mrc_item_array gives a list's item array itself (valid until the list is resized).
   Indexes are always in range (the engine hands out only its own slots). */
static CYTHON_INLINE PyObject **mrc_item_array(PyObject *list) {
    return ((PyListObject *)list)->ob_item;
}
static CYTHON_INLINE PyObject *mrc_slot_take(PyObject **items, Py_ssize_t i) {
    PyObject *obj = items[i];
    Py_INCREF(Py_None);
    items[i] = Py_None;
    return obj;
}
static CYTHON_INLINE void mrc_slot_put(PyObject **items, Py_ssize_t i, PyObject *obj) {
    PyObject *old = items[i];
    Py_INCREF(obj);
    items[i] = obj;
    Py_DECREF(old);
}
#define mrc_list_take(list, i) mrc_slot_take(mrc_item_array(list), (i))
#define mrc_list_put(list, i, obj) mrc_slot_put(mrc_item_array(list), (i), (obj))

/* Prefetch what the next events will touch first, while this one runs (1.4 us per event at
   1024 hosts, where nearly every first touch of an object misses the L2): the callback and
   argument of the run's next event and of the heap's root (one of them runs next), and the
   slot of the run's event after that. Hints only (for writing: the first touch of an object
   is its reference count): a callback that schedules earlier events costs a wasted
   prefetch, never a different order. */
static CYTHON_INLINE void mrc_warm_slot(PyObject **items, long long slot) {
    __builtin_prefetch(items[2 * slot], 1, 3);
    __builtin_prefetch(items[2 * slot + 1], 1, 3);
}
static CYTHON_INLINE void mrc_cal_warm(const mrc_calendar *q, PyObject *slots) {
    PyObject **items = mrc_item_array(slots);
    Py_ssize_t left = q->run_n - q->run_i;
    if (left) {
        const long long *run = q->run + 2 * q->run_i;
        mrc_warm_slot(items, run[1] & MRC_SLOT_MASK);
        if (left > 1)
            __builtin_prefetch(items + 2 * (run[3] & MRC_SLOT_MASK), 1, 3);
    }
    if (q->n)
        mrc_warm_slot(items, q->heap[3] & MRC_SLOT_MASK);
}

#endif
