"""A port's queue: :class:`Fifo`, the operations of a ``deque`` the ports use
(:mod:`mrc.sim.ports`, :mod:`mrc.sim.pfc_ports`, :mod:`mrc.sim.pfc_nic`).

Pure Python uses ``collections.deque`` itself. Compiled, Cython does not know a deque's type,
so every packet a port queued and took out of one would cost two calls through Python's call
protocol (~70 instructions each); :class:`Fifo` is a ring in C (``fifo_c.h``, which says how)
whose ``append`` and ``popleft`` are C calls of a few instructions, in the same order as the
deque: first in, first out, ``appendleft`` in front. Its first slots are inside the queue's
own struct, where a queue that never holds more (most ports' queues, most of the time) reads
its items from the cache line it reads its counts from: at 1024 hosts, a queue gone cold
since its last packet costs a cache line less per operation than reaching items through a
separate object.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the ring, in C
    from cython.cimports.mrc.sim.fifo_c import (
        mrc_fifo,
        mrc_fifo_at,
        mrc_fifo_free,
        mrc_fifo_full,
        mrc_fifo_init,
        mrc_fifo_move,
        mrc_fifo_pop,
        mrc_fifo_push,
        mrc_fifo_push_front,
    )


@cython.final
@cython.cclass
class Fifo:
    """A port's queue, compiled: the operations of a ``deque`` the ports use (``append``,
    ``popleft``, ``appendleft``, ``remove``, ``len``, truth, iteration) on a ring in C."""

    _q: mrc_fifo
    #: the list whose items are the ring's slots once it outgrew its inline ones (``_q``
    #: points into it: kept here, and seen by the garbage collector)
    _items: list[Any]

    def __init__(self) -> None:
        mrc_fifo_init(cython.address(self._q))
        self._items = []

    def __dealloc__(self) -> None:
        mrc_fifo_free(cython.address(self._q))

    @cython.ccall
    @cython.annotation_typing(True)
    def append(self, item: object) -> cython.void:
        if mrc_fifo_full(cython.address(self._q)):
            self._grow()
        mrc_fifo_push(cython.address(self._q), item)

    @cython.ccall
    @cython.annotation_typing(True)
    def appendleft(self, item: object) -> cython.void:
        if mrc_fifo_full(cython.address(self._q)):
            self._grow()
        mrc_fifo_push_front(cython.address(self._q), item)

    @cython.ccall
    @cython.annotation_typing(True)
    def popleft(self) -> object:
        if not self._q.count:
            raise IndexError("pop from an empty queue")
        return mrc_fifo_pop(cython.address(self._q))

    @cython.ccall
    @cython.annotation_typing(True)
    def remove(self, item: object) -> None:
        """Remove the first occurrence of ``item`` (ValueError if there is none)."""
        items: list = self._in_order()
        items.remove(item)
        while self._q.count:
            mrc_fifo_pop(cython.address(self._q))
        for kept in items:
            mrc_fifo_push(cython.address(self._q), kept)

    @cython.cfunc
    @cython.annotation_typing(True)
    def _grow(self) -> None:
        self._items = mrc_fifo_move(cython.address(self._q), 2 * (self._q.mask + 1))

    @cython.cfunc
    @cython.annotation_typing(True)
    def _in_order(self) -> list:
        out: list = []
        i: cython.Py_ssize_t
        for i in range(self._q.count):
            out.append(cython.cast(object, mrc_fifo_at(cython.address(self._q), i)))
        return out

    def __len__(self) -> int:
        return self._q.count

    def __bool__(self) -> bool:
        return self._q.count > 0

    def __iter__(self) -> Iterator[Any]:
        return iter(self._in_order())


if not cython.compiled:  # pure Python: the deque is the queue
    Fifo = deque  # type: ignore[misc, assignment]
