/* The C of mrc/wire/checksum.py for the compiled build (checksum_c.pxd declares it to Cython).

   mrc_le_words: the sum of the little-endian 32-bit words of buf[start:start + m] (m a multiple
   of 4, within the buffer: the callers say so), what the pure build asks numpy for. bytes are
   read in place; anything else through the buffer protocol. Four sums run side by side, so
   the compiler can keep several words in flight; a buffer under 8 GB cannot overflow them.
   -1 with an exception set when the buffer cannot be read.

   mrc_or_bytes: a new bytes of buf[start:start + len(mask)] OR-ed with mask (the caller
   checked that the buffer holds them). */

#ifndef MRC_CHECKSUM_C_H
#define MRC_CHECKSUM_C_H

static CYTHON_INLINE unsigned long long mrc_le32(const unsigned char *p) {
    return (unsigned long long)p[0] | ((unsigned long long)p[1] << 8)
        | ((unsigned long long)p[2] << 16) | ((unsigned long long)p[3] << 24);
}
static long long mrc_le_words(PyObject *buf, Py_ssize_t start, Py_ssize_t m) {
    Py_buffer view;
    const unsigned char *p;
    int held = 0;
    if (PyBytes_CheckExact(buf)) {
        p = (const unsigned char *)PyBytes_AS_STRING(buf);
    } else {
        if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) return -1;
        p = (const unsigned char *)view.buf;
        held = 1;
    }
    p += start;
    unsigned long long s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    Py_ssize_t i = 0;
    for (; i + 16 <= m; i += 16) {
        s0 += mrc_le32(p + i);
        s1 += mrc_le32(p + i + 4);
        s2 += mrc_le32(p + i + 8);
        s3 += mrc_le32(p + i + 12);
    }
    for (; i < m; i += 4) s0 += mrc_le32(p + i);
    if (held) PyBuffer_Release(&view);
    return (long long)(s0 + s1 + s2 + s3);
}

static PyObject *mrc_or_bytes(PyObject *buf, Py_ssize_t start, PyObject *mask) {
    Py_buffer view;
    const unsigned char *p;
    int held = 0;
    Py_ssize_t n = PyBytes_GET_SIZE(mask);
    const unsigned char *m = (const unsigned char *)PyBytes_AS_STRING(mask);
    if (PyBytes_CheckExact(buf)) {
        p = (const unsigned char *)PyBytes_AS_STRING(buf);
    } else {
        if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) return NULL;
        p = (const unsigned char *)view.buf;
        held = 1;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out != NULL) {
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) o[i] = p[start + i] | m[i];
    }
    if (held) PyBuffer_Release(&view);
    return out;
}

#endif
