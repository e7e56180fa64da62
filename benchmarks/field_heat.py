"""Which fields of each compiled class a run touches, per delivered packet, in C struct order.

Why this exists
    At 1024 hosts nearly every object a packet touches has gone cold since its last visit
    (``cache_profile.py`` says why), so every cache line of it that the packet's path reads
    costs a miss. The fields that path reads belong together at the start of the struct
    (the order of the ``.pxd``), settings and rare counters after. Callgrind says which
    functions miss, not which fields; valgrind's DHAT counts the accesses to every byte of
    every heap block of up to 1 KB, by allocation site. With pymalloc off
    (``PYTHONMALLOC=malloc``) every object is a block of its own, and the Cython type's
    constructor names the site, so the counts land on the fields of one class.

Usage (Linux, valgrind on PATH, the compiled build made in place: the field layout is read
from the C that Cython generated under ``build/``)::

    python setup.py build_ext --inplace
    python benchmarks/field_heat.py run perm128                      # about 4 minutes
    python benchmarks/field_heat.py report heat-perm128.json --packets 62592 \\
        --class PfcPort Sender

Per field: its offset in the object, the cache line it falls in counted from the start of
the block (the cycle collector's 16-byte header comes first for a tracked class; where a
block starts within a line depends on the allocator), and the bytes read or written per
delivered packet over the whole run, every object of the class together (setup included;
a field read once per packet shows about 8 per object visited). Accesses to the object
header (reference count, type) are counted under ``HEAD``. DHAT stops counting a byte at
65,535 accesses (all blocks of a site together), so the busiest fields of a long run show
as at least their cap (``+``): the report tells the fields a packet's path never or rarely
reaches from the rest, not how the busy ones rank.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_STRUCT = re.compile(r"^struct __pyx_obj_(\w+) \{\n(.*?)^\};", re.S | re.M)
_BASE = re.compile(r"struct __pyx_obj_(\w+) __pyx_base$")
_MEMBER = re.compile(r"(.*?)(\w+)(?:\[(\d+)\])?$")
_TP_NEW = re.compile(r"__pyx_tp_new(?:_vectorcall)?_(\w+)")
#: C sizes of the member types Cython declares (anything with a ``*`` is a pointer)
_C_SIZES = {"PY_LONG_LONG": 8, "unsigned PY_LONG_LONG": 8, "int": 4, "unsigned int": 4,
            "double": 8, "float": 4, "long": 8, "unsigned long": 8, "Py_ssize_t": 8,
            "size_t": 8, "char": 1, "unsigned char": 1, "short": 2}
_GC_HEADER = 16  # PyGC_Head before a tracked object (CPython 3.8+ on 64-bit)
_CAP = 0xFFFF  # DHAT's largest count per byte


@dataclass(frozen=True)
class Member:
    offset: int
    size: int
    name: str


def python_name(mangled: str) -> str:
    """``3mrc_3sim_9pfc_ports_PfcPort`` -> ``mrc.sim.pfc_ports.PfcPort`` (Cython's
    length-prefixed module path, then the class)."""
    parts = []
    rest = mangled
    while (m := re.match(r"(\d+)", rest)) is not None:
        n = int(m.group(1))
        start = len(m.group(1))
        parts.append(rest[start:start + n])
        rest = rest[start + n + 1:]
    return ".".join([*parts, rest])


def c_structs(build_dir: Path) -> dict[str, str]:
    """Each compiled class's C struct body (by mangled name) from Cython's generated C."""
    out: dict[str, str] = {}
    for c_file in sorted(build_dir.glob("temp*/cython/**/*.c")):
        for m in _STRUCT.finditer(c_file.read_text(errors="replace")):
            out.setdefault(m.group(1), m.group(2))
    return out


def layout(structs: dict[str, str], name: str) -> tuple[list[Member], int, list[str]]:
    """The members of class ``name`` at their C offsets (the bases' first), the struct's
    size, and the chain of classes from ``name`` up to its root."""
    members: list[Member] = []
    chain = [name]

    def place(struct: str, offset: int) -> int:
        for raw in structs[struct].strip().splitlines():
            line = raw.strip().rstrip(";")
            if line == "PyObject_HEAD":
                members.append(Member(offset, 16, "HEAD"))
                offset += 16
                continue
            base = _BASE.match(line)
            if base is not None:
                chain.append(base.group(1))
                offset = place(base.group(1), offset)
                continue
            m = _MEMBER.match(line)
            if m is None:
                continue
            c_type, member, count = m.group(1).strip(), m.group(2), int(m.group(3) or 1)
            size = 8 if "*" in c_type else _C_SIZES.get(c_type, 8)
            offset = (offset + size - 1) // size * size
            members.append(Member(offset, size * count, member))
            offset += size * count
        return offset

    end = place(name, 0)
    return members, (end + 7) // 8 * 8, chain


def decode(acc: list[int]) -> list[int]:
    """DHAT's per-byte access counts: a negative ``-n`` repeats the next count n times."""
    out: list[int] = []
    i = 0
    while i < len(acc):
        if acc[i] < 0:
            out.extend([acc[i + 1]] * -acc[i])
            i += 2
        else:
            out.append(acc[i])
            i += 1
    return out


def allocating_class(frames: list[str]) -> str | None:
    """The class whose constructor made a block: the outermost of the chain of Cython
    ``tp_new`` calls (a subclass's constructor calls its base's, which allocates)."""
    found = None
    for frame in frames:
        m = _TP_NEW.search(frame)
        if m is not None:
            found = m.group(1)
        elif found is not None and "CallTpnewAsVectorcall" not in frame:
            break
    return found


@dataclass
class Heat:
    """One class's blocks of one size: bytes read and written (exact), the access count of
    every byte (summed over the allocation sites), and which bytes hit the cap at a site."""

    moved: int
    counts: list[int]
    capped: list[bool]


def heat(dhat: dict) -> dict[tuple[str, int], Heat]:
    """Per (allocating class, block size): what its blocks saw."""
    names = dhat["ftbl"]
    out: dict[tuple[str, int], Heat] = {}
    for site in dhat["pps"]:
        if "acc" not in site:
            continue  # (a block over 1 KB: DHAT keeps no histogram)
        cls = allocating_class([names[i] for i in site["fs"]])
        if cls is None:
            continue
        counts = decode(site["acc"])
        size = len(counts)
        seen = out.setdefault((cls, size), Heat(0, [0] * size, [False] * size))
        seen.moved += site["rb"] + site["wb"]
        for i, n in enumerate(counts):
            seen.counts[i] += n
            seen.capped[i] = seen.capped[i] or n >= _CAP
    return out


def report(dhat: dict, structs: dict[str, str], packets: int,
           classes: list[str] | None = None, top: int = 12) -> str:
    """The fields of the most accessed classes (or of ``classes``, by Python name or its
    last part), one line each."""
    counts = heat(dhat)
    by_class: dict[str, tuple[int, Heat]] = {}
    for (cls, size), seen in counts.items():
        if cls not in structs:
            continue
        members, struct_size, _ = layout(structs, cls)
        gc = size - struct_size
        if gc not in (0, _GC_HEADER):
            continue  # (not this struct: a block of another size at the same site)
        by_class[cls] = (gc, seen)
    picked = sorted(by_class, key=lambda c: -by_class[c][1].moved)
    if classes:
        wanted = set(classes)
        picked = [c for c in picked
                  if python_name(c) in wanted or python_name(c).rsplit(".", 1)[-1] in wanted]
    else:
        picked = picked[:top]
    lines = []
    for cls in picked:
        gc, seen = by_class[cls]
        members, size, _ = layout(structs, cls)
        lines.append(f"{python_name(cls)}: {size} bytes + {gc} of collector header, "
                     f"{seen.moved / packets:.0f} bytes read or written per packet")
        for mem in members:
            lo, hi = gc + mem.offset, gc + mem.offset + mem.size
            touched = sum(seen.counts[lo:hi]) / packets
            capped = "+" if any(seen.capped[lo:hi]) else " "
            shown = f"{touched:8.2f}{capped}" if touched >= 0.005 else "       - "
            lines.append(f"  {mem.offset:5d}  line {lo // 64}  {shown}  {mem.name}")
    return "\n".join(lines)


def run(case: str, out: Path) -> int:
    from cache_profile import refusal  # (benchmarks/, beside this script)

    why = refusal("field_heat")
    if why:
        print(why, file=sys.stderr)
        return 2
    if out.exists():
        print(f"field_heat: {out} exists; not overwritten", file=sys.stderr)
        return 2
    cmd = ["valgrind", "--tool=dhat", f"--dhat-out-file={out}", sys.executable, "-P", "-m",
           "mrc.bench", "--child", case]
    done = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONMALLOC": "malloc",
                               "MRC_HUGE_PAGES": "0"})
    if done.returncode != 0 or not out.exists():
        print(done.stderr[-2000:], file=sys.stderr)
        return 1
    packets = json.loads(done.stdout.strip().splitlines()[-1])["packets"]
    print(f"{case}: {packets} delivered packets ({out})")
    print(report(json.loads(out.read_text()), c_structs(ROOT / "build"), packets))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="count a permutation's accesses under DHAT, then report")
    p_run.add_argument("case", choices=("perm128", "perm1024"))
    p_run.add_argument("--out", type=Path, default=None,
                       help="DHAT file (default: heat-CASE.json here; never overwritten)")
    p_rep = sub.add_parser("report", help="report an existing DHAT file")
    p_rep.add_argument("file", type=Path)
    p_rep.add_argument("--packets", type=int, required=True,
                       help="packets delivered by the run (run prints it)")
    p_rep.add_argument("--class", dest="classes", nargs="*", default=None,
                       help="classes to show (default: the most accessed)")
    p_rep.add_argument("--build", type=Path, default=ROOT / "build",
                       help="where setup.py build_ext left Cython's C")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.case, args.out or Path(f"heat-{args.case}.json"))
    structs = c_structs(args.build)
    if not structs:
        print(f"field_heat: no Cython C under {args.build}; build in place first",
              file=sys.stderr)
        return 2
    print(report(json.loads(args.file.read_text()), structs, args.packets, args.classes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
