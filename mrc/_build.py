"""Which build of the simulator's core runs: the compiled one, or pure Python.

The per-packet modules listed in :data:`COMPILED` are ordinary ``.py`` files. ``pip install .``
also compiles each of them, from that same file, into a C extension of the same name (Cython
in pure-Python mode: the C types are annotations and decorators in the ``.py``, and the
``.pxd`` declarations other modules cimport are generated from them, :mod:`mrc._pxdgen`;
``setup.py`` does the build). Python imports an extension module in
preference to the ``.py`` of the same name, so an installed compiled core simply is what
``import mrc.sim.engine`` finds; there is no import hook and nothing is looked up outside the
installed package. Without a C compiler (or with a build that failed) the install carries no
extension and everything is the pure-Python source, which gives the same results, slower.

``MRC_PURE_PYTHON=1`` forces pure Python (debugging, profiling the source, comparing the
builds). It works by telling Python's import system to see only ``.py`` files in the
directories of the compiled set: :func:`select` registers a source-only
``importlib.machinery.FileFinder`` for each of those directories in
``sys.path_importer_cache`` (the cache the standard path finder consults), before any of
those modules is imported; ``mrc/__init__.py`` calls it first thing. The same happens, with a
warning, when only part of the set is compiled (a damaged install): the set is all or
nothing, because compiled modules exchange C-typed objects with each other.

Nothing here is on a hot path; it runs once per process.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import warnings
from pathlib import Path

#: The modules ``setup.py`` compiles (each ``mrc/…/name.py`` becomes ``mrc/…/name.<abi>.so``).
#: Each declares its C types in its source (or, until converted, in a ``.pxd`` beside it).
COMPILED: tuple[str, ...] = (
    "mrc.packet",
    "mrc.sim.engine",
    "mrc.sim.arena",
    "mrc.sim.fifo",
    "mrc.sim.ports",
    "mrc.sim.host",
    "mrc.sim.pfc",
    "mrc.sim.pfc_ports",
    "mrc.sim.pfc_nic",
    "mrc.sim.switch",
    "mrc.sim.nic",
    "mrc.nic.runtime",
    "mrc.nic.context",
    "mrc.nic.driver",
    "mrc.stack.recorder",
    "mrc.transport.memory",
    "mrc.transport.qp_base",
    "mrc.transport.mrc.cc",
    "mrc.transport.mrc.config",
    "mrc.transport.mrc.records",
    "mrc.transport.mrc.evmap",
    "mrc.transport.mrc.reorder",
    "mrc.transport.mrc.spray",
    "mrc.transport.mrc.paths",
    "mrc.transport.mrc.sender",
    "mrc.transport.mrc.receiver",
    "mrc.transport.mrc.watchdog",
    "mrc.transport.mrc.loss",
    "mrc.transport.mrc.recovery",
    "mrc.transport.mrc.qp",
    "mrc.transport.rc.requester",
    "mrc.transport.rc.responder",
    "mrc.transport.rc.qp",
    "mrc.wire.checksum",
    "mrc.wire.encoder",
    "mrc.wire.decoder",
    "mrc.live.fabric",
)
#: Set to anything but "" or "0" to force pure Python.
ENV_PURE = "MRC_PURE_PYTHON"

_ROOT = Path(__file__).resolve().parent.parent  # the directory that holds the mrc package
#: Filled by :func:`select`: "compiled" or "pure", and why.
BUILD = "pure"
REASON = "not selected yet"


def module_path(name: str) -> Path:
    """The ``.py`` source of a module of the set."""
    return _ROOT.joinpath(*name.split(".")).with_suffix(".py")


def extension_path(name: str) -> Path | None:
    """The compiled extension installed beside a module's source, if there is one."""
    source = module_path(name)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


def pure_forced() -> bool:
    return os.environ.get(ENV_PURE, "").strip() not in ("", "0")


def _see_sources_only() -> None:
    """Make the standard path finder see only ``.py`` (and ``.pyc``) files in the set's
    directories, so every module there imports from its source."""
    loaders = [(importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES),
               (importlib.machinery.SourcelessFileLoader,
                importlib.machinery.BYTECODE_SUFFIXES)]
    for folder in sorted({str(module_path(name).parent) for name in COMPILED}):
        sys.path_importer_cache[folder] = importlib.machinery.FileFinder(folder, *loaders)


def select() -> str:
    """Decide the build for this process (before any module of the set is imported)."""
    global BUILD, REASON
    loaded = [name for name in COMPILED if name in sys.modules]
    if loaded:  # called again (or too late): report what was chosen
        return BUILD
    present = [name for name in COMPILED if extension_path(name) is not None]
    if pure_forced():
        BUILD, REASON = "pure", f"{ENV_PURE} is set"
        if present:
            _see_sources_only()
    elif not present:
        BUILD, REASON = "pure", "no compiled core installed"
    elif len(present) < len(COMPILED):
        missing = next(name for name in COMPILED if name not in present)
        BUILD, REASON = "pure", f"incomplete compiled core ({missing} missing)"
        warnings.warn(f"mrc: {REASON}: running pure Python; reinstall to rebuild it",
                      RuntimeWarning, stacklevel=2)
        _see_sources_only()
    else:
        BUILD, REASON = "compiled", f"{len(COMPILED)} modules compiled with Cython"
    return BUILD


def compiled_modules() -> list[str]:
    """The modules of the set that are running compiled (imports them)."""
    import importlib

    out = []
    for name in COMPILED:
        module = importlib.import_module(name)
        origin = str(getattr(module, "__file__", "") or "")
        if origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            out.append(name)
    return out


def describe() -> str:
    """One line for ``--version``, benchmark output and logs: which build runs, and why (and,
    compiled, whether simulations get huge-page arenas: :mod:`mrc.sim.arena`)."""
    if BUILD == "compiled":
        from mrc.sim import arena

        return f"compiled core ({REASON}), huge-page arenas {arena.status()}"
    return f"pure Python ({REASON})"
