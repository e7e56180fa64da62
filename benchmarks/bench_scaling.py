"""Where the cost per packet grows: with the fabric, or with the flows busy at once.

perm128 -> perm1024 (``bench_perm.py``) changes two things together: the fabric is 8x larger
and 8x more flows run at the same time. This separates them. Two series of permutations
(MRC, 100 Gb/s, one plane, 2 MB per writing host, as ``mrc/bench.py`` runs them), each
point in a fresh interpreter, the points alternating round by round so that all of them see
the same machine:

- ``fabric``: every host writes, on fabrics of 128 to 1024 hosts (hosts per T0 x T1s as
  ``bench.perm_spec`` builds them); the fabric and the busy flows grow together;
- ``busy``: the 1024-host fabric of perm1024, with only every 8th, 4th, 2nd host writing (128
  to 1024 flows at once); the fabric stays, the busy flows grow.

Each point reports the event loop's wall microseconds per delivered packet (best and
median), events per packet and peak RSS::

    python benchmarks/bench_scaling.py [--repeat 2] [--json]

If the cost per packet follows the ``busy`` series and not the fabric, the growth is the
memory that the flows in flight keep live (their QPs, EV records, queues and packets), not
an algorithm whose cost grows with the fabric.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrc import _build, bench


@dataclass(frozen=True)
class Point:
    """One permutation: a fabric (hosts, hosts per T0, T1s) and every n-th host writing."""

    series: str
    hosts: int
    hosts_per_t0: int
    t1: int
    every: int = 1

    @property
    def flows(self) -> int:
        return len(range(0, self.hosts, self.every))

    @property
    def label(self) -> str:
        return f"{self.series}:{self.hosts}h/{self.flows}f"


POINTS = (
    Point("fabric", 128, 8, 8),
    Point("fabric", 256, 16, 16),
    Point("fabric", 512, 16, 16),
    Point("fabric", 1024, 32, 32),
    Point("busy", 1024, 32, 32, every=8),
    Point("busy", 1024, 32, 32, every=4),
    Point("busy", 1024, 32, 32, every=2),
)  # ("busy", 1024 flows) is the fabric series' last point: not run twice


def run_point(point: Point, size: int = bench.FLOW_BYTES) -> dict[str, Any]:
    """Run ``point`` in this process: its event loop's cost per packet and what it moved."""
    spec = bench.perm_spec(point.hosts, point.hosts_per_t0, point.t1,
                           name=f"scaling-{point.hosts}")
    r = bench.run_permutation(point.label, spec, "mrc", size, every=point.every)
    return {"us_per_packet": r.us_per_packet, "events_per_packet": r.events_per_packet,
            "packets": r.packets, "flows": r.flows, "flows_ok": r.flows_ok,
            "peak_rss_mb": r.peak_rss_mb}


def run_isolated(point: Point) -> dict[str, Any]:
    """``run_point`` in a fresh interpreter (this script's ``--child``)."""
    # the child imports the same mrc as this process (its build is what is measured)
    root = str(Path(bench.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-P", __file__, "--child", point.series, str(point.hosts),
           str(point.hosts_per_t0), str(point.t1), str(point.every)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def measure(repeat: int, points: tuple[Point, ...] = POINTS,
            runner: Callable[[Point], dict[str, Any]] = run_isolated) -> dict[str, Any]:
    """``repeat`` rounds of every point; each point's best and median cost per packet."""
    runs: dict[Point, list[dict[str, Any]]] = {p: [] for p in points}
    for _ in range(repeat):
        for point in points:
            runs[point].append(runner(point))
    rows = []
    for point in points:
        costs = [r["us_per_packet"] for r in runs[point]]
        first = runs[point][0]
        rows.append({"series": point.series, "hosts": point.hosts, "flows": point.flows,
                     "us_per_packet_best": round(min(costs), 2),
                     "us_per_packet_median": round(statistics.median(costs), 2),
                     "us_per_packet_all": [round(c, 2) for c in costs],
                     "events_per_packet": round(first["events_per_packet"], 2),
                     "packets": first["packets"], "flows_ok": first["flows_ok"],
                     "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs[point]))})
    return {"build": _build.describe(), "repeat": repeat, "points": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--child", nargs=5, metavar=("SERIES", "HOSTS", "PER_T0", "T1", "EVERY"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        series, *numbers = args.child
        print(json.dumps(run_point(Point(series, *map(int, numbers)))), flush=True)
        from mrc.sim.collector import spare_exit_collection

        spare_exit_collection()  # the child exits next: no walk of what the run left
        return 0
    doc = measure(max(1, args.repeat))
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"build: {doc['build']}")
    print(f"{'series':<7} {'hosts':>5} {'flows':>5} {'loop us/pkt':>11} {'median':>7} "
          f"{'events/pkt':>10} {'rss MB':>7}")
    for row in doc["points"]:
        print(f"{row['series']:<7} {row['hosts']:>5} {row['flows']:>5} "
              f"{row['us_per_packet_best']:>11.2f} {row['us_per_packet_median']:>7.2f} "
              f"{row['events_per_packet']:>10.2f} {row['peak_rss_mb']:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
