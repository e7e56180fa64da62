"""A port's queue: :class:`Fifo`, the operations of a ``deque`` the ports use, in a ring
(:mod:`mrc.sim.ports`, :mod:`mrc.sim.pfc_ports`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if not cython.compiled:  # (the compiled build has them from engine_c.pxd, in C; unused here)
    from mrc.sim.engine import _item_array, _slot_put, _slot_take

    def _ring_fill(ring: Any, n: int) -> None:
        """Fill a C ring of ``n`` slots with None (compiled only: ``Fifo``'s inline ring)."""
        raise NotImplementedError

    def _ring_clear(ring: Any, n: int) -> None:
        """Release a C ring's references (compiled only: ``Fifo``'s inline ring)."""
        raise NotImplementedError

#: Slots of a :class:`Fifo`'s ring at first (compiled: inside the queue's own struct).
_INLINE = 4


class Fifo:
    """A port's queue: the operations of a ``deque`` the ports use (``append``, ``popleft``,
    ``appendleft``, ``remove``, ``len``, truth, iteration), in a ring.

    Cython does not know a deque's type, so every packet a compiled port queued and took out
    of a deque cost two calls through Python's call protocol (~70 instructions each); this
    queue's ``append`` and ``popleft`` are C calls of a few. The ring has a power-of-two
    length (``_mask``: that length less one, kept so the hot paths need no ``len``), None
    where free; ``_head`` is the first item's index and ``_count`` how many there are.
    Compiled, ``_slots`` points at the ring's slots: first :data:`_INLINE` of them inside the
    queue's own C struct, where a queue that never holds more (most ports' queues, most of
    the time) reads its items from the lines it reads its counts from; past that, a list's
    item array (``engine_c.h``), which the list, never resized in place, keeps where it was.
    At 1024 hosts a queue gone cold since its last packet costs a cache line less per
    operation either way than reaching a list's array through the list. In pure Python the
    ring is the list ``_items``."""

    # (``_ring``, the inline slots, is a C array of fifo.pxd: compiled only, unknown to
    # mypy, hence the ignores where it is named)
    __slots__ = ("_items", "_slots", "_mask", "_head", "_count", "_ring")

    def __init__(self) -> None:
        self._head = 0
        self._count = 0
        if cython.compiled:
            _ring_fill(self._ring, _INLINE)  # type: ignore[attr-defined]
            self._slots = self._ring  # type: ignore[attr-defined]
            self._mask = _INLINE - 1
        else:
            self._set_items([None] * _INLINE)

    def __dealloc__(self) -> None:
        # (compiled only: the inline ring's references are the queue's own; an empty ring
        # left for a list holds none)
        _ring_clear(self._ring, _INLINE)  # type: ignore[attr-defined]

    def _set_items(self, items: list[Any]) -> None:
        """Make ``items`` (a power-of-two length) the ring."""
        self._items: list[Any] = items
        self._mask = len(items) - 1
        if cython.compiled:
            if self._slots == self._ring:  # type: ignore[attr-defined]
                # (its items are in ``items`` now)
                _ring_clear(self._ring, _INLINE)  # type: ignore[attr-defined]
            self._slots = _item_array(items)

    def append(self, item: Any) -> None:
        if self._count > self._mask:
            self._grow()
        i = (self._head + self._count) & self._mask
        if cython.compiled:
            _slot_put(self._slots, i, item)
        else:
            self._items[i] = item
        self._count += 1

    def appendleft(self, item: Any) -> None:
        if self._count > self._mask:
            self._grow()
        self._head = (self._head - 1) & self._mask
        if cython.compiled:
            _slot_put(self._slots, self._head, item)
        else:
            self._items[self._head] = item
        self._count += 1

    def popleft(self) -> Any:
        if not self._count:
            raise IndexError("pop from an empty queue")
        if cython.compiled:
            item = _slot_take(self._slots, self._head)
        else:
            item = self._items[self._head]
            self._items[self._head] = None
        self._head = (self._head + 1) & self._mask
        self._count -= 1
        return item

    def remove(self, item: Any) -> None:
        """Remove the first occurrence of ``item`` (ValueError if there is none)."""
        items = self._in_order()
        items.remove(item)
        self._count = len(items)
        self._head = 0
        self._set_items(items + [None] * (self._mask + 1 - len(items)))

    def _grow(self) -> None:
        items = self._in_order()
        self._head = 0
        self._set_items(items + [None] * len(items))

    def _in_order(self) -> list[Any]:
        mask = self._mask
        head = self._head
        out = []
        for i in range(self._count):
            if cython.compiled:
                out.append(cython.cast(object, self._slots[(head + i) & mask]))
            else:
                out.append(self._items[(head + i) & mask])
        return out

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[Any]:
        return iter(self._in_order())
