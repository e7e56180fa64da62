"""What the compiled core's sources need of the ``cython`` module when Cython is not
installed: ``compiled`` (False), the decorators that only mean something to the compiler
(``cclass``, ``cfunc``, ``ccall``, ``locals``, ...), which leave a class or function as it is,
``declare`` (a typed module constant: its value), and the C type names the sources evaluate.
With Cython installed, its own shadow module serves instead (same answers). The build
replaces ``cython.compiled`` by True.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

compiled = False

# C types, as pure Python sees the values they hold (annotations are not evaluated; these
# serve ``declare`` and ``cast``)
char = schar = uchar = short = ushort = uint = long = ulong = int
longlong = ulonglong = Py_ssize_t = size_t = Py_hash_t = int
double = longdouble = float
bint = bool
void = None
globals().update({"int": int, "float": float})  # cython.int, cython.float


def _keep(obj: T) -> T:
    return obj


def _keep_with(*_: object, **__: object) -> Callable[[T], T]:
    return _keep


#: class and function decorators that only mean something to the compiler
cclass = no_gc = final = cfunc = ccall = inline = _keep
freelist = exceptval = annotation_typing = locals = returns = _keep_with


def declare(kind: object = None, value: Any = None, **_: object) -> Any:
    """A C variable in the compiled build; its value here."""
    return value


def cast(kind: object, value: T) -> T:
    return value
