"""The compiled core (mrc/_build.py, setup.py): which build runs, the switch that forces pure
Python, and the rule that the compiled set is all or nothing.

Whether both builds give the same bytes is tested where the determinism is
(``tests/test_determinism.py``); these tests hold the mechanism itself, in child processes
(the choice is made once per process, when ``mrc`` is imported).
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mrc
from mrc import _build, _pxdgen

ROOT = Path(__file__).resolve().parents[1]
# children run with -P: they import the same mrc as this process (installed, or on
# PYTHONPATH), never the checkout's sources by accident of their working directory
PROBE = ("import json, mrc, mrc.sim.engine as e, mrc.packet as p, mrc._build as b; "
         "print(json.dumps([b.BUILD, b.REASON, e.__file__, p.__file__]))")


def _probe(env: dict[str, str]) -> tuple[str, str, str, str]:
    import json

    full = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-P", "-c", PROBE], env=full, capture_output=True,
                         text=True, check=True)
    build, reason, engine, packet = json.loads(out.stdout.strip().splitlines()[-1])
    return build, reason, engine, packet


def _pxd_texts() -> dict[str, str]:
    """The .pxd text of every module of the set: hand-written beside its source, or what the
    build generates from the source (mrc/_pxdgen.py)."""
    hand = {name: _build.module_path(name).with_suffix(".pxd").read_text(encoding="utf-8")
            for name in _build.COMPILED if _build.module_path(name).with_suffix(".pxd").is_file()}
    modules = {name: _pxdgen.read_module(name, _build.module_path(name))
               for name in _build.COMPILED if name not in hand}
    types = _pxdgen.extension_types(modules, hand)
    return {**hand, **{name: _pxdgen.generate(m, types) for name, m in modules.items()}}


def test_every_compiled_module_has_its_source_and_no_stray_declarations() -> None:
    """The set ``setup.py`` compiles is ``COMPILED``: each module is a .py (the one source),
    and no hand-written .pxd lies elsewhere (a declaration nobody compiles; the declarations
    of a C header, ``name.h`` beside ``name.pxd``, are the exception) or carries the
    generated header (generated files belong in the build directory, never in git)."""
    for name in _build.COMPILED:
        assert _build.module_path(name).is_file(), name
    declared = {str(p.relative_to(ROOT).with_suffix("")).replace(os.sep, ".")
                for p in (ROOT / "mrc").rglob("*.pxd") if not p.with_suffix(".h").is_file()}
    assert declared <= set(_build.COMPILED)  # (or the declarations of a C header beside it)
    for path in (ROOT / "mrc").rglob("*.pxd"):
        assert not path.read_text(encoding="utf-8").startswith("# Generated"), path


_PXD_CLASS = re.compile(r"^cdef class (\w+)(?:\((\w+)\))?:", re.MULTILINE)
_PXD_FIELD = re.compile(r"^    cdef (?:public |readonly )?([^(\n]+?)\s*(?:#.*)?$", re.MULTILINE)


def _declared_fields() -> dict[str, set[str]]:
    """Every cdef class of the .pxd files: its C fields, its compiled bases' included."""
    own: dict[str, tuple[set[str], str | None]] = {}
    for text in _pxd_texts().values():
        heads = list(_PXD_CLASS.finditer(text))
        for i, head in enumerate(heads):
            body = text[head.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
            fields: set[str] = set()
            for decl in _PXD_FIELD.findall(body):
                if decl.startswith("class "):
                    continue
                first, *rest = decl.split(",")
                # (a C array field is named before its brackets: ``PyObject* _ring[4]``)
                fields.add(first.split()[-1].lstrip("*").split("[")[0])
                fields.update(name.strip().split("[")[0] for name in rest)
            assert head.group(1) not in own, f"two cdef classes named {head.group(1)}"
            own[head.group(1)] = (fields, head.group(2))
    out: dict[str, set[str]] = {}
    for name in own:
        fields, base = set(own[name][0]), own[name][1]
        while base in own:
            fields |= own[base][0]
            base = own[base][1]
        out[name] = fields
    return out


def _slots(tree: ast.Module, constants: dict[str, tuple[str, ...]]) -> dict[str, set[str]]:
    """``__slots__`` of each class of a module (starred names resolved in ``constants``) and
    the attributes its methods set on ``self``, but for its properties (``Packet.da``: a
    property over two C fields needs no field of its own)."""
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        properties = {stmt.name for stmt in node.body if isinstance(stmt, ast.FunctionDef)
                      and any(isinstance(d, ast.Name) and d.id == "property"
                              for d in stmt.decorator_list)}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets):
                value = stmt.value
                names: set[str] = set()
                items = value.elts if isinstance(value, ast.Tuple | ast.List) else [value]
                for item in items:
                    if isinstance(item, ast.Constant):
                        names.add(item.value)
                    elif isinstance(item, ast.Starred) and isinstance(item.value, ast.Name):
                        names.update(constants[item.value.id])
                    elif isinstance(item, ast.Name):
                        names.update(constants[item.id])
                out.setdefault(node.name, set()).update(names)
        for sub in ast.walk(node):  # and what its methods set on self
            targets = (sub.targets if isinstance(sub, ast.Assign) else
                       [sub.target] if isinstance(sub, ast.AnnAssign | ast.AugAssign) else [])
            for t in targets:
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id == "self" and t.attr not in properties):
                    out.setdefault(node.name, set()).add(t.attr)
    return out


def test_every_attribute_of_a_compiled_class_is_declared_in_its_layout() -> None:
    """A compiled class has only the attributes its C fields declare: an attribute set in the
    .py and not declared (an annotated field, or in a hand-written .pxd) breaks the compiled build (AttributeError) while pure Python runs
    on. Checked here from the sources, so a pure-Python run catches it too."""
    trees = {name: ast.parse(_build.module_path(name).read_text(encoding="utf-8"))
             for name in _build.COMPILED}
    constants: dict[str, tuple[str, ...]] = {}
    for tree in trees.values():  # tuples of names (shared slot lists), module or class level
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Tuple)
                    and all(isinstance(e, ast.Constant) for e in node.value.elts)):
                constants[node.targets[0].id] = tuple(
                    e.value for e in node.value.elts)  # type: ignore[attr-defined]
    declared = _declared_fields()
    missing = []
    for module, tree in trees.items():
        for cls, slots in _slots(tree, constants).items():
            if cls in declared:
                undeclared = slots - declared[cls]
                missing += [f"{module}.{cls}.{slot}" for slot in sorted(undeclared)]
    assert not missing, f"attributes without a C field in the .pxd: {missing}"


def test_setup_compiles_that_set() -> None:
    """setup.py reads ``COMPILED`` from mrc/_build.py (without importing the package)."""
    text = (ROOT / "setup.py").read_text(encoding="utf-8")
    namespace: dict[str, object] = {"__file__": str(ROOT / "setup.py"), "__name__": "probe"}
    exec(compile(text.split("\nsetup(")[0], "setup.py", "exec"), namespace)  # not setup()
    assert namespace["compiled_modules"]() == list(_build.COMPILED)  # type: ignore[operator]


def test_pure_python_is_forced_by_the_environment() -> None:
    build, reason, engine, packet = _probe({_build.ENV_PURE: "1"})
    assert build == "pure" and _build.ENV_PURE in reason
    assert engine.endswith("engine.py") and packet.endswith("packet.py")


def test_the_default_is_whatever_is_installed() -> None:
    build, _, engine, _ = _probe({_build.ENV_PURE: "0"})
    installed = all(_build.extension_path(m) for m in _build.COMPILED)
    assert build == ("compiled" if installed else "pure")
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    assert engine.endswith(suffixes) == installed


def test_version_says_which_build_runs() -> None:
    out = subprocess.run([sys.executable, "-P", "-m", "mrc.cli", "--version"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, _build.ENV_PURE: "1"})
    assert out.stdout.startswith("mrc-lab ")
    assert "pure Python (MRC_PURE_PYTHON is set)" in out.stdout


def test_an_incomplete_compiled_core_runs_pure_python(tmp_path: Path) -> None:
    """A damaged install (one extension missing) must not mix compiled and pure modules:
    everything runs from source, with a warning."""
    if not all(_build.extension_path(m) for m in _build.COMPILED):
        pytest.skip("no compiled core installed")
    import shutil

    installed = Path(mrc.__file__).resolve().parent.parent  # this process's mrc, topology
    for package in ("mrc", "topology"):
        shutil.copytree(installed / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    ports = _build.extension_path("mrc.sim.ports")
    assert ports is not None
    (tmp_path / ports.relative_to(installed)).unlink()
    code = "import warnings; warnings.simplefilter('always'); " + PROBE
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         check=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path),
                              _build.ENV_PURE: ""})
    assert "incomplete compiled core (mrc.sim.ports missing)" in out.stderr
    assert '"pure"' in out.stdout and "engine.py" in out.stdout
