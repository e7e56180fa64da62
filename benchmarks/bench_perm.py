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
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from mrc import _build, bench  # the installed mrc (or PYTHONPATH's): its build is measured

CASES = ("perm128", "perm1024")


def _spread(values: list[float]) -> dict[str, Any]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3), "all": [round(v, 3) for v in values]}


def measure(repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {"build": _build.describe(), "repeat": repeat}
    runs: dict[str, list[bench.CaseResult]] = {case: [] for case in CASES}
    process_s: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(repeat):
        for case in CASES:
            start = time.perf_counter()
            runs[case].append(bench.run_isolated(case))
            process_s[case].append(time.perf_counter() - start)
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
    args = parser.parse_args(argv)
    doc = measure(max(1, args.repeat))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
