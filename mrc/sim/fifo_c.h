/* The C of mrc/sim/fifo.py for the compiled build (fifo_c.pxd declares it to Cython): the ring
   of a port's queue, Fifo. fifo.py says why it exists; this is how.

   The ring has a power-of-two number of slots (mask: that number less one, so the hot paths
   need no modulo), each a reference, None where free; head is the first item's slot and
   count how many items there are. Its first MRC_FIFO_INLINE slots are inside the queue's own
   struct (ring): a queue that never holds more, as most ports' queues most of the time,
   reads its items from the cache line it reads its counts from. Past that, the slots are the
   items of a list the Fifo keeps (mrc_fifo_move), which is never resized, so they stay put. */

#ifndef MRC_FIFO_C_H
#define MRC_FIFO_C_H

#define MRC_FIFO_INLINE 4

typedef struct {
    PyObject **slots;  /* ring below, or the items of the Fifo's list */
    Py_ssize_t mask, head, count;
    PyObject *ring[MRC_FIFO_INLINE];
} mrc_fifo;

/* An empty queue on its inline slots. */
static void mrc_fifo_init(mrc_fifo *q) {
    for (Py_ssize_t i = 0; i < MRC_FIFO_INLINE; i++) {
        Py_INCREF(Py_None);
        q->ring[i] = Py_None;
    }
    q->slots = q->ring;
    q->mask = MRC_FIFO_INLINE - 1;
    q->head = 0;
    q->count = 0;
}

/* Release the inline slots' references (none left once the ring moved to a list). */
static void mrc_fifo_free(mrc_fifo *q) {
    for (Py_ssize_t i = 0; i < MRC_FIFO_INLINE; i++)
        Py_CLEAR(q->ring[i]);
}

/* Whether every slot holds an item (mrc_fifo_move before the next push). */
static CYTHON_INLINE int mrc_fifo_full(const mrc_fifo *q) {
    return q->count > q->mask;
}

static CYTHON_INLINE void mrc_fifo_store(PyObject **slot, PyObject *obj) {
    PyObject *old = *slot;
    Py_INCREF(obj);
    *slot = obj;
    Py_DECREF(old);
}

/* Add obj after the last item (the ring has a free slot). */
static CYTHON_INLINE void mrc_fifo_push(mrc_fifo *q, PyObject *obj) {
    mrc_fifo_store(q->slots + ((q->head + q->count) & q->mask), obj);
    q->count++;
}

/* Add obj before the first item (the ring has a free slot). */
static CYTHON_INLINE void mrc_fifo_push_front(mrc_fifo *q, PyObject *obj) {
    q->head = (q->head - 1) & q->mask;
    mrc_fifo_store(q->slots + q->head, obj);
    q->count++;
}

/* Take the first item (there is one): a new reference, None left in its slot. */
static CYTHON_INLINE PyObject *mrc_fifo_pop(mrc_fifo *q) {
    PyObject *obj = q->slots[q->head];
    Py_INCREF(Py_None);
    q->slots[q->head] = Py_None;
    q->head = (q->head + 1) & q->mask;
    q->count--;
    return obj;
}

/* The i-th item in order (0 <= i < count), borrowed. */
static CYTHON_INLINE PyObject *mrc_fifo_at(const mrc_fifo *q, Py_ssize_t i) {
    return q->slots[(q->head + i) & q->mask];
}

/* Move the ring to the items of a new list of `length` slots (a power of two, at least
   count): the items in order from the first, None after. Returns the list, which the caller
   keeps as long as the ring is its items (NULL and MemoryError if it cannot be made). */
static PyObject *mrc_fifo_move(mrc_fifo *q, Py_ssize_t length) {
    PyObject *list = PyList_New(length);
    if (list == NULL)
        return NULL;
    PyObject **items = ((PyListObject *)list)->ob_item;
    Py_ssize_t i = 0;
    for (; i < q->count; i++) {
        items[i] = mrc_fifo_at(q, i);
        Py_INCREF(items[i]);
    }
    for (; i < length; i++) {
        Py_INCREF(Py_None);
        items[i] = Py_None;
    }
    if (q->slots == q->ring)
        mrc_fifo_free(q);  /* (their items are in the list now) */
    q->slots = items;
    q->mask = length - 1;
    q->head = 0;
    return list;
}

#endif
