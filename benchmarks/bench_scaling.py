"""Where the cost per packet grows: with the fabric, or with the flows busy at once.

perm128 -> perm1024 (``bench_perm.py``) changes two things together: the fabric is 8x larger
and 8x more flows run at the same time. This separates them. Three series of permutations
(MRC, 100 Gb/s, one plane, 2 MB per writing host, as ``mrc/bench.py`` runs them), each
point in a fresh interpreter, the points alternating round by round so that all of them see
the same machine:

- ``fabric``: every host writes, on fabrics of 128 to 1024 hosts (hosts per T0 x T1s as
  ``bench.perm_spec`` builds them); the fabric and the busy flows grow together;
- ``busy``: the 1024-host fabric of perm1024, with only every 8th, 4th, 2nd host writing (128
  to 1024 flows at once); the fabric stays, the busy flows grow;
- ``apart``: eight separate perm128 fabrics (seeds 1-8) in one process, 1024 busy flows in
  all, their engines stepped in turn through windows of 1 or 4 us of simulated time, or each
  run to its end before the next starts. This is how memory would be reached if the engine
  ran a 1024-host fabric a partition at a time through windows no longer than a link's
  delay, with the one difference in its favour that no packet crosses between partitions:
  a bound on what that order of work could save.

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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrc import _build, bench
from mrc.units import PS_PER_US
from topology.spec import FabricSpec


@dataclass(frozen=True)
class Point:
    """One permutation: a fabric (hosts, hosts per T0, T1s) and every n-th host writing;
    or ``copies`` separate such fabrics stepped in turn through windows of ``window_us`` (0:
    each run to its end in turn)."""

    series: str
    hosts: int
    hosts_per_t0: int
    t1: int
    every: int = 1
    copies: int = 1
    window_us: float = 0.0

    @property
    def writers(self) -> int:
        """Hosts writing in each copy of the fabric."""
        return len(range(0, self.hosts, self.every))

    @property
    def flows(self) -> int:
        return self.copies * self.writers

    @property
    def label(self) -> str:
        if self.copies > 1:
            order = f"w{self.window_us:g}us" if self.window_us else "in turn"
            return f"{self.series}:{self.copies}x{self.hosts}h/{order}"
        return f"{self.series}:{self.hosts}h/{self.flows}f"


POINTS = (
    Point("fabric", 128, 8, 8),
    Point("fabric", 256, 16, 16),
    Point("fabric", 512, 16, 16),
    Point("fabric", 1024, 32, 32),
    Point("busy", 1024, 32, 32, every=8),
    Point("busy", 1024, 32, 32, every=4),
    Point("busy", 1024, 32, 32, every=2),
    # ("busy", 1024 flows) is the fabric series' last point: not run twice
    Point("apart", 128, 8, 8, copies=8, window_us=1.0),
    Point("apart", 128, 8, 8, copies=8, window_us=4.0),
    Point("apart", 128, 8, 8, copies=8),
)


def run_point(point: Point, size: int = bench.FLOW_BYTES) -> dict[str, Any]:
    """Run ``point`` in this process: its event loop's cost per packet and what it moved."""
    spec = bench.perm_spec(point.hosts, point.hosts_per_t0, point.t1,
                           name=f"scaling-{point.hosts}")
    if point.copies > 1:
        return _run_apart(point, spec, size)
    r = bench.run_permutation(point.label, spec, "mrc", size, every=point.every)
    return {"us_per_packet": r.us_per_packet, "events_per_packet": r.events_per_packet,
            "packets": r.packets, "flows": r.flows, "flows_ok": r.flows_ok,
            "peak_rss_mb": r.peak_rss_mb}


def _run_apart(point: Point, spec: FabricSpec, size: int) -> dict[str, Any]:
    """``point.copies`` permutations of ``spec`` (seeds 1, 2, ...), stepped in turn."""
    from mrc.sim.collector import collection_paused

    remaining = [point.writers] * point.copies
    ok = [0] * point.copies

    def completion(copy: int) -> Callable[[int], Callable[[int, bool], None]]:
        def for_host(src: int) -> Callable[[int, bool], None]:
            def complete(now: int, good: bool) -> None:
                remaining[copy] -= 1
                ok[copy] += good
                if not remaining[copy] and not point.window_us:
                    sims[copy].stop()
            return complete
        return for_host

    stacks = [bench.open_permutation(spec, "mrc", size, 1 + i, completion(i), point.every)
              for i in range(point.copies)]
    sims = [stack.net.sim for stack in stacks]
    deadline = int(bench.DEADLINE_US * PS_PER_US)
    start = time.perf_counter()
    with collection_paused(keep=True):
        if point.window_us:
            step = int(point.window_us * PS_PER_US)
            t = 0
            while any(remaining) and t < deadline:
                t += step
                for copy, sim in enumerate(sims):
                    if remaining[copy]:
                        sim.run_until(t)
        else:
            for sim in sims:
                sim.run(deadline)
    wall = time.perf_counter() - start
    packets = sum(stack.recorder.packets_delivered for stack in stacks)
    events = sum(sim.events_processed for sim in sims)
    return {"us_per_packet": wall * 1e6 / max(packets, 1),
            "events_per_packet": events / max(packets, 1), "packets": packets,
            "flows": point.flows, "flows_ok": sum(ok),
            "peak_rss_mb": bench.peak_rss_mb()}


def run_isolated(point: Point) -> dict[str, Any]:
    """``run_point`` in a fresh interpreter (this script's ``--child``)."""
    # the child imports the same mrc as this process (its build is what is measured)
    root = str(Path(bench.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-P", __file__, "--child", point.series, str(point.hosts),
           str(point.hosts_per_t0), str(point.t1), str(point.every), str(point.copies),
           str(point.window_us)]
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
        rows.append({"point": point.label, "series": point.series, "hosts": point.hosts,
                     "copies": point.copies, "window_us": point.window_us, "flows": point.flows,
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
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS,
                        metavar=("SERIES", "HOSTS", "PER_T0", "T1", "EVERY", "COPIES", "WINDOW"))
    args = parser.parse_args(argv)
    if args.child:
        series, hosts, per_t0, t1, every, copies, window = args.child
        point = Point(series, int(hosts), int(per_t0), int(t1), int(every), int(copies),
                      float(window))
        print(json.dumps(run_point(point)), flush=True)
        from mrc.sim.collector import spare_exit_collection

        spare_exit_collection()  # the child exits next: no walk of what the run left
        return 0
    doc = measure(max(1, args.repeat))
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"build: {doc['build']}")
    print(f"{'point':<22} {'flows':>5} {'loop us/pkt':>11} {'median':>7} "
          f"{'events/pkt':>10} {'rss MB':>7}")
    for row in doc["points"]:
        print(f"{row['point']:<22} {row['flows']:>5} "
              f"{row['us_per_packet_best']:>11.2f} {row['us_per_packet_median']:>7.2f} "
              f"{row['events_per_packet']:>10.2f} {row['peak_rss_mb']:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
