"""Optional compiled build of the simulator's hot modules (mypyc), with a pure-Python fallback.

The packet simulator spends its time in a handful of typed modules: the event engine, the
network and NIC driver, the packet class, the transports' per-packet code and the live
runtime's fabric (the same network on packet bytes). ``mypyc``
compiles those *unchanged* sources into C extensions; nothing else differs::

    python benchmarks/build_compiled.py build    # needs mypy (mypyc) and a C compiler
    python benchmarks/build_compiled.py status   # what gets imported, and why
    python benchmarks/build_compiled.py clean

The build lands in ``build/mrc-compiled/<python tag>/`` of the source checkout (never beside
the sources), with a manifest of the SHA-256 of every source it compiled. ``activate()``
(called by ``mrc/__init__.py`` before any of those modules is imported) puts the extensions in
front of the sources only when the manifest matches the sources on disk exactly; after any
edit it warns once and the pure-Python modules run, so a stale build can never run old
code. ``MRC_PURE_PYTHON=1`` turns it off.

All or nothing: compiled classes are laid out in C, so a compiled module must never meet a
pure-Python copy of another module of the set (hence one manifest for the whole set). What
compiled classes do not allow: Python subclasses, monkeypatching methods and new attributes
on instances (tests that do so need the pure-Python build).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: The compiled set, in dependency order.
MODULES = (
    "mrc.packet",
    "mrc.wire.layout",
    "mrc.wire.checksum",
    "mrc.wire.encoder",
    "mrc.wire.decoder",
    "mrc.wire.outer",
    "mrc.sim.engine",
    "mrc.sim.switch",
    "mrc.sim.link",
    "mrc.sim.network",
    "mrc.sim.ports",
    "mrc.sim.host",
    "mrc.sim.nic_driver",
    "mrc.live.clock",
    "mrc.live.udp",
    "mrc.live.fabric",
    "mrc.live.fabric_server",
    "mrc.live.host",
    "mrc.sim.nic",
    "mrc.sim.recorder",
    "mrc.transport.memory",
    "mrc.transport.mrc.cc",
    "mrc.transport.mrc.config",
    "mrc.transport.mrc.records",
    "mrc.transport.mrc.paths",
    "mrc.transport.mrc.reorder",
    "mrc.transport.mrc.spray",
    "mrc.transport.mrc.sender",
    "mrc.transport.mrc.receiver",
    "mrc.transport.mrc.recovery",
    "mrc.transport.mrc.qp",
    "mrc.transport.rc.config",
    "mrc.transport.rc.requester",
    "mrc.transport.rc.responder",
    "mrc.transport.rc.qp",
)
ENV_OFF = "MRC_PURE_PYTHON"
_SOURCE_ROOT = Path(__file__).resolve().parent.parent
_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
#: Set by activate(): the modules served from the compiled build (empty: pure Python).
ACTIVE: tuple[str, ...] = ()
REASON = "not activated"


def build_dir() -> Path:
    tag = f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"
    return _SOURCE_ROOT / "build" / "mrc-compiled" / tag


def source_of(module: str) -> Path:
    return _SOURCE_ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Loader(importlib.machinery.ExtensionFileLoader):
    """Loads a compiled module, then gives the classes of the set back the ``__slots__``
    attribute mypyc drops (code that walks ``Packet.__slots__`` must see the same names).

    Every module of the set is checked, not just this one: a compiled module imports the
    modules of its own build directly, without this loader (``import mrc.live.host`` first
    brings ``mrc.packet`` in that way)."""

    def __init__(self, fullname: str, path: str,
                 slots: dict[str, dict[str, list[str]]]) -> None:
        super().__init__(fullname, path)
        self.slots = slots

    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        for name, classes in self.slots.items():
            loaded = sys.modules.get(name)
            if loaded is None:
                continue
            for cls_name, names in classes.items():
                cls = getattr(loaded, cls_name, None)
                if cls is not None and "__slots__" not in vars(cls):
                    cls.__slots__ = tuple(names)


class _Finder(importlib.abc.MetaPathFinder):
    """Serves the listed module names from extension files."""

    def __init__(self, files: dict[str, Path], slots: dict[str, dict[str, list[str]]]) -> None:
        self.files = files
        self.slots = slots

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        found = self.files.get(fullname)
        if found is None:
            return None
        loader = _Loader(fullname, str(found), self.slots)
        return importlib.util.spec_from_file_location(fullname, found, loader=loader)


def declared_slots(source: Path) -> dict[str, list[str]]:
    """``{class: slot names}`` of a module, read from its source: a literal tuple, or the
    name of a literal constant of the class body or the module."""
    tree = ast.parse(source.read_text())

    def constants(body: list[ast.stmt]) -> dict[str, ast.expr]:
        return {stmt.targets[0].id: stmt.value for stmt in body
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)}

    module = constants(tree.body)
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            local = constants(node.body)
            value = local.get("__slots__")
            if isinstance(value, ast.Name):
                value = local.get(value.id, module.get(value.id))
            if value is not None:
                out[node.name] = list(ast.literal_eval(value))
    return out


def check(root: Path | None = None) -> tuple[dict[str, Path] | None, str]:
    """``(extension files by module name, reason)``; files is None when the build cannot be
    used (absent, for another Python, or stale)."""
    files, reason, _ = _check(root)
    return files, reason


def _check(root: Path | None = None
           ) -> tuple[dict[str, Path] | None, str, dict[str, dict[str, list[str]]]]:
    root = root or build_dir()
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        return None, f"no compiled build in {root} (benchmarks/build_compiled.py build)", {}
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"unreadable manifest {manifest_path}: {exc}", {}
    if manifest.get("suffix") != _SUFFIX or tuple(manifest.get("modules", ())) != MODULES:
        return None, "compiled build is for another Python or module set: rebuild it", {}
    files: dict[str, Path] = {}
    for module in MODULES:
        source = source_of(module)
        if not source.is_file() or manifest["sources"].get(module) != _digest(source):
            return None, f"compiled build is stale ({source.name} changed): rebuild it", {}
        files[module] = root.joinpath(*module.split(".")).with_suffix(_SUFFIX)
    for name in manifest.get("support", ()):
        files[name] = root / f"{name}{_SUFFIX}"
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        return None, f"compiled build incomplete: {missing[0]} missing", {}
    return files, f"compiled build {root}", manifest.get("slots", {})


def activate() -> tuple[str, ...]:
    """Serve the compiled set if a fresh build exists and none of it is imported yet."""
    global ACTIVE, REASON
    if ACTIVE:
        return ACTIVE
    if os.environ.get(ENV_OFF, "").strip() not in ("", "0"):
        REASON = f"{ENV_OFF} is set"
        return ACTIVE
    files, REASON, slots = _check()
    if files is None:
        if "stale" in REASON or "another" in REASON:
            warnings.warn(f"mrc: {REASON}; running pure Python", RuntimeWarning, stacklevel=2)
        return ACTIVE
    loaded = [m for m in MODULES if m in sys.modules]
    if loaded:
        REASON = f"{loaded[0]} was imported before activation: pure Python"
        return ACTIVE
    sys.meta_path.insert(0, _Finder(files, slots))
    ACTIVE = MODULES
    return ACTIVE


def compiled_modules() -> list[str]:
    """Modules of the set that are imported from an extension right now."""
    out = []
    for name in MODULES:
        module = sys.modules.get(name)
        if module is not None and str(getattr(module, "__file__", "")).endswith(_SUFFIX):
            out.append(name)
    return out


# ====================================================================== building
def build(opt_level: str = "3") -> Path:
    """Compile the set with mypyc into :func:`build_dir` and write its manifest."""
    import shutil

    from mypyc.build import mypycify  # optional: part of mypy
    from setuptools import Distribution

    root = build_dir()
    temp = root.parent / f"{root.name}.tmp"
    for path in (root, temp):
        shutil.rmtree(path, ignore_errors=True)
    sources = [str(source_of(m).relative_to(_SOURCE_ROOT)) for m in MODULES]
    digests = {m: _digest(source_of(m)) for m in MODULES}
    cwd = os.getcwd()
    os.chdir(_SOURCE_ROOT)
    try:
        # type errors outside the set (imports it only reads) must not stop the build
        extensions = mypycify(["--follow-imports=silent", *sources], opt_level=opt_level,
                              target_dir=str(temp / "c"), verbose=False)
        # a bare Distribution: the project's own pyproject.toml is not this build's config
        dist = Distribution({"name": "mrc-compiled", "ext_modules": extensions})
        dist.script_args = ["build_ext", "--build-lib", str(root), "--build-temp",
                            str(temp / "obj")]
        dist.parse_command_line()
        dist.run_commands()
    finally:
        os.chdir(cwd)
    support = sorted(p.name[:-len(_SUFFIX)] for p in root.glob(f"*{_SUFFIX}"))
    changed = [m for m in MODULES if digests[m] != _digest(source_of(m))]
    if changed:
        raise RuntimeError(f"{changed[0]} changed during the build: run it again")
    (root / "manifest.json").write_text(json.dumps({
        "suffix": _SUFFIX, "modules": list(MODULES), "sources": digests,
        "support": support, "slots": {m: declared_slots(source_of(m)) for m in MODULES}},
        indent=1) + "\n")
    shutil.rmtree(temp, ignore_errors=True)
    return root


def clean() -> None:
    import shutil

    shutil.rmtree(build_dir(), ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "status"
    if command == "build":
        root = build()
        print(f"compiled {len(MODULES)} modules into {root}")
    elif command == "clean":
        clean()
        print(f"removed {build_dir()}")
    elif command == "status":
        files, reason = check()
        state = "compiled" if files is not None else "pure Python"
        print(f"{state}: {reason}")
        if os.environ.get(ENV_OFF, "").strip() not in ("", "0"):
            print(f"{ENV_OFF} is set: pure Python regardless")
    else:
        print("usage: build_compiled.py [build|status|clean]", file=sys.stderr)
        return 2
    return 0
