"""Transparent huge pages under CPython's small-object allocator (compiled build, Linux).

Why: a simulation is a heap of small Python objects (ports, packets, queue records, QPs:
about 200 MB at 1024 hosts), which CPython's small-object allocator (pymalloc) keeps in 1 MiB
arenas, each its own ``mmap`` of 4 KiB pages. At 1024 hosts the compiled simulator runs the
same instructions per packet as at 128 but takes about twice as long, and the difference is
memory: cache and TLB misses over that heap. Backing the arenas with 2 MiB pages cuts the TLB
misses. A fresh huge page costs its clearing on first touch, though (on the development VM
about 2 ms each, the host backing the guest's memory as it goes), and that used to eat the
gain: perm1024's setup took 0.15-0.25 s longer, about what its loop saved, so huge pages were
opt-in. A helper thread now clears them ahead of use on another core (``arena_c.h``), and
they are on by default. Measured on that VM, alternating runs with ``MRC_HUGE_PAGES=0``:
perm128's event loop 2.59-2.73 us per packet against 2.89-3.03 (5 runs each), perm1024's
6.02-6.22 against 6.75-6.97 with setup 0.35-0.36 s against 0.38-0.39 (whole process 3.46-3.56
s against 3.85-3.97; 3 runs), the 8-plane x 1024-host permutation 3.78-3.87 s against
4.26-4.30 for MRC and 5.15-5.26 against 5.40-5.60 for RC (whole process, 2 runs).

How: :func:`use_huge_page_arenas` reserves one large region of address space (64 GiB, or
less if that is refused; ``MAP_NORESERVE``: nothing is committed until touched), aligned to
the huge page size and ``madvise(MADV_HUGEPAGE)``-d, and installs itself as pymalloc's arena
allocator (``PyObject_SetArenaAllocator``): new arenas are carved from the region one after
another. The C is in ``arena_c.h``. Arenas made before that call, and any made once the
region is used up, come from (and go back to) the previous allocator. A freed arena of the
region is kept on a free list for the next one and never returned to the system, as glibc's
``malloc`` keeps its heap: a process's resident memory stays at its peak. The populate thread
keeps the region faulted in 32 MiB past the arenas handed out (so peak RSS is up to 34 MB
higher) and sleeps in between; a child made by ``fork`` has no such thread and faults its
pages in itself.

SimStack calls it before it builds a fabric (where the objects are made); the live runtime
does not. ``MRC_HUGE_PAGES=0`` turns it off. It is off too (the call returns False and
nothing changes) in pure Python, off Linux, when transparent huge pages are ``never`` or
absent, when pymalloc is not in use (``PYTHONMALLOC=malloc``), when the reservation or the
``madvise`` fails, and, unless ``MRC_HUGE_PAGES=1`` asks for it anyway, where the thread
cannot fault pages in (neither x86 nor a kernel with ``MADV_POPULATE_WRITE``). Results do not
depend on it: only where objects live.
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

#: Unset, pymalloc's arenas go on huge pages where a helper thread can prefault them; "1" puts
#: them there even where it cannot; any other value ("0") keeps them off (see the docstring).
ENV = "MRC_HUGE_PAGES"
_THP = "/sys/kernel/mm/transparent_hugepage"
#: Sizes of address space tried for the region, largest first (a strict overcommit policy
#: may refuse the largest; the region is reserved once and never grows).
_RESERVE = (64 << 30, 16 << 30, 4 << 30, 1 << 30)

if cython.compiled:  # the C of the allocator (arena_c.h)
    from cython.cimports.mrc.sim.arena_c import _can_prefault, _install, _stat
else:
    def _install(size: int, align: int) -> int:
        """Pure Python has no arena allocator to replace."""
        return -1

    def _stat(which: int) -> int:
        return 0

    def _can_prefault() -> int:
        return 0

#: Why it is off, or "" once in effect; None until :func:`use_huge_page_arenas` ran.
_outcome: str | None = None


def _refusal() -> str:
    """Why this process should not use huge-page arenas ("" when it may)."""
    if not cython.compiled:
        return "pure Python"
    asked = os.environ.get(ENV, "").strip()  # "" (the default), "1" (on) or anything (off)
    if asked not in ("", "1"):
        return f"{ENV}={asked}"
    if not sys.platform.startswith("linux"):
        return "not Linux"
    if os.environ.get("PYTHONMALLOC", "").startswith("malloc"):
        return "pymalloc is off (PYTHONMALLOC)"
    mode = _thp_mode()
    if mode in ("", "never"):
        return "transparent huge pages are " + (mode or "not available")
    if not asked and not _can_prefault():
        # without the populate thread the first touch of each huge page stalls the run
        return f"the kernel cannot prefault (MADV_POPULATE_WRITE); {ENV}=1 forces them"
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
    for reuse), ``fallbacks`` (arenas the previous allocator served: the region ran out),
    ``prefaulted`` (bytes the populate thread made resident ahead of use) and ``prefaulting``
    (1 while that thread runs)."""
    return {name: int(_stat(i)) for i, name in
            enumerate(("start", "size", "used", "free_arenas", "fallbacks", "prefaulted",
                       "prefaulting"))}
