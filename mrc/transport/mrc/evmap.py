"""A map from EV values to three integers, for the lookups every ACK makes.

Every DATA packet's ACK goes back along the path of the EV it came on (the receiver looks up
the reply path by the peer's EV), and every ACK's EV finds the plane whose reorder window it
samples (loss recovery). With dicts, compiled, each lookup boxes the EV into an integer and
reads the dict, its index and entry, the stored key, the value tuple and its integers: five
or six cache lines, all of them cold at 1024 hosts, on every ACK.

:class:`EvMap` keeps the values in its own entries: compiled, one C array of 4-word entries
(the key plus one, then the three values), open addressing with linear probing at a load of
at most one half, so a lookup reads the map and, nearly always, one entry's cache line. In
pure Python it is a dict of tuples. Both answer the same.
"""

from __future__ import annotations

from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

#: keys are EV values in [0, 2**63 - 1): the compiled entries store key + 1 (0 marks empty)
MAX_KEY = (1 << 63) - 2
#: (its typed copy, compiled: the name above stays a Python attribute)
_MAX_KEY = cython.declare(cython.longlong, MAX_KEY)
#: 2**64 / golden ratio: Fibonacci hashing of the key
_GOLDEN = cython.declare(cython.ulonglong, 11400714819323198485)
_ENTRY_WORDS = cython.declare(cython.longlong, 4)
_MIN_BITS = cython.declare(cython.longlong, 3)


@cython.cclass
class EvMap:
    """EV value -> (a, b, c): ``a`` a signed 64-bit integer, ``b`` and ``c`` unsigned.

    Entries are only added or replaced, never removed. :meth:`find` says whether an EV is in
    the map and, when it is, leaves its values in :attr:`a`, :attr:`b` and :attr:`c` (no
    tuple per lookup); they are meaningful until the next call of :meth:`find` or
    :meth:`put`."""

    # the values find() leaves, then the table
    a: cython.longlong
    b: cython.ulonglong
    c: cython.ulonglong
    _tab: cython.p_ulonglong  # (the compiled table; unused in pure Python)
    _bits: cython.int
    _n: cython.Py_ssize_t
    _buf: bytearray
    _d: dict[int, tuple[int, int, int]]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, size_hint: int = 0) -> None:
        self.a = 0
        self.b = 0
        self.c = 0
        self._n = 0
        bits = _MIN_BITS
        while (1 << bits) < 2 * size_hint:
            bits += 1
        self._bits = bits
        self._d = {}
        self._buf = bytearray()
        if cython.compiled:
            self._alloc(bits)

    def __len__(self) -> int:
        return self._n

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(check=False)
    def find(self, ev: cython.longlong) -> cython.bint:
        """Whether ``ev`` is in the map; if it is, its values are now ``a``, ``b``, ``c``."""
        if cython.compiled:
            if ev < 0 or ev > _MAX_KEY:
                return False
            key: cython.ulonglong = cython.cast(cython.ulonglong, ev) + 1
            mask: cython.ulonglong = (cython.cast(cython.ulonglong, 1) << self._bits) - 1
            h: cython.ulonglong = (key * _GOLDEN) >> (64 - self._bits)
            tab: cython.p_ulonglong = self._tab
            e: cython.p_ulonglong
            while True:
                e = tab + _ENTRY_WORDS * h
                if e[0] == key:
                    self.a = cython.cast(cython.longlong, e[1])
                    self.b = e[2]
                    self.c = e[3]
                    return True
                if e[0] == 0:
                    return False
                h = (h + 1) & mask
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
            if 2 * (self._n + 1) > (1 << self._bits):
                self._rehash(self._bits + 1)
            if self._store(cython.cast(cython.ulonglong, ev) + 1, self.a, self.b, self.c):
                self._n += 1
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
            tab: cython.p_ulonglong = self._tab
            e: cython.p_ulonglong
            i: cython.Py_ssize_t
            for i in range(1 << self._bits):
                e = tab + _ENTRY_WORDS * i
                if e[0]:
                    out.append((cython.cast(cython.longlong, e[0] - 1),
                                cython.cast(cython.longlong, e[1]), e[2], e[3]))
            out.sort()
            return out
        for ev, (a, b, c) in self._d.items():
            out.append((ev, a, b, c))
        out.sort()
        return out

    # ------------------------------------------------------------------ compiled table
    @cython.cfunc
    @cython.annotation_typing(True)
    def _alloc(self, bits: cython.int) -> None:
        """A zeroed table of ``2**bits`` entries, from a 64-byte boundary (compiled only)."""
        buf: bytearray = bytearray(8 * _ENTRY_WORDS * (1 << bits) + 64)
        start: cython.size_t = cython.cast(cython.size_t, cython.cast(cython.p_char, buf))
        self._buf = buf
        self._tab = cython.cast(cython.p_ulonglong, (start + 63) & ~cython.cast(cython.size_t, 63))
        self._bits = bits

    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(check=False)
    def _store(self, key: cython.ulonglong, a: cython.longlong, b: cython.ulonglong,
               c: cython.ulonglong) -> cython.bint:
        """Write an entry; True when the key was new (compiled only)."""
        mask: cython.ulonglong = (cython.cast(cython.ulonglong, 1) << self._bits) - 1
        h: cython.ulonglong = (key * _GOLDEN) >> (64 - self._bits)
        tab: cython.p_ulonglong = self._tab
        e: cython.p_ulonglong
        new: cython.bint
        while True:
            e = tab + _ENTRY_WORDS * h
            if e[0] == key or e[0] == 0:
                new = e[0] == 0
                e[0] = key
                e[1] = cython.cast(cython.ulonglong, a)
                e[2] = b
                e[3] = c
                return new
            h = (h + 1) & mask

    @cython.cfunc
    @cython.annotation_typing(True)
    def _rehash(self, bits: cython.int) -> None:
        """Move every entry into a table of ``2**bits`` (compiled only)."""
        old_buf = self._buf  # keeps the old table alive while its entries move
        old: cython.p_ulonglong = self._tab
        n: cython.Py_ssize_t = 1 << self._bits
        i: cython.Py_ssize_t
        e: cython.p_ulonglong
        self._alloc(bits)
        for i in range(n):
            e = old + _ENTRY_WORDS * i
            if e[0]:
                self._store(e[0], cython.cast(cython.longlong, e[1]), e[2], e[3])
        del old_buf
