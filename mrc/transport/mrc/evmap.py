"""A map from EV values to three integers, for the lookups every ACK makes.

Every DATA packet's ACK goes back along the path of the EV it came on (the receiver looks up
the reply path by the peer's EV), and every ACK's EV finds the plane whose reorder window it
samples (loss recovery). With dicts, compiled, each lookup boxes the EV into an integer and
reads the dict, its index and entry, the stored key, the value tuple and its integers: five
or six cache lines, all of them cold at 1024 hosts, on every ACK.

:class:`EvMap` keeps the values in its own entries: compiled, one C array of 4-word entries
(the key plus one, then the three values), open addressing with linear probing at a load of
at most one half, so a lookup reads the map and, nearly always, one entry's cache line
(``evmap_c.h``). In pure Python it is a dict of tuples. Both answer the same.
"""

from __future__ import annotations

from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the table, in C
    from cython.cimports.mrc.transport.mrc.evmap_c import (
        mrc_evmap,
        mrc_evmap_alloc,
        mrc_evmap_entry,
        mrc_evmap_find,
        mrc_evmap_free,
        mrc_evmap_put,
    )

#: keys are EV values in [0, 2**63 - 1): the compiled entries store key + 1 (0 marks empty)
MAX_KEY = (1 << 63) - 2
_MIN_BITS = 3


@cython.cclass
class EvMap:
    """EV value -> (a, b, c): ``a`` a signed 64-bit integer, ``b`` and ``c`` unsigned.

    Entries are only added or replaced, never removed. :meth:`find` says whether an EV is in
    the map and, when it is, leaves its values in :attr:`a`, :attr:`b` and :attr:`c` (no
    tuple per lookup); they are meaningful until the next call of :meth:`find` or
    :meth:`put`."""

    # the values find() leaves, then the table (compiled) or the dict (pure Python)
    a: cython.longlong
    b: cython.ulonglong
    c: cython.ulonglong
    _m: mrc_evmap
    _n: cython.Py_ssize_t
    _d: dict[int, tuple[int, int, int]]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, size_hint: int = 0) -> None:
        self.a = 0
        self.b = 0
        self.c = 0
        self._n = 0
        self._d = {}
        bits = _MIN_BITS
        while (1 << bits) < 2 * size_hint:
            bits += 1
        if cython.compiled and mrc_evmap_alloc(cython.address(self._m), bits) < 0:
            raise MemoryError

    def __dealloc__(self) -> None:
        if cython.compiled:
            mrc_evmap_free(cython.address(self._m))

    def __len__(self) -> int:
        return self._n

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(check=False)
    def find(self, ev: cython.longlong) -> cython.bint:
        """Whether ``ev`` is in the map; if it is, its values are now ``a``, ``b``, ``c``."""
        if cython.compiled:
            e: cython.p_ulonglong = mrc_evmap_find(cython.address(self._m), ev)
            if e == cython.NULL:
                return False
            self.a = cython.cast(cython.longlong, e[1])
            self.b = e[2]
            self.c = e[3]
            return True
        found = self._d.get(ev)
        if found is None:
            return False
        self.a, self.b, self.c = found
        return True

    @cython.ccall
    @cython.annotation_typing(True)
    def put(self, ev: Any, a: cython.longlong, b: cython.ulonglong,
            c: cython.ulonglong) -> None:
        """Map ``ev`` to ``(a, b, c)`` (replacing what it mapped to); the values stay in
        ``a``, ``b``, ``c``."""
        if not 0 <= ev <= MAX_KEY:
            raise ValueError(f"EV {ev:#x} is out of range for an EvMap key")
        self.a = a
        self.b = b
        self.c = c
        if cython.compiled:
            fresh: cython.int = mrc_evmap_put(cython.address(self._m), ev, a, b, c)
            if fresh < 0:
                raise MemoryError
            self._n += fresh
            return
        if ev not in self._d:
            self._n += 1
        self._d[ev] = (a, b, c)

    @cython.ccall
    @cython.annotation_typing(True)
    def items(self) -> list:  # list[tuple[int, int, int, int]]
        """Every (ev, a, b, c), in increasing EV order."""
        out: list = []
        if cython.compiled:
            e: cython.pointer[cython.const[cython.ulonglong]]
            i: cython.Py_ssize_t
            for i in range(1 << self._m.bits):
                e = mrc_evmap_entry(cython.address(self._m), i)
                if e[0]:
                    out.append((cython.cast(cython.longlong, e[0] - 1),
                                cython.cast(cython.longlong, e[1]), e[2], e[3]))
        else:
            for ev, (a, b, c) in self._d.items():
                out.append((ev, a, b, c))
        out.sort()
        return out
