"""Where the compiled core's cache misses go: a permutation window under callgrind's cache
model, reported per delivered packet by Python function and by source line.

Why this exists
    From 128 to 1024 hosts the instructions per delivered packet do not change (about
    14,000), yet the wall time per packet more than doubles: every host is active, so between
    two visits to one QP, port or EV the run touches the state of all the others, and at 1024
    hosts that state is long gone from L2 when it is needed again. The cost is cache misses
    (and page walks), which a time profile spreads over every function. Callgrind simulates
    the caches deterministically, so two builds can be compared miss for miss, and this
    script says which Python lines the misses come from. Refcount updates that Cython inlines
    count for the function that made them (the first touch of a cold object is often its
    ``Py_INCREF``).

Usage (Linux, valgrind on PATH, the compiled build; a window of 1 us at 1024 hosts takes
about five minutes under valgrind)::

    MRC_DEBUG_INFO=1 python setup.py build_ext --inplace     # line tables, same code
    python benchmarks/cache_profile.py run perm1024 --from-us 40 --to-us 41
    python benchmarks/cache_profile.py report cache-perm1024.out --packets 2891

``run`` builds the permutation of ``mrc/bench.py`` (MRC, seed 1), runs it uncollected to
``--from-us``, collects from there to ``--to-us`` (callgrind is switched on only inside
``Simulator.run_until``), then prints the report. The model is a 48 KB L1 and, as the last
level, the L2 (``--l2-kb``, 2048 by default: the 2 MB per core of the Xeon the benchmarks
ran on); misses of the last level are the ones reported. Without line tables the report
is by function only.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

#: The C function of ``Simulator.run_until`` in the compiled engine: collection is on only
#: while it runs, so building the fabric and the warm-up are not measured.
TOGGLE = "__pyx_f_3mrc_3sim_6engine_9Simulator_run_until"
MISSES = ("DLmr", "DLmw")  # last-level data misses: reads, writes

_CYTHON_SOURCE = re.compile(r'\s*/\* "([^"]+\.pyx?)":(\d+)')
_COMPRESSED = re.compile(r"\((\d+)\)(?: (.*))?")


@dataclass
class Profile:
    """Self costs from one callgrind file: per function and per (file, line)."""

    events: list[str]
    by_function: dict[str, list[int]] = field(default_factory=dict)
    #: (file, line, function): the function only for code inlined from another file (a
    #: header's ``Py_INCREF`` says little until it says whose)
    by_line: dict[tuple[str, int, str], list[int]] = field(default_factory=dict)

    def total(self, event: str) -> int:
        i = self.events.index(event)
        return sum(costs[i] for costs in self.by_function.values())


def parse_callgrind(path: str | Path) -> Profile:
    """Read a callgrind output file (``--dump-line=yes``; positions are line numbers).

    Only self costs are kept: a ``calls=`` line is followed by the inclusive cost of that
    call, which is skipped. Names may be compressed (``(id) name`` once, ``(id)`` after)."""
    names: dict[tuple[str, str], str] = {}

    def name(kind: str, text: str) -> str:
        m = _COMPRESSED.match(text)
        if m is None:
            return text
        ident, given = m.groups()
        if given is not None:
            names[kind, ident] = given
        return names.get((kind, ident), f"({ident})")

    profile: Profile | None = None
    function = file = inlined = ""
    last = 0
    skip = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.startswith("positions:") and line.split()[1:] != ["line"]:
                raise ValueError(f"{path}: positions {line.split()[1:]}: need --dump-line only")
            if line.startswith("events:"):
                profile = Profile(line.split()[1:])
            elif line.startswith("fl="):
                file, inlined = name("file", line[3:]), ""
            elif line.startswith(("fi=", "fe=")):
                inlined = name("file", line[3:])
            elif line.startswith("fn="):
                function, inlined = name("fn", line[3:]), ""
            elif line.startswith(("cfl=", "cfi=")):
                name("file", line[4:])
            elif line.startswith("cfn="):
                name("fn", line[4:])
            elif line.startswith("calls="):
                skip = True
            elif line and (line[0].isdigit() or line[0] in "+-*") and profile is not None:
                head, *values = line.split()
                if head == "*":
                    number = last
                elif head[0] in "+-":
                    number = last + int(head)
                else:
                    number = int(head)
                last = number
                if skip:
                    skip = False
                    continue
                n = len(profile.events)
                row = profile.by_function.setdefault(function, [0] * n)
                inside = inlined and inlined != file  # (``fe=`` back to the function's file)
                where = (inlined, number, function) if inside else (file, number, "")
                at = profile.by_line.setdefault(where, [0] * n)
                for i, v in enumerate(values):
                    row[i] += int(v)
                    at[i] += int(v)
    if profile is None:
        raise ValueError(f"{path}: no 'events:' line: not a callgrind output file")
    return profile


def python_name(symbol: str) -> str:
    """``__pyx_f_3mrc_3sim_5ports_4Fifo_popleft`` -> ``mrc.sim.ports.Fifo.popleft``: the C
    function of a ``cdef``/``cpdef`` method or function (Cython prefixes each module and
    class name with its length), and ``__pyx_tp_dealloc_3mrc_6packet_Packet`` ->
    ``mrc.packet.Packet (tp_dealloc)``. Other symbols (CPython's, wrappers) as they are."""
    slot = ""
    if symbol.startswith("__pyx_f_"):
        rest = symbol[len("__pyx_f_"):]
    elif symbol.startswith("__pyx_tp_") and "_" in symbol[len("__pyx_tp_"):]:
        slot, rest = symbol[len("__pyx_tp_"):].split("_", 1)
        slot = f" (tp_{slot})"
    else:
        return symbol
    parts = []
    while rest[:1].isdigit():
        digits = len(rest) - len(rest.lstrip("0123456789"))
        size = int(rest[:digits])
        parts.append(rest[digits:digits + size])
        rest = rest[digits + size:]
        if rest.startswith("_"):
            rest = rest[1:]
    if not parts:
        return symbol
    if rest:
        parts.append(rest)
    return ".".join(parts) + slot


class SourceMap:
    """C line -> Python source line of a Cython-generated file, from the ``/* "file":N``
    comment Cython writes above the C code of each source line."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[list[int], list[str]] | None] = {}

    def __call__(self, c_file: str, line: int) -> str:
        if c_file not in self._files:
            self._files[c_file] = self._read(c_file)
        table = self._files[c_file]
        if table is None or line <= 0:
            return f"{Path(c_file).name}:{line}" if line > 0 else Path(c_file).name
        starts, labels = table
        k = bisect.bisect_right(starts, line) - 1
        return labels[k] if k >= 0 else f"{Path(c_file).name}:{line}"

    @staticmethod
    def _read(c_file: str) -> tuple[list[int], list[str]] | None:
        if not c_file.endswith(".c") or not Path(c_file).exists():
            return None
        starts: list[int] = []
        labels: list[str] = []
        with open(c_file, encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, 1):
                m = _CYTHON_SOURCE.match(text)
                if m:
                    starts.append(number)
                    labels.append(f"{m.group(1)}:{m.group(2)}")
        return starts, labels


def report(profile: Profile, packets: int, top: int = 30) -> str:
    """Misses (and instructions) per delivered packet: by Python function, then by line."""
    ir = profile.events.index("Ir")
    reads, writes = (profile.events.index(e) for e in MISSES)
    total = profile.total(MISSES[0]) + profile.total(MISSES[1])
    lines = [f"{packets} delivered packets; per packet: "
             f"{profile.total('Ir') / packets:,.0f} instructions, "
             f"{total / packets:.1f} last-level data misses "
             f"({profile.total(MISSES[0]) / packets:.1f} reads, "
             f"{profile.total(MISSES[1]) / packets:.1f} writes)", "",
             "misses/pkt   reads  writes  instr/pkt  function"]
    functions: dict[str, list[int]] = defaultdict(lambda: [0] * len(profile.events))
    for symbol, costs in profile.by_function.items():
        row = functions[python_name(symbol)]
        for i, v in enumerate(costs):
            row[i] += v
    lines += _rows(functions, packets, ir, reads, writes, top)
    source = SourceMap()
    by_source: dict[str, list[int]] = defaultdict(lambda: [0] * len(profile.events))
    for (c_file, number, function), costs in profile.by_line.items():
        label = source(c_file, number)
        row = by_source[f"{label} in {python_name(function)}" if function else label]
        for i, v in enumerate(costs):
            row[i] += v
    if any(".py:" in label for label in by_source):
        lines += ["", "misses/pkt   reads  writes  instr/pkt  source line"]
        lines += _rows(by_source, packets, ir, reads, writes, top)
    else:
        lines += ["", "(no line tables: build with MRC_DEBUG_INFO=1 for the report by line)"]
    return "\n".join(lines)


def _rows(table: dict[str, list[int]], packets: int, ir: int, reads: int, writes: int,
          top: int) -> list[str]:
    ranked = sorted(table.items(), key=lambda kv: -(kv[1][reads] + kv[1][writes]))
    return [f"{(c[reads] + c[writes]) / packets:10.2f} {c[reads] / packets:7.2f} "
            f"{c[writes] / packets:7.2f} {c[ir] / packets:10.1f}  {key}"
            for key, c in ranked[:top]]


# ---------------------------------------------------------------------- running it
def window(case: str, from_us: float, to_us: float, out: Path) -> None:
    """The child valgrind runs: the permutation to ``from_us`` uncollected, then
    ``run_until(to_us)``; the packets and events of the window go to ``out`` (JSON)."""
    import gc

    from mrc import bench
    from mrc.units import PS_PER_US

    stack = bench.open_permutation(bench.SPECS[case], "mrc")
    sim = stack.net.sim
    sim.run(int(from_us * PS_PER_US))
    packets, events = stack.recorder.packets_delivered, sim.events_processed
    gc.disable()  # (as Simulator.run does: no collection inside the window)
    sim.run_until(int(to_us * PS_PER_US))
    out.write_text(json.dumps({"packets": stack.recorder.packets_delivered - packets,
                               "events": sim.events_processed - events}))


def refusal(script: str) -> str:
    """Why ``script`` cannot run valgrind on the compiled core here ("" when it can): the
    valgrind tools of ``benchmarks/`` (this one, ``field_heat.py``) all need both."""
    from mrc import _build

    if shutil.which("valgrind") is None:
        return f"{script}: valgrind is not on PATH"
    if _build.BUILD != "compiled":
        return f"{script}: reads the compiled core; this is {_build.describe()}"
    return ""


def run(case: str, from_us: float, to_us: float, l2_kb: int, out: Path, top: int) -> int:
    why = refusal("cache_profile")
    if why:
        print(why, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        counts = Path(tmp) / "window.json"
        cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--D1=49152,12,64",
               f"--LL={l2_kb * 1024},16,64", "--dump-line=yes", "--collect-atstart=no",
               f"--toggle-collect={TOGGLE}", f"--callgrind-out-file={out}",
               sys.executable, "-P", __file__, "window", case, str(from_us), str(to_us),
               str(counts)]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "MRC_HUGE_PAGES": "0"})
        if done.returncode != 0 or not counts.exists():
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        window_counts = json.loads(counts.read_text())
    print(f"{case}, {from_us}-{to_us} us: {window_counts['packets']} packets, "
          f"{window_counts['events']} events ({out})")
    print(report(parse_callgrind(out), window_counts["packets"], top))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="profile a window of a permutation, then report")
    p_run.add_argument("case", choices=("perm128", "perm1024"))
    p_run.add_argument("--from-us", type=float, default=40.0)
    p_run.add_argument("--to-us", type=float, default=41.0)
    p_run.add_argument("--l2-kb", type=int, default=2048)
    p_run.add_argument("--out", type=Path, default=None, help="callgrind file (default: "
                       "cache-CASE.out here; an existing file is not overwritten)")
    p_run.add_argument("--top", type=int, default=30)
    p_rep = sub.add_parser("report", help="report an existing callgrind file")
    p_rep.add_argument("file", type=Path)
    p_rep.add_argument("--packets", type=int, required=True,
                       help="packets delivered in the window (run prints it)")
    p_rep.add_argument("--top", type=int, default=30)
    p_win = sub.add_parser("window")  # (the child under valgrind)
    p_win.add_argument("case")
    p_win.add_argument("from_us", type=float)
    p_win.add_argument("to_us", type=float)
    p_win.add_argument("counts", type=Path)
    args = parser.parse_args(argv)
    if args.command == "window":
        window(args.case, args.from_us, args.to_us, args.counts)
        return 0
    if args.command == "report":
        print(report(parse_callgrind(args.file), args.packets, args.top))
        return 0
    out = args.out or Path(f"cache-{args.case}.out")
    if out.exists():
        print(f"cache_profile: {out} exists; give another --out", file=sys.stderr)
        return 2
    return run(args.case, args.from_us, args.to_us, args.l2_kb, out, args.top)


if __name__ == "__main__":
    sys.exit(main())
