"""What the compiled core's sources need of the ``cython`` module when Cython is not
installed: ``compiled`` (False), which picks the pure-Python path of the few pieces whose
data layout differs between the builds (the event heap), and the class decorators that only
mean something to the compiler (``cclass``, ``freelist``, ``no_gc``), which leave a class as
it is. With Cython installed, its own shadow module serves instead (same answers). The build
replaces ``cython.compiled`` by True.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

compiled = False


def cclass(cls: T) -> T:
    """A C type in the compiled build (its layout is in the module's ``.pxd``)."""
    return cls


def no_gc(cls: T) -> T:
    """Compiled: instances are not tracked by the cycle collector (they can hold no cycle)."""
    return cls


def freelist(n: int) -> Callable[[T], T]:
    """Compiled: keep up to ``n`` freed instances for reuse instead of freeing them."""
    def keep(cls: T) -> T:
        return cls
    return keep
