"""The perm128 / perm1024 pair: wall microseconds per delivered packet and events per packet.

Runs each permutation (see ``mrc/bench.py``: every host writes 2 MB to its image under a
seeded derangement, MRC, 100 Gb/s, one plane) ``--repeat`` times, each in a fresh
interpreter, the two cases alternating (perm128 then perm1024 in each round, so that both
see the same machine: its speed drifts by 10-20% within an hour on a shared VM). Two costs
per delivered packet, best and median of each:

- the event loop: the run's wall time (``Simulator.run``), without building the fabric;
- the whole process: from starting the interpreter to its exit (imports, building the
  fabric, the run), as a user (or htsim, which has no separate figure) is timed.

Then their growth from 128 to 1024 hosts, per round (min-max and median) and best against
best, the events per packet and peak RSS. The first line says which build ran (compiled core
or pure Python; ``MRC_PURE_PYTHON=1`` forces the latter)::

    python benchmarks/bench_perm.py [--repeat 3] [--json]
    MRC_PURE_PYTHON=1 python benchmarks/bench_perm.py
    python benchmarks/bench_perm.py --htsim PATH/TO/htsim_uec

``--htsim``: in every round, after each case, htsim (the Ultra Ethernet Consortium's C++
simulator; build it yourself, ``htsim_uec`` of ``ultraethernet/uet-htsim``) runs the same
fabric and the same permutation: its topology and connection-matrix files are written from
the case's ``FabricSpec`` and seeded derangement (``--htsim-dir`` keeps them). Its whole
process is timed, and its packets are the new data packets it reports at the end.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mrc import _build, bench  # the installed mrc (or PYTHONPATH's): its build is measured
from mrc.labs.run.workloads import derangement

CASES = ("perm128", "perm1024")


def _spread(values: list[float]) -> dict[str, Any]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3), "all": [round(v, 3) for v in values]}


def htsim_inputs(case: str, directory: Path) -> tuple[Path, Path]:
    """htsim's topology and connection-matrix files for ``case``: the same two-tier fabric
    (hosts per T0, T1s, link rate and delay) and the same permutation (``bench``'s seed) as
    mrc-lab's run, every flow of ``bench.FLOW_BYTES`` starting at 0."""
    spec = bench.SPECS[case]
    gbps = f"{spec.link_gbps:g}"
    delay = f"{spec.link_delay_ns:g}"
    topo = directory / f"{case}.topo"
    topo.write_text(
        f"Nodes {spec.hosts}\nTiers 2\nPodsize {spec.hosts}\n\n"
        f"Tier 0\nDownlink_speed_Gbps {gbps}\nRadix_Down {spec.hosts_per_t0}\n"
        f"Radix_Up {spec.t1_per_plane}\nDownlink_Latency_ns {delay}\nSwitch_Latency_ns 0\n\n"
        f"Tier 1\nDownlink_speed_Gbps {gbps}\nRadix_Down {spec.hosts // spec.hosts_per_t0}\n"
        f"Downlink_Latency_ns {delay}\nSwitch_Latency_ns 0\n", encoding="ascii")
    peers = derangement(list(range(spec.hosts)), 1)  # (run_permutation's default seed)
    matrix = directory / f"{case}.cm"
    matrix.write_text(
        f"Nodes {spec.hosts}\nConnections {spec.hosts}\n" + "".join(
            f"{src}->{peers[src]} id {src + 1} start 0 size {bench.FLOW_BYTES}\n"
            for src in range(spec.hosts)), encoding="ascii")
    return topo, matrix


def run_htsim(binary: str, case: str, directory: Path) -> tuple[float, int]:
    """One htsim run of ``case`` (its files from :func:`htsim_inputs`): the whole process's
    wall seconds and the new data packets it reports (``New: N``)."""
    spec = bench.SPECS[case]
    topo, matrix = directory / f"{case}.topo", directory / f"{case}.cm"
    cmd = [binary, "-nodes", str(spec.hosts), "-tm", str(matrix), "-topo", str(topo),
           "-linkspeed", str(round(spec.link_gbps * 1000)), "-mtu", str(spec.mtu_bytes),
           "-end", str(round(bench.DEADLINE_US))]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=directory)
    wall = time.perf_counter() - start
    found = re.findall(r"^New: (\d+)", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"htsim run of {case} failed (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout)[-500:]}")
    return wall, int(found[-1])


def measure(repeat: int, htsim: str | None = None,
            htsim_dir: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"build": _build.describe(), "repeat": repeat}
    runs: dict[str, list[bench.CaseResult]] = {case: [] for case in CASES}
    process_s: dict[str, list[float]] = {case: [] for case in CASES}
    htsim_us: dict[str, list[float]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(prefix="mrc-htsim-") as scratch:
        directory = htsim_dir or Path(scratch)
        if htsim:
            directory.mkdir(parents=True, exist_ok=True)
            for case in CASES:
                htsim_inputs(case, directory)
        for _ in range(repeat):
            for case in CASES:
                start = time.perf_counter()
                runs[case].append(bench.run_isolated(case))
                process_s[case].append(time.perf_counter() - start)
                if htsim:
                    wall, packets = run_htsim(htsim, case, directory)
                    htsim_us[case].append(wall * 1e6 / packets)
    if htsim:
        out["htsim"] = {case: _spread(htsim_us[case]) for case in CASES}
        out["htsim"]["growth_per_round"] = _spread(
            [b / a for a, b in zip(htsim_us["perm128"], htsim_us["perm1024"], strict=True)])
    for case in CASES:
        per_packet = [r.us_per_packet for r in runs[case]]
        whole = [s * 1e6 / r.packets for s, r in zip(process_s[case], runs[case], strict=True)]
        first = runs[case][0]
        out[case] = {
            "us_per_packet_best": round(min(per_packet), 2),
            "us_per_packet_median": round(statistics.median(per_packet), 2),
            "us_per_packet_all": [round(x, 2) for x in per_packet],
            "process_us_per_packet_best": round(min(whole), 2),
            "process_us_per_packet_median": round(statistics.median(whole), 2),
            "process_us_per_packet_all": [round(x, 2) for x in whole],
            "setup_s_median": round(statistics.median(r.setup_s for r in runs[case]), 3),
            "events_per_packet": round(first.events_per_packet, 3),
            "packets": first.packets,
            "wall_s_best": round(min(r.wall_s for r in runs[case]), 3),
            "peak_rss_mb": round(max(r.peak_rss_mb for r in runs[case]), 1),
            "fct_p50_vs_ideal": first.p50_vs_ideal,
        }
    small, large = out["perm128"], out["perm1024"]
    out["growth_128_to_1024"] = round(
        large["us_per_packet_best"] / small["us_per_packet_best"], 3)
    out["process_growth_128_to_1024"] = round(
        large["process_us_per_packet_best"] / small["process_us_per_packet_best"], 3)
    # each round's ratio: both cases ran on the same machine, minutes apart at most
    out["growth_per_round"] = _spread(
        [b / a for a, b in zip(small["us_per_packet_all"], large["us_per_packet_all"],
                               strict=True)])
    out["process_growth_per_round"] = _spread(
        [b / a for a, b in zip(small["process_us_per_packet_all"],
                               large["process_us_per_packet_all"], strict=True)])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--htsim", metavar="PATH",
                        help="htsim_uec binary: run it on the same fabric and permutation "
                             "in every round")
    parser.add_argument("--htsim-dir", type=Path, metavar="DIR",
                        help="write htsim's input files here and keep them (default: a "
                             "temporary directory)")
    args = parser.parse_args(argv)
    doc = measure(max(1, args.repeat), args.htsim, args.htsim_dir)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"build: {doc['build']}")
    print(f"{'case':<10} {'loop us/pkt':>11} {'median':>7} {'process us/pkt':>14} {'median':>7} "
          f"{'setup s':>7} {'events/pkt':>10} {'packets':>9} {'rss MB':>7}")
    for case in CASES:
        r = doc[case]
        print(f"{case:<10} {r['us_per_packet_best']:>11.2f} {r['us_per_packet_median']:>7.2f} "
              f"{r['process_us_per_packet_best']:>14.2f} "
              f"{r['process_us_per_packet_median']:>7.2f} {r['setup_s_median']:>7.3f} {r['events_per_packet']:>10.3f} "
              f"{r['packets']:>9d} {r['peak_rss_mb']:>7.0f}")
    for label, key in (("event loop", "growth_per_round"),
                       ("whole process", "process_growth_per_round")):
        g = doc[key]
        print(f"growth perm128 -> perm1024, {label}: x{g['min']:.2f}-{g['max']:.2f} "
              f"per round, median x{g['median']:.2f}")
    if "htsim" in doc:
        h = doc["htsim"]
        for case in CASES:
            print(f"htsim {case}: whole process {h[case]['min']:.2f}-{h[case]['max']:.2f} "
                  f"us/pkt, median {h[case]['median']:.2f}")
        g = h["growth_per_round"]
        print(f"htsim growth perm128 -> perm1024: x{g['min']:.2f}-{g['max']:.2f} per round, "
              f"median x{g['median']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
