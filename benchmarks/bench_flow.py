"""Scale of the flow-level model: wall time and peak memory from 1K to 131K NICs.

    python benchmarks/bench_flow.py                 # the table (each case in its own process)
    python benchmarks/bench_flow.py --nics 131072   # one size
    python benchmarks/bench_flow.py --json

Each case is a Fairwater-shaped fabric (8 planes, 256 hosts per T0, 256 T1 per plane) cut to
N NICs, one collective over all of them (an all-to-all, or a ring all-reduce), both
transports, and one fault schedule: a T1 reboots, a T0-T1 link dies, a T0 dies, a NIC port
dies, a link flaps. ``wall_s`` is the lab run (load, solve every interval, tables), ``peak_mb``
the process's peak resident memory (imports included, about 90 MB).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

SIZES = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
WORKLOADS = ("all_to_all", "all_reduce")


def lab(workload: str, nics: int) -> dict[str, Any]:
    t0s = nics // 256
    return {
        "name": f"bench-{workload}-{nics}",
        "fabric": {"preset": "fairwater", "hosts": nics},
        "workload": {"kind": workload, "sizes_bytes": [1 << 32], "iters": 1000,
                     "warmup_iters": 0},
        "transport": {"mrc": {}, "rc": {}},
        "fault": [
            {"kind": "switch_reboot", "target": "p0.t1.3", "at_us": 100_000,
             "duration_us": 300_000},
            {"kind": "link_down", "target": f"p1.t0.{t0s - 1}--p1.t1.7", "at_us": 200_000},
            {"kind": "switch_down", "target": "p2.t0.1", "at_us": 300_000},
            {"kind": "port_down", "target": "h5.p3", "at_us": 400_000},
            {"kind": "link_flap", "target": "p4.t0.0--p4.t1.100", "at_us": 500_000,
             "period_us": 10_000, "down_us": 2_000, "count": 20},
        ],
        "run": {"duration_us": 1_000_000, "seed": 1},
    }


def one(workload: str, nics: int) -> dict[str, Any]:
    from mrc.labs.run.flow import run_flow_lab

    t0 = time.perf_counter()
    result = run_flow_lab(lab(workload, nics))
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    info = result.summary["flow"]
    mrc, rc = (result.summary["transports"][k] for k in ("mrc", "rc"))
    return {"workload": workload, "nics": nics, "wall_s": round(wall, 2),
            "peak_mb": round(peak_mb), "mrc_groups": info["mrc"]["groups"],
            "mrc_path_model": info["mrc"]["path_model"],
            "rc_path_model": info["rc"]["path_model"],
            "solves": info["mrc"]["solves"] + info["rc"]["solves"],
            "mrc_min_of_before": round((mrc["goodput_gbps"]["min"] or 0)
                                       / mrc["goodput_gbps"]["before"], 4),
            "rc_outcome": rc["outcome"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nics", type=int, action="append", help="sizes (default: all)")
    parser.add_argument("--workload", choices=WORKLOADS, action="append")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("WORKLOAD", "NICS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]))))
        return
    rows = []
    if not args.json:
        print(f"{'workload':<12}{'NICs':>9}{'wall s':>9}{'peak MB':>9}{'groups':>10}"
              f"{'MRC paths':>11}{'RC pins':>13}{'solves':>8}{'MRC min/before':>16}"
              f"{'RC job':>9}")
    for workload in args.workload or WORKLOADS:
        for nics in args.nics or SIZES:
            out = subprocess.run([sys.executable, __file__, "--one", workload, str(nics)],
                                 capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            if not args.json:
                print(f"{row['workload']:<12}{row['nics']:>9,}{row['wall_s']:>9.2f}"
                      f"{row['peak_mb']:>9,}{row['mrc_groups']:>10,}"
                      f"{row['mrc_path_model']:>11}{row['rc_path_model']:>13}"
                      f"{row['solves']:>8}{row['mrc_min_of_before']:>16.4f}"
                      f"{row['rc_outcome']:>9}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
