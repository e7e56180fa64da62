# The C of mrc/wire/checksum.py (checksum_c.h, which says what it does). Declarations only.

cdef extern from "mrc/wire/checksum_c.h":
    long long le_words "mrc_le_words"(object buf, Py_ssize_t start, Py_ssize_t m) except? -1
    bytes or_bytes "mrc_or_bytes"(object buf, Py_ssize_t start, bytes mask)
