"""The perm128 / perm1024 pair: wall microseconds per delivered packet and events per packet.

Runs each permutation (see ``mrc/bench.py``: every host writes 2 MB to its image under a
seeded derangement, MRC, 100 Gb/s, one plane) ``--repeat`` times, each in a fresh
interpreter, and prints best and median of the wall time per delivered packet, the events per
packet, the growth of the cost from 128 to 1024 hosts (best against best) and peak RSS. The
first line says which build ran (compiled core or pure Python; ``MRC_PURE_PYTHON=1`` forces
the latter)::

    python benchmarks/bench_perm.py [--repeat 3] [--json]
    MRC_PURE_PYTHON=1 python benchmarks/bench_perm.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from mrc import _build, bench  # the installed mrc (or PYTHONPATH's): its build is measured

CASES = ("perm128", "perm1024")


def measure(repeat: int) -> dict[str, object]:
    out: dict[str, object] = {"build": _build.describe(), "repeat": repeat}
    for case in CASES:
        runs = [bench.run_isolated(case) for _ in range(repeat)]
        per_packet = [r.us_per_packet for r in runs]
        out[case] = {
            "us_per_packet_best": round(min(per_packet), 2),
            "us_per_packet_median": round(statistics.median(per_packet), 2),
            "us_per_packet_all": [round(x, 2) for x in per_packet],
            "events_per_packet": round(runs[0].events_per_packet, 3),
            "packets": runs[0].packets,
            "wall_s_best": round(min(r.wall_s for r in runs), 3),
            "peak_rss_mb": round(max(r.peak_rss_mb for r in runs), 1),
            "fct_p50_vs_ideal": runs[0].p50_vs_ideal,
        }
    small, large = out["perm128"], out["perm1024"]
    out["growth_128_to_1024"] = round(
        large["us_per_packet_best"] / small["us_per_packet_best"], 3)  # type: ignore[index]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    doc = measure(max(1, args.repeat))
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"build: {doc['build']}")
    print(f"{'case':<10} {'us/pkt best':>11} {'median':>8} {'events/pkt':>10} "
          f"{'packets':>9} {'rss MB':>7}")
    for case in CASES:
        r = doc[case]
        print(f"{case:<10} {r['us_per_packet_best']:>11.2f} {r['us_per_packet_median']:>8.2f} "  # type: ignore[index]
              f"{r['events_per_packet']:>10.3f} {r['packets']:>9d} {r['peak_rss_mb']:>7.0f}")  # type: ignore[index]
    print(f"growth perm128 -> perm1024 (best): x{doc['growth_128_to_1024']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
