"""A C-typed local stays C-typed: every name a ``@cython.locals`` types is bound in its function.

Cython types the locals a ``@cython.locals(...)`` names (in the ``.py``, or in a hand-written
``.pxd`` of a module not yet converted) by name; a local renamed in the function body and not
in that list silently becomes a Python object in the compiled build (no warning: the old name
is simply never used). Checked here from the sources, so it runs in the normal suite, in
either build, without compiling anything. (Annotated locals of C functions, ``d:
cython.longlong = ...``, are typed where the name is bound; the generator refuses them in a
Python function, where they would type nothing.)

Where a build left Cython's C beside the build (``python setup.py build_ext``: ``build/``),
the C itself is checked too: every C-typed local of the converted modules' C functions is a C
variable there, not a ``PyObject *``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mrc import _build, _pxdgen

_DECL = re.compile(r"^(\s*)c?p?def\s[^(]*?(\w+)\s*\(", re.MULTILINE)
_CLASS = re.compile(r"^cdef class (\w+)")


def _bound(fn: ast.FunctionDef) -> set[str]:
    """Every name the function binds: parameters, assignment and loop targets, ``with``/
    ``except``/``import`` names (nested functions' names count: Cython sees them too)."""
    args = fn.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return names


def _typed_names(decorator: ast.expr) -> list[str]:
    if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "locals"
            and getattr(decorator.func.value, "id", "") == "cython"):
        return [k.arg for k in decorator.keywords if k.arg]
    return []


def _functions(tree: ast.Module) -> dict[tuple[str, str], ast.FunctionDef]:
    """(class or "", name) -> function, for module functions and methods."""
    out: dict[tuple[str, str], ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out["", node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    out[node.name, sub.name] = sub
    return out


def _pxd_locals(text: str) -> list[tuple[str, str, list[str]]]:
    """(class or "", function, typed names) of each ``@cython.locals`` block of a .pxd."""
    out = []
    cls = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        head = _CLASS.match(line)
        if head:
            cls = head.group(1)
        elif line and not line[0].isspace() and not line.startswith("@"):
            cls = ""  # back at module level
        if line.strip().startswith("@cython.locals("):
            block = line.strip()[1:]
            while block.count("(") > block.count(")"):
                i += 1
                block += lines[i].strip()
            decl = _DECL.match(lines[i + 1])
            assert decl, f"no declaration after {block}"
            owner = cls if decl.group(1) else ""
            out.append((owner, decl.group(2), _typed_names(ast.parse(block, mode="eval").body)))
        i += 1
    return out


def _unbound() -> list[str]:
    missing = []
    for module in _build.COMPILED:
        source: Path = _build.module_path(module)
        functions = _functions(ast.parse(source.read_text(encoding="utf-8")))
        typed = [(owner, name, names)
                 for (owner, name), fn in functions.items()
                 for names in map(_typed_names, fn.decorator_list) if names]
        pxd = source.with_suffix(".pxd")
        if pxd.is_file():
            typed += _pxd_locals(pxd.read_text(encoding="utf-8"))
        for owner, name, names in typed:
            fn = functions.get((owner, name))
            where = f"{module}.{owner + '.' if owner else ''}{name}"
            if fn is None:
                missing.append(f"{where}: no such function in the .py")
                continue
            missing += [f"{where}: {n}" for n in names if n not in _bound(fn)]
    return missing


def test_every_typed_local_is_bound_in_its_function() -> None:
    missing = _unbound()
    assert not missing, f"C-typed locals that no longer exist (renamed?): {missing}"


def test_the_check_sees_a_renamed_local(tmp_path: Path) -> None:
    """The check itself: a local typed under its old name is reported."""
    text = ("@cython.locals(total=cython.longlong)\n"
            "def f(n):\n    sum_ = 0\n    for i in range(n):\n        sum_ += i\n    return sum_\n")
    fn = _functions(ast.parse(text))["", "f"]
    assert "total" not in _bound(fn) and {"sum_", "i", "n"} <= _bound(fn)
    pxd = "cdef class A:\n    @cython.locals(x=cython.int,\n                   y=Py_ssize_t)\n" \
          "    cpdef long long go(self, long long a) except? -1\n" \
          "@cython.locals(z=cython.int)\ncdef long long top(long long a)\n"
    assert _pxd_locals(pxd) == [("A", "go", ["x", "y"]), ("", "top", ["z"])]


def _c_locals(module: str) -> list[tuple[str, str, str]]:
    """(class or "", function, local) of every annotated local of a C type in the C
    functions of a converted module."""
    tree = ast.parse(_build.module_path(module).read_text(encoding="utf-8"))
    out = []
    for (owner, name), fn in _functions(tree).items():
        kinds = {_pxdgen._decorator_name(d) for d in fn.decorator_list}
        if not kinds & {"cfunc", "ccall"}:
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and _pxdgen._is_cython(node.annotation)):
                out.append((owner, name, node.target.id))
    return out


def _generated_c(module: str) -> str | None:
    """Cython's C for a module, from the last build, if it is newer than the source."""
    source = _build.module_path(module)
    root = source.parents[len(module.split(".")) - 1]
    found = sorted((root / "build").glob("temp.*/cython/" + "/".join(module.split(".")) + ".c"))
    if not found or found[-1].stat().st_mtime < source.stat().st_mtime:
        return None
    return found[-1].read_text(encoding="utf-8")


def test_typed_locals_are_c_variables_in_the_generated_c() -> None:
    converted = [m for m in _build.COMPILED
                 if not _build.module_path(m).with_suffix(".pxd").is_file()]
    checked, boxed = 0, []
    for module in converted:
        text = _generated_c(module)
        if text is None:
            continue
        prefix = "__pyx_f_" + "".join(f"{len(p)}{p}_" for p in module.split("."))
        for owner, name, local in _c_locals(module):
            cname = prefix + (f"{len(owner)}{owner}_" if owner else "") + name
            head = re.search(rf"^static [^;]*\b{re.escape(cname)}\([^;]*?\) {{$", text,
                             re.MULTILINE)
            assert head, f"{module}: no C function {cname}"
            body = text[head.end():text.index("\n}\n", head.end())]
            decl = re.search(rf"^  (.*?)\b__pyx_v_{local}\b.*;$", body, re.MULTILINE)
            checked += 1
            if decl is None or "PyObject" in decl.group(1):
                boxed.append(f"{module}.{owner + '.' if owner else ''}{name}: {local}")
    if not checked:
        pytest.skip("no generated C newer than the sources (python setup.py build_ext)")
    assert not boxed, f"C-typed locals that the compiled build boxes: {boxed}"
