"""The ``.pxd`` files of the compiled core, generated at build time from the ``.py`` sources.

Each C declaration is written once, in the ``.py``, beside the code it types (see
:mod:`mrc._build` for the build itself):

* a ``@cython.cclass`` class declares its C fields as class-level annotations, in the order of
  the C struct: ``window: cython.longlong``. A field is ``public`` (read and written from
  Python), ``readonly`` when annotated ``Final[...]``, and private when its C type has no
  Python value (pointers). Pure Python takes the same names as its ``__slots__``
  (``if not cython.compiled: __slots__ = tuple(__annotations__)``);
* a C function or method is a ``def`` decorated ``@cython.cfunc`` (``cdef``) or
  ``@cython.ccall`` (``cpdef``), optionally ``@cython.inline`` and
  ``@cython.exceptval(...)``, and ``@cython.annotation_typing(True)``: inside it, and only
  there, annotations are C types, so its parameters, return type and annotated locals
  (``d: cython.longlong = ...``) are declared where they are written. Everywhere else the
  build keeps ``annotation_typing`` off (``setup.py``), so plain hints (``x: float``,
  ``list[int]``) stay hints; a ``def`` that needs C locals says ``@cython.locals(...)``;
* module constants in C are ``NAME = cython.declare(cython.longlong, value)``;
* C that only the compiled build runs is a header beside the module (``engine_c.h``) with a
  hand-written ``.pxd`` of the same name declaring it (``cdef extern from``), which the
  ``.py`` cimports under ``if cython.compiled:`` (``from cython.cimports.mrc.sim.engine_c
  import ...``); its struct types may type fields (private) and locals.

Cython reads all of that from the ``.py`` itself. What it also needs is the ``.pxd``, for
other modules to ``cimport`` the classes and C functions: this module writes it from the same
source (fields, signatures, base classes, the ``cimport`` of every extension type they name)
into a build directory, never beside the source, and Cython checks each C function against
it (a mismatch is a build error, not a silent difference). Modules that still have a
hand-written ``.pxd`` beside them are left alone (the transition: both kinds cimport each
other). What the generator cannot express it refuses, with ``file:line``.

Nothing here imports Cython or the package: ``setup.py`` loads this file by path.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PxdError", "Module", "extension_types", "generate", "generate_all", "read_module"]

#: The first line of a generated file.
HEADER = "# Generated from {source} by mrc/_pxdgen.py at build time: edit the .py, not this."

#: ``cython.<name>`` C types and how a .pxd spells them (``p_``/``pp_`` prefixes add pointers).
C_TYPES = {
    "char": "char", "schar": "signed char", "uchar": "unsigned char",
    "short": "short", "ushort": "unsigned short", "int": "int", "uint": "unsigned int",
    "long": "long", "ulong": "unsigned long", "longlong": "long long",
    "ulonglong": "unsigned long long", "float": "float", "double": "double",
    "longdouble": "long double", "bint": "bint", "Py_ssize_t": "Py_ssize_t",
    "size_t": "size_t", "Py_hash_t": "Py_hash_t", "void": "void",
}
#: Python types a .pxd can name (a variable of one holds exactly that type, or None).
PY_TYPES = frozenset({"object", "list", "dict", "tuple", "set", "frozenset", "bytes",
                      "bytearray", "str"})
#: Plain hints that could mean a C type or a Python object: the declaration must say which.
AMBIGUOUS = {"float": "cython.double", "bool": "cython.bint", "complex": "cython.doublecomplex"}
#: ... and in a C function, where Cython reads the annotation itself (``int``: an exact int).
AMBIGUOUS_IN_C = {**AMBIGUOUS, "int": "cython.longlong"}
#: Decorators a C function may carry (besides ``staticmethod``).
C_DECORATORS = frozenset({"cfunc", "ccall", "inline", "exceptval", "annotation_typing",
                          "locals", "final"})


class PxdError(Exception):
    """A declaration the generator cannot express; the message starts with ``file:line:``."""


@dataclass
class Module:
    """One module's source as the generator reads it."""

    name: str  # dotted
    path: Path
    tree: ast.Module
    #: imported name -> (module, name), for resolving extension types in annotations
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)

    def error(self, node: ast.AST, message: str) -> PxdError:
        line = getattr(node, "lineno", 0)
        return PxdError(f"{self.path}:{line}: {message}")


def read_module(name: str, path: Path) -> Module:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = Module(name, path, tree)
    for node in ast.walk(tree):  # TYPE_CHECKING imports name types too
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                module.imports[alias.asname or alias.name] = (node.module, alias.name)
    return module


def _is_cython(node: ast.AST, attr: str | None = None) -> bool:
    """``cython.<attr>`` (any attribute when ``attr`` is None)."""
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "cython" and (attr is None or node.attr == attr))


def _decorator_name(node: ast.expr) -> str:
    """``cython.X`` or ``cython.X(...)`` -> "X"; ``name`` -> "name"; else ""."""
    target = node.func if isinstance(node, ast.Call) else node
    if _is_cython(target):
        return target.attr  # type: ignore[attr-defined, no-any-return]
    return target.id if isinstance(target, ast.Name) else ""


def is_cclass(node: ast.ClassDef) -> bool:
    return any(_is_cython(d, "cclass") for d in node.decorator_list)


def extension_types(modules: dict[str, Module], hand: dict[str, str]) -> dict[str, set[str]]:
    """Module name -> the extension types it defines: ``@cython.cclass`` classes of the
    generated modules, ``cdef class`` lines of the hand-written .pxd texts."""
    out = {name: {n.name for n in m.tree.body if isinstance(n, ast.ClassDef) and is_cclass(n)}
           for name, m in modules.items()}
    for name, text in hand.items():
        out[name] = set(re.findall(r"^cdef class (\w+)", text, re.MULTILINE))
    return out


class _Writer:
    """Turns one module's declarations into .pxd text."""

    def __init__(self, module: Module, types: dict[str, set[str]]) -> None:
        self.m = module
        self.local = types.get(module.name, set())
        self.types = types
        self.cimports: set[tuple[str, str]] = set()
        self.defined: set[str] = set()  # extension types declared so far (forward refs)
        self.forward: set[str] = set()
        self.ambiguous = AMBIGUOUS  # AMBIGUOUS_IN_C while reading a C function
        self.c_names: set[str] = set()  # C types cimported from a .pxd (structs, typedefs)

    # ---------------------------------------------------------------- types
    def ctype(self, node: ast.expr, where: str) -> str:
        """The .pxd spelling of an annotation that declares a C-level type."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.ctype(ast.parse(node.value, mode="eval").body, where)
        if isinstance(node, ast.Constant) and node.value is None:
            return "object"
        if _is_cython(node):
            return self._cython_type(node, node.attr)  # type: ignore[attr-defined]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            sides = [s for s in (node.left, node.right)
                     if not (isinstance(s, ast.Constant) and s.value is None)]
            if len(sides) != 1:
                raise self.m.error(node, f"{where}: a union is only `X | None`")
            inner = self.ctype(sides[0], where)
            if not self._is_object(inner):
                raise self.m.error(node, f"{where}: the C type {inner} cannot be None")
            return inner
        if isinstance(node, ast.Subscript):
            return self._subscript(node, where)
        if isinstance(node, ast.Name):
            return self._name(node, where)
        if isinstance(node, ast.Attribute):  # typing.Any, collections.abc.Callable, ...
            return "object"
        raise self.m.error(node, f"{where}: cannot express `{ast.unparse(node)}` as a C type")

    def _cython_type(self, node: ast.expr, name: str) -> str:
        stars = ""
        while name.startswith("p_"):
            stars, name = stars + "*", name[2:]
        if name.startswith("p") and name[1:2] == "p":  # pp_X
            stars, name = stars + "**", name[3:]
        if name not in C_TYPES:
            raise self.m.error(node, f"unknown C type cython.{name}")
        return C_TYPES[name] + stars

    def _subscript(self, node: ast.Subscript, where: str) -> str:
        base = node.value
        if _is_cython(base, "pointer"):
            return self.ctype(node.slice, where) + "*"
        if _is_cython(base, "const"):
            return "const " + self.ctype(node.slice, where)
        if _is_cython(base):  # a typed memoryview: cython.longlong[::1]
            item = self._cython_type(base, base.attr)  # type: ignore[attr-defined]
            return f"{item}[{ast.unparse(node.slice)}]"
        name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
        if name == "Optional":
            return self.ctype(ast.BinOp(node.slice, ast.BitOr(), ast.Constant(None)), where)
        if name in ("Final", "ClassVar"):
            raise self.m.error(node, f"{where}: {name}[...] is not a type here")
        if name in PY_TYPES:
            return name
        return "object"  # Callable[...], Iterable[...], generic aliases: Python objects

    def _name(self, node: ast.Name, where: str) -> str:
        name = node.id
        if name in self.ambiguous:
            raise self.m.error(node, f"{where}: `{name}` is ambiguous in a C declaration: "
                                     f"write {self.ambiguous[name]} or object")
        if name in PY_TYPES:
            return name
        if name in self.local:
            if name not in self.defined:
                self.forward.add(name)
            return name
        origin = self.m.imports.get(name)
        if origin and origin[0].startswith("cython.cimports."):  # a C type of a .pxd
            self.cimports.add((origin[0].removeprefix("cython.cimports."), origin[1]))
            self.c_names.add(name)
            return name
        if origin and origin[1] in self.types.get(origin[0], set()):
            self.cimports.add(origin)
            return name
        return "object"  # int, Any, a Python class: an object

    def _is_object(self, ctype: str) -> bool:
        base = ctype.split("[")[0]
        return not ctype.endswith("*") and base not in C_TYPES.values() and (
            base not in self.c_names)

    # ---------------------------------------------------------------- classes
    def cclass(self, node: ast.ClassDef) -> list[str]:
        lines = []
        if any(_is_cython(d, "final") for d in node.decorator_list):
            lines.append("@cython.final")
        bases = [self.ctype(b, f"base of {node.name}") for b in node.bases]
        # one extension type first; Python classes after it are slot-less mixins (their
        # methods are Python methods), which the .pxd does not name
        extension = [b != "object" for b in bases]
        if any(extension[1:]) or (bases and not extension[0] and not (
                isinstance(node.bases[0], ast.Name) and node.bases[0].id == "object")):
            raise self.m.error(node, f"{node.name}: a cclass derives from one extension "
                                     "type, first (Python mixins may follow it)")
        base = f"({bases[0]})" if bases and bases[0] != "object" else ""
        lines.append(f"cdef class {node.name}{base}:")
        self.defined.add(node.name)
        body = []
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign):
                body.append(self._field(node, stmt))
            elif isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets) and (
                    not isinstance(stmt.value, ast.Tuple) or stmt.value.elts):  # () is fine
                raise self.m.error(stmt, f"{node.name}: __slots__ come from the annotated "
                                         "fields (`if not cython.compiled: __slots__ = "
                                         "tuple(__annotations__)`)")
            elif isinstance(stmt, ast.FunctionDef) and self._c_kind(stmt):
                body.append(self.signature(stmt, method=True))
        lines += ["    " + line for text in body for line in text.splitlines()] or ["    pass"]
        return lines

    def _field(self, cls: ast.ClassDef, stmt: ast.AnnAssign) -> str:
        if not isinstance(stmt.target, ast.Name):
            raise self.m.error(stmt, f"{cls.name}: a field is a plain name")
        if stmt.value is not None:
            raise self.m.error(stmt, f"{cls.name}.{stmt.target.id}: a C field has no "
                                     "class-level value (set it in __init__)")
        annotation = stmt.annotation
        readonly = False
        if isinstance(annotation, ast.Subscript) and getattr(
                annotation.value, "id", getattr(annotation.value, "attr", "")) == "Final":
            readonly, annotation = True, annotation.slice
        ctype = self.ctype(annotation, f"{cls.name}.{stmt.target.id}")
        python_value = (self._is_object(ctype) or ctype.split("[")[0] in C_TYPES.values()) and (
            ctype not in self.c_names)
        visibility = ("readonly " if readonly else "public ") if python_value else ""
        if ctype.endswith("*") and readonly:
            raise self.m.error(stmt, f"{cls.name}.{stmt.target.id}: a pointer has no "
                                     "Python value to read")
        return f"cdef {visibility}{ctype} {stmt.target.id}"

    # ---------------------------------------------------------------- functions
    def _c_kind(self, fn: ast.FunctionDef) -> str:
        """"cdef", "cpdef" or "" (a Python function), checking what a C function carries."""
        names = [_decorator_name(d) for d in fn.decorator_list]
        kind = "cdef" if "cfunc" in names else "cpdef" if "ccall" in names else ""
        if not kind:
            self._check_python_function(fn)
            return ""
        if "cfunc" in names and "ccall" in names:
            raise self.m.error(fn, f"{fn.name}: cfunc or ccall, not both")
        typing_on = any(_decorator_name(d) == "annotation_typing" and isinstance(d, ast.Call)
                        and d.args and getattr(d.args[0], "value", None) is True
                        for d in fn.decorator_list)
        if not typing_on:
            raise self.m.error(fn, f"{fn.name}: a C function says "
                                   "@cython.annotation_typing(True) (its annotations are "
                                   "its C types)")
        for name, dec in zip(names, fn.decorator_list, strict=True):
            if name not in C_DECORATORS and name != "staticmethod":
                raise self.m.error(dec, f"{fn.name}: a C function cannot take @{name}")
        self._check_body_annotations(fn)
        return kind

    def _check_python_function(self, fn: ast.FunctionDef) -> None:
        """In a Python function annotations are hints: a ``cython.*`` one would be a C type
        that silently is not (the build reads no annotation there)."""
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        hinted: list[tuple[ast.AST, ast.expr]] = [
            (a, a.annotation) for a in args if a.annotation is not None]
        hinted += [(n, n.annotation) for n in ast.walk(fn) if isinstance(n, ast.AnnAssign)]
        for node, annotation in hinted:
            if any(_is_cython(sub) for sub in ast.walk(annotation)):
                raise self.m.error(node, f"{fn.name}: `{ast.unparse(annotation)}` in a Python "
                                         "function is no C type: use @cython.locals(...) or "
                                         "make it a C function")

    def _check_body_annotations(self, fn: ast.FunctionDef) -> None:
        self.ambiguous = AMBIGUOUS_IN_C
        # (an extension type a local names is cimported for Cython to know it; a C type, the
        # .py cimports itself: ``from cython.cimports...``)
        c_names = set(self.c_names)
        cimports = set(self.cimports)
        try:
            for node in ast.walk(fn):
                if isinstance(node, ast.AnnAssign):
                    self.ctype(node.annotation, f"{fn.name}: local {ast.unparse(node.target)}")
        finally:
            self.ambiguous = AMBIGUOUS
            self.cimports = cimports | {c for c in self.cimports if c[1] not in self.c_names}
            self.c_names = c_names

    def signature(self, fn: ast.FunctionDef, method: bool) -> str:
        kind = self._c_kind(fn)
        names = [_decorator_name(d) for d in fn.decorator_list]
        static = "staticmethod" in names
        args = fn.args
        if args.vararg or args.kwarg or args.kwonlyargs:
            raise self.m.error(fn, f"{fn.name}: a C function takes positional parameters only")
        params = args.posonlyargs + args.args
        defaults = [None] * (len(params) - len(args.defaults)) + list(args.defaults)
        out = []
        self.ambiguous = AMBIGUOUS_IN_C
        try:
            for i, (arg, default) in enumerate(zip(params, defaults, strict=True)):
                if i == 0 and method and not static:
                    out.append(arg.arg)
                    continue
                ctype = ("object" if arg.annotation is None else
                         self.ctype(arg.annotation, f"{fn.name}({arg.arg})"))
                out.append(f"{ctype} {arg.arg}" + ("=*" if default is not None else ""))
            ret = ("object" if fn.returns is None else
                   self.ctype(fn.returns, f"{fn.name} returns"))
        finally:
            self.ambiguous = AMBIGUOUS
        head = kind + (" inline" if "inline" in names else "")
        text = f"{head} {ret} {fn.name}({', '.join(out)}){self._exception(fn, ret)}"
        final = "@cython.final\n" if "final" in names else ""
        return final + ("@staticmethod\n" if static else "") + text

    def _exception(self, fn: ast.FunctionDef, ret: str) -> str:
        spec = next((d for d in fn.decorator_list if _decorator_name(d) == "exceptval"), None)
        if self._is_object(ret):
            if spec is not None:
                raise self.m.error(spec, f"{fn.name}: a function returning an object "
                                         "raises through its return value")
            return ""
        if spec is None:
            return " except *"
        assert isinstance(spec, ast.Call)
        value = ast.unparse(spec.args[0]) if spec.args else None
        check = next((k.value for k in spec.keywords if k.arg == "check"), ast.Constant(True))
        if not isinstance(check, ast.Constant) or len(spec.args) > 1:
            raise self.m.error(spec, f"{fn.name}: exceptval(value, check=True|False)")
        if value is None:
            return " except *" if check.value else " noexcept"
        return f" except? {value}" if check.value else f" except {value}"


def generate(module: Module, types: dict[str, set[str]]) -> str:
    """The .pxd text of one module (deterministic: the source's order)."""
    writer = _Writer(module, types)
    body: list[str] = []
    for node in module.tree.body:
        if isinstance(node, ast.ClassDef) and is_cclass(node):
            body += ["", *writer.cclass(node)]
        elif isinstance(node, ast.FunctionDef) and writer._c_kind(node):
            body.append(writer.signature(node, method=False))
        elif isinstance(node, ast.ClassDef):  # a Python class: hints only in its methods
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and writer._c_kind(sub):
                    raise module.error(sub, f"{node.name}.{sub.name}: C methods need a cclass")
    head = [HEADER.format(source=module.path.name), "cimport cython"]
    head += [f"from {mod} cimport {name}" for mod, name in sorted(writer.cimports)]
    head += [f"cdef class {name}" for name in sorted(writer.forward)]
    return "\n".join(head + body) + "\n"


def generate_all(root: Path, names: list[str], out: Path) -> list[Path]:
    """Write the .pxd of every module of ``names`` (dotted, under ``root``) that has no
    hand-written one beside its source, under ``out`` (with the ``__init__.pxd`` markers
    Cython needs to see packages there). Files whose text is unchanged are not rewritten (the
    build compares times). Returns the files written or kept."""
    hand: dict[str, str] = {}
    modules: dict[str, Module] = {}
    for name in sorted(names):
        source = root.joinpath(*name.split(".")).with_suffix(".py")
        if source.with_suffix(".pxd").is_file():
            hand[name] = source.with_suffix(".pxd").read_text(encoding="utf-8")
        else:
            modules[name] = read_module(name, source)
    types = extension_types(modules, hand)
    written = []
    for name, module in modules.items():
        target = out.joinpath(*name.split(".")).with_suffix(".pxd")
        for package in target.relative_to(out).parents:
            if str(package) != ".":
                marker = out / package / "__init__.pxd"
                marker.parent.mkdir(parents=True, exist_ok=True)
                if not marker.exists():
                    marker.write_text("", encoding="utf-8")
        text = generate(module, types)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str]) -> int:
    """``python mrc/_pxdgen.py mrc.packet ...``: print the .pxd of those modules."""
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from mrc._build import COMPILED

    names = argv or [n for n in COMPILED if not root.joinpath(*n.split(".")).with_suffix(
        ".pxd").is_file()]
    hand = {n: root.joinpath(*n.split(".")).with_suffix(".pxd").read_text(encoding="utf-8")
            for n in COMPILED if root.joinpath(*n.split(".")).with_suffix(".pxd").is_file()}
    modules = {n: read_module(n, root.joinpath(*n.split(".")).with_suffix(".py"))
               for n in COMPILED if n not in hand}
    types = extension_types(modules, hand)
    try:
        for name in names:
            print(generate(modules[name], types))
    except PxdError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
