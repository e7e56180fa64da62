"""Transparent huge pages under CPython's small-object allocator (compiled build, Linux).

Why: a simulation is a heap of small Python objects (ports, packets, queue records, QPs:
about 280 MB at 1024 hosts), which CPython's small-object allocator (pymalloc) keeps in 1 MiB
arenas, each its own ``mmap`` of 4 KiB pages. At 1024 hosts the compiled simulator runs the
same instructions per packet as at 128 but takes about twice as long, and the difference is
memory: cache and TLB misses over that heap. Backing the arenas with 2 MiB pages cuts the TLB
misses, and costs setup time where fresh huge pages are slow to clear. Measured on a 2-core
Firecracker VM, alternating runs with and without on a quiet machine: perm128 4.35-4.95 us
per packet against 4.78-4.99 and perm1024 10.1-10.8 against 10.8-11.6 (5-6% less), but
perm1024's setup 1.30-1.45 s against 0.97-1.04 (the kernel clearing fresh 2 MiB pages), and
the 8-plane x 1024-host permutation's loop unchanged (6.31-6.32 s against 6.32-6.46) with
0.55 s more setup. On that VM the whole process is no faster at 1024 hosts, so it is opt-in:
``MRC_HUGE_PAGES=1``. (An earlier series under load from other jobs measured 11-16% less at
1024 hosts.) Peak RSS grows by 1.5 MB.

How: :func:`use_huge_page_arenas` reserves one large region of address space (64 GiB, or
less if that is refused; ``MAP_NORESERVE``: nothing is committed until touched), aligned to
the huge page size and ``madvise(MADV_HUGEPAGE)``-d, and installs itself as pymalloc's arena
allocator (``PyObject_SetArenaAllocator``): new arenas are carved from the region one after
another. The C is in ``arena.pxd``. Arenas made before that call, and any made once the
region is used up, come from (and go back to) the previous allocator. A freed arena of the
region is kept on a free list for the next one and never returned to the system, as glibc's
``malloc`` keeps its heap: a process's resident memory stays at its peak.

SimStack calls it before it builds a fabric (where the objects are made); the live runtime
does not. Off (the call returns False and nothing changes) unless ``MRC_HUGE_PAGES=1`` is
set, and even then in pure Python, off Linux, when transparent huge pages are ``never`` or
absent, when pymalloc is not in use (``PYTHONMALLOC=malloc``), and when the reservation or
the ``madvise`` fails. Results do not depend on it: only where objects live.
"""

from __future__ import annotations

import os
import re
import sys

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

__all__ = ["ENV", "huge_page_arenas_active", "region", "status", "use_huge_page_arenas"]

#: Set to "1" to put pymalloc's arenas on huge pages (opt-in: see the module docstring).
ENV = "MRC_HUGE_PAGES"
_THP = "/sys/kernel/mm/transparent_hugepage"
#: Sizes of address space tried for the region, largest first (a strict overcommit policy
#: may refuse the largest; the region is reserved once and never grows).
_RESERVE = (64 << 30, 16 << 30, 4 << 30, 1 << 30)

if not cython.compiled:  # (the compiled build has them from arena.pxd, in C)
    def _install(size: int, align: int) -> int:
        """Pure Python has no arena allocator to replace."""
        return -1

    def _stat(which: int) -> int:
        return 0

#: Why it is off, or "" once in effect; None until :func:`use_huge_page_arenas` ran.
_outcome: str | None = None


def _refusal() -> str:
    """Why this process should not use huge-page arenas ("" when it may)."""
    if not cython.compiled:
        return "pure Python"
    if os.environ.get(ENV, "").strip() != "1":
        return f"not asked for: {ENV}=1"
    if not sys.platform.startswith("linux"):
        return "not Linux"
    if os.environ.get("PYTHONMALLOC", "").startswith("malloc"):
        return "pymalloc is off (PYTHONMALLOC)"
    mode = _thp_mode()
    if mode in ("", "never"):
        return "transparent huge pages are " + (mode or "not available")
    return ""


def _thp_mode() -> str:
    """The kernel's transparent huge page mode (always, madvise, never), "" if it has none."""
    try:
        with open(f"{_THP}/enabled", encoding="ascii") as fh:
            found = re.search(r"\[(\w+)\]", fh.read())
    except OSError:
        return ""
    return found.group(1) if found else ""


def _huge_page_size() -> int:
    try:
        with open(f"{_THP}/hpage_pmd_size", encoding="ascii") as fh:
            size = int(fh.read())
    except (OSError, ValueError):
        return 2 << 20
    return size if size > 0 and size & (size - 1) == 0 else 2 << 20


def use_huge_page_arenas() -> bool:
    """Make pymalloc take its new arenas from a huge-page region; whether that is in effect.
    Idempotent: a second call changes nothing and answers the same."""
    global _outcome
    if _outcome is None:
        _outcome = _refusal()
        if not _outcome:
            align = _huge_page_size()
            code = -1
            for size in _RESERVE:
                code = _install(size, align)
                if code != -1:  # installed (0), or madvise refused (-2): no smaller try
                    break
            _outcome = "" if code == 0 else ("madvise refused" if code == -2 else
                                             "no address space for the region")
    return not _outcome


def huge_page_arenas_active() -> bool:
    """Whether pymalloc's new arenas come from the huge-page region in this process."""
    return _outcome == ""


def status() -> str:
    """For ``mrc._build.describe``: "on", "on when a simulation starts", or "off (why)"."""
    if _outcome is not None:
        return "on" if not _outcome else f"off ({_outcome})"
    why = _refusal()
    return f"off ({why})" if why else "on when a simulation starts"


def region() -> dict[str, int]:
    """The region's state (all 0 when not in effect): ``start`` and ``size`` (bytes),
    ``used`` (bytes handed out so far, freed arenas included), ``free_arenas`` (freed, kept
    for reuse) and ``fallbacks`` (arenas the previous allocator served: the region ran out)."""
    return {name: int(_stat(i)) for i, name in
            enumerate(("start", "size", "used", "free_arenas", "fallbacks"))}
