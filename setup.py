"""Build hook of ``pip install .``: compile the simulator's per-packet modules, optionally.

Everything else about the package is declared in ``pyproject.toml``. This file adds one C
extension per module of ``mrc._build.COMPILED``, each compiled by Cython from the module's own
``.py`` source (pure-Python mode: the C types are annotations and decorators in the ``.py``).
The ``.pxd`` files Cython needs for one module to ``cimport`` another are generated first, from
the same sources, into the build directory (``mrc/_pxdgen.py``; modules that still have a
hand-written ``.pxd`` beside them use it). There is no second source: the extension and the
``.py`` are the same module, and the installed package carries both (Python imports the
extension; ``MRC_PURE_PYTHON=1`` makes it import the source).

The compiled core is optional and all or nothing. Without a C compiler, without Cython, or
when any module fails to build, the install still succeeds with no extension at all and a
one-line notice (``pip install -v .`` shows it; ``mrc-lab --version`` says which build runs
afterwards). A build that left some extensions behind is removed, because compiled modules
exchange C-typed objects and cannot run next to a pure-Python copy of one another.

An editable install (``pip install -e .``) builds nothing: it runs the sources as edited.
Developers who want the compiled core in a checkout run ``python setup.py build_ext
--inplace`` (needs setuptools>=77 and Cython; git ignores the results) and rebuild after
editing a compiled module, or set ``MRC_PURE_PYTHON=1``. ``MRC_NO_COMPILE=1`` skips the build.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
#: Cython's directives for the whole core. Bounds and wraparound checks stay on where the
#: code indexes Python lists (a wrong index must raise, as in pure Python); ``cdivision`` is
#: off so ``//`` and ``%`` keep Python's floor semantics on C integers.
DIRECTIVES = {
    "language_level": 3,
    "binding": True,
    "embedsignature": False,
    # hints stay hints: annotations are C types only inside C functions, which say so
    # (``@cython.annotation_typing(True)``, mrc/_pxdgen.py)
    "annotation_typing": False,
    "warn.unreachable": False,  # ``if cython.compiled:`` branches
}


def compiled_modules() -> list[str]:
    """``mrc._build.COMPILED``, read without importing the package."""
    tree = ast.parse((HERE / "mrc" / "_build.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(target, ast.Name) and target.id == "COMPILED":
            return list(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise RuntimeError("mrc/_build.py defines no COMPILED")


#: No fused multiply-add contraction (``a * b + c`` rounded once): CPython rounds each
#: operation, and the floating-point arithmetic of the congestion controls must give the same
#: bits in both builds (GCC contracts by default where the target has FMA, e.g. aarch64).
CFLAGS = ["-O2", "-g0", "-ffp-contract=off"]
#: ``MRC_DEBUG_INFO=1`` keeps line tables (``-g``) for profilers that attribute costs to
#: source lines (``benchmarks/cache_profile.py``); the code generated is the same.
if os.environ.get("MRC_DEBUG_INFO", "").strip() not in ("", "0"):
    CFLAGS[1] = "-g"


def generate_pxds(out: Path) -> list[Path]:
    """The generated ``.pxd`` files of the compiled set, written under ``out``
    (``mrc/_pxdgen.py``, loaded by path: the package is not importable while it builds)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_mrc_pxdgen", HERE / "mrc" / "_pxdgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module.generate_all(HERE, compiled_modules(), out)  # type: ignore[no-any-return]


def declarations_digest(pxd_dir: Path) -> str:
    """A digest of every C declaration the modules compile against: the generated ``.pxd``
    files, the ``*_c.pxd`` declarations of the C headers, and the headers. Cython's own
    dependency scan does not follow a pure-mode ``.py`` to the generated ``.pxd`` of the
    modules it uses, so a changed signature (a method made ``cdef``, a class moved) would
    leave the modules that cimport it compiled against the old one, and crash: when the
    digest changes, every module is rebuilt."""
    digest = hashlib.sha256()
    files = sorted([*pxd_dir.rglob("*.pxd"), *(HERE / "mrc").rglob("*_c.pxd"),
                    *(HERE / "mrc").rglob("*.h")])
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def extensions() -> list[Extension]:
    # (include_dirs: C headers beside the sources are included as "mrc/.../name.h")
    return [Extension(name, [str(Path(*name.split(".")).with_suffix(".py"))],
                      include_dirs=[str(HERE)], extra_compile_args=CFLAGS)
            for name in compiled_modules()]


def notice(reason: str) -> None:
    print(f"mrc-lab: compiled core not built ({reason}); installing pure Python "
          "(same results, slower)", file=sys.stderr, flush=True)


class OptionalBuildExt(build_ext):
    """``build_ext`` that cythonizes first and, on any failure, builds nothing at all."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        if os.environ.get("MRC_NO_COMPILE", "").strip() not in ("", "0"):
            notice("MRC_NO_COMPILE is set")
            self.extensions = []
            return
        if getattr(self, "editable_mode", False):
            # an editable install runs the sources as they are edited: nothing is built
            # beside them (python setup.py build_ext --inplace does that on purpose)
            notice("editable install")
            self.extensions = []
            return
        wanted = list(self.extensions)
        try:
            from Cython.Build import cythonize

            # the generated .pxd files and Cython's C sources go under build/; the extensions
            # then compile those
            pxd_dir = Path(self.build_temp) / "pxd"
            generate_pxds(pxd_dir)
            stamp = Path(self.build_temp) / "declarations.sha256"
            digest = declarations_digest(pxd_dir)
            same = stamp.is_file() and stamp.read_text(encoding="utf-8") == digest
            generated = cythonize(
                wanted, compiler_directives=DIRECTIVES, nthreads=self.parallel or 1,
                build_dir=str(Path(self.build_temp) / "cython"), quiet=True,
                include_path=[str(pxd_dir), str(HERE)], force=not same)
            sources = {ext.name: ext.sources for ext in generated}
            for ext in wanted:
                ext.sources = sources[ext.name]
            super().run()
            stamp.write_text(digest, encoding="utf-8")  # (only once every module is built)
        except Exception as exc:  # no compiler, no Cython, a compile error: pure Python
            self._remove_outputs(wanted)
            self.extensions = []
            detail = str(exc).splitlines()[0] if str(exc) else ""
            if len(detail) > 100 and type(exc).__name__ != "PxdError":
                detail = "..." + detail[-97:]
            notice(f"{type(exc).__name__}: {detail}")

    def _remove_outputs(self, wanted: list[Extension]) -> None:
        """Delete whatever part of the set did get built (all or nothing)."""
        for ext in wanted:
            for root in {self.build_lib, str(HERE)} if self.inplace else {self.build_lib}:
                path = Path(root) / self.get_ext_filename(ext.name)
                if path.is_file():
                    path.unlink()


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
