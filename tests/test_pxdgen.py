"""The .pxd generator (mrc/_pxdgen.py): what it writes for small sources, and what it refuses."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mrc import _build, _pxdgen


def _pxd(tmp_path: Path, source: str, others: dict[str, set[str]] | None = None) -> str:
    path = tmp_path / "mod.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    module = _pxdgen.read_module("pkg.mod", path)
    types = _pxdgen.extension_types({"pkg.mod": module}, {})
    types.update(others or {})
    text = _pxdgen.generate(module, types)
    first, rest = text.split("\n", 1)
    assert first == _pxdgen.HEADER.format(source="mod.py")
    return rest


def _error(tmp_path: Path, source: str) -> str:
    with pytest.raises(_pxdgen.PxdError) as err:
        _pxd(tmp_path, source)
    return str(err.value)


def test_fields_signatures_and_their_visibility(tmp_path: Path) -> None:
    text = _pxd(tmp_path, """
        from typing import Any, Final
        import cython
        from pkg.other import Remote, Plain

        @cython.final
        @cython.cclass
        class Port(Remote):
            window: cython.longlong
            name: Final[str]
            peer: Port | None
            remote: Remote
            plain: Plain
            hint: int
            cb: Any
            _p: cython.p_longlong
            _q: cython.pointer[cython.const[cython.double]]
            hist: cython.longlong[::1]
            if not cython.compiled:
                __slots__ = tuple(__annotations__)

            def __init__(self, name: str) -> None:
                self.name = name

            @cython.cfunc
            @cython.annotation_typing(True)
            @cython.exceptval(-1, check=False)
            def push(self, t: cython.longlong, fn: object, peer: Port) -> cython.int:
                d: cython.double = 0.5
                return 0

            @cython.ccall
            @cython.annotation_typing(True)
            def pull(self, n: cython.Py_ssize_t = 1) -> cython.void:
                pass

            @cython.cfunc
            @cython.inline
            @cython.annotation_typing(True)
            @cython.exceptval(check=False)
            def empty(self) -> cython.bint:
                return True

        @cython.ccall
        @cython.annotation_typing(True)
        def make(a: cython.ulonglong, b: list[int]) -> Port:
            return Port("x")
    """, {"pkg.other": {"Remote"}})
    assert text == textwrap.dedent("""\
        cimport cython
        from pkg.other cimport Remote

        @cython.final
        cdef class Port(Remote):
            cdef public long long window
            cdef readonly str name
            cdef public Port peer
            cdef public Remote remote
            cdef public object plain
            cdef public object hint
            cdef public object cb
            cdef long long* _p
            cdef const double* _q
            cdef public long long[::1] hist
            cdef int push(self, long long t, object fn, Port peer) except -1
            cpdef void pull(self, Py_ssize_t n=*) except *
            cdef inline bint empty(self) noexcept
        cpdef Port make(unsigned long long a, list b)
        """)


def test_python_mixins_follow_the_one_extension_base(tmp_path: Path) -> None:
    text = _pxd(tmp_path, """
        import cython
        from pkg.other import Remote

        class Mixin:
            __slots__ = ()

            def helper(self) -> int:
                return 1

        @cython.cclass
        class Port(Remote, Mixin):
            x: cython.longlong
    """, {"pkg.other": {"Remote"}})
    assert "from pkg.other cimport Remote\n" in text
    assert "cdef class Port(Remote):\n    cdef public long long x\n" in text
    assert "Mixin" not in text


def test_forward_references_and_module_order(tmp_path: Path) -> None:
    text = _pxd(tmp_path, """
        import cython

        @cython.cclass
        class Queue:
            head: "Item | None"

        @cython.cclass
        class Item:
            next: "Item"
    """)
    assert "cdef class Item\n\ncdef class Queue:\n    cdef public Item head" in text
    assert text.endswith("cdef class Item:\n    cdef public Item next\n")


def test_c_types_of_a_header_and_field_less_classes(tmp_path: Path) -> None:
    """A C struct of a header's .pxd (``from cython.cimports...``) types a private field; the
    .py cimports what its locals use itself; a class without fields says ``__slots__ = ()``."""
    text = _pxd(tmp_path, """
        import cython
        if cython.compiled:
            from cython.cimports.pkg.box_c import box, box_get, cursor

        @cython.cclass
        class Empty:
            __slots__ = ()

        @cython.cclass
        class Holder:
            _b: box

            @cython.cfunc
            @cython.annotation_typing(True)
            def get(self) -> cython.longlong:
                c: cython.pointer[cursor] = cython.NULL
                return box_get(cython.address(self._b))
    """)
    assert text == textwrap.dedent("""\
        cimport cython
        from pkg.box_c cimport box

        cdef class Empty:
            pass

        cdef class Holder:
            cdef box _b
            cdef long long get(self) except *
        """)


def test_the_output_is_deterministic_and_written_only_when_changed(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("import cython\n\n@cython.cclass\nclass A:\n    x: cython.int\n",
                              encoding="utf-8")
    (pkg / "b.py").write_text("import cython\nfrom pkg.a import A\n\n@cython.cclass\n"
                              "class B(A):\n    y: A\n", encoding="utf-8")
    (pkg / "c.py").write_text("", encoding="utf-8")
    (pkg / "c.pxd").write_text("cdef class C:\n    pass\n", encoding="utf-8")  # hand-written
    out = tmp_path / "out"
    files = _pxdgen.generate_all(tmp_path, ["pkg.b", "pkg.a", "pkg.c"], out)
    assert [f.relative_to(out).as_posix() for f in files] == ["pkg/a.pxd", "pkg/b.pxd"]
    assert (out / "pkg" / "__init__.pxd").is_file()
    assert "from pkg.a cimport A\n" in files[1].read_text(encoding="utf-8")
    before = {f: (f.read_text(encoding="utf-8"), f.stat().st_mtime_ns) for f in files}
    again = _pxdgen.generate_all(tmp_path, ["pkg.a", "pkg.b", "pkg.c"], out)
    assert {f: (f.read_text(encoding="utf-8"), f.stat().st_mtime_ns) for f in again} == before


@pytest.mark.parametrize(("source", "message"), [
    ("@cython.cclass\nclass A:\n    x: float\n", "mod.py:5: A.x: `float` is ambiguous"),
    ("@cython.cclass\nclass A:\n    x: cython.longlong = 0\n", "mod.py:5: A.x: a C field has no"),
    ("@cython.cclass\nclass A:\n    __slots__ = ('x',)\n", "mod.py:5: A: __slots__ come from"),
    ("@cython.cclass\nclass A:\n    x: cython.lnglong\n", "mod.py:5: unknown C type cython.lnglong"),
    ("@cython.cclass\nclass A(Exception):\n    pass\n", "mod.py:4: A: a cclass derives from"),
    ("class M:\n    pass\n\n@cython.cclass\nclass A(M, Exception):\n    pass\n",
     "mod.py:7: A: a cclass derives from one extension type, first"),
    ("@cython.cfunc\ndef f(a: cython.int) -> cython.int:\n    return a\n",
     "mod.py:4: f: a C function says @cython.annotation_typing(True)"),
    ("@cython.cfunc\n@cython.annotation_typing(True)\ndef f(a: int) -> cython.int:\n    return a\n",
     "mod.py:5: f(a): `int` is ambiguous in a C declaration: write cython.longlong or object"),
    ("@cython.cfunc\n@cython.annotation_typing(True)\ndef f() -> object:\n    x: bool = 1\n",
     "mod.py:6: f: local x: `bool` is ambiguous"),
    ("@cython.ccall\n@cython.annotation_typing(True)\ndef f(*a: object) -> object:\n    pass\n",
     "mod.py:5: f: a C function takes positional parameters only"),
    ("@cython.cfunc\n@cython.annotation_typing(True)\n@cython.exceptval(-1)\n"
     "def f() -> object:\n    pass\n", "mod.py:5: f: a function returning an object"),
    ("def f(a: cython.longlong) -> None:\n    pass\n",
     "mod.py:3: f: `cython.longlong` in a Python function is no C type"),
    ("def f() -> None:\n    d: cython.double = 0.0\n",
     "mod.py:4: f: `cython.double` in a Python function is no C type"),
    ("class P:\n    @cython.cfunc\n    @cython.annotation_typing(True)\n    def f(self) -> object:"
     "\n        pass\n", "mod.py:6: P.f: C methods need a cclass"),
    ("@cython.cclass\nclass A:\n    x: cython.longlong | None\n",
     "mod.py:5: A.x: the C type long long cannot be None"),
])
def test_what_it_cannot_express_is_an_error_at_its_line(tmp_path: Path, source: str,
                                                        message: str) -> None:
    assert message in _error(tmp_path, "import cython\n\n" + source)


def test_every_generated_module_of_the_core_generates() -> None:
    """The core's own sources: every module without a hand-written .pxd generates one (what
    the build will do, without the build)."""
    root = _build.module_path("mrc.packet").parent.parent
    hand = {n: _build.module_path(n).with_suffix(".pxd").read_text(encoding="utf-8")
            for n in _build.COMPILED if _build.module_path(n).with_suffix(".pxd").is_file()}
    modules = {n: _pxdgen.read_module(n, _build.module_path(n))
               for n in _build.COMPILED if n not in hand}
    assert "mrc.packet" in modules and root.is_dir()
    types = _pxdgen.extension_types(modules, hand)
    for module in modules.values():
        _pxdgen.generate(module, types)
