"""Slow T1s under a permutation: MRC's flow completion times against the ideal.

    python benchmarks/bench_degraded_t1s.py                  # K = 0, 1, 2, 4 slow T1s of 8
    python benchmarks/bench_degraded_t1s.py --k 1 --k 4 --transport rc
    python benchmarks/bench_degraded_t1s.py --matrix perm_128n_128c_2MB.cm   # htsim's flows
    python benchmarks/bench_degraded_t1s.py --set transport.mrc.path_aware=false  # before

The scenario is the bundled lab ``degraded-t1s`` (htsim's 128-node fabric: one plane, 16 T0
x 8 hosts, 8 T1, 100 Gb/s links of 1 us, no switch latency, 4 KB MTU; every host writes
2,000,000 bytes to its image under the lab's seeded derangement at t = 0), run through the
lab runner with its ``[[fault]]`` list replaced by K ``degrade`` faults: every link of T1s
0..K-1 at 25% of its rate from t = 0, both directions. ``--matrix`` runs an htsim
connection-matrix file instead of the derangement (the lab's ``connection_matrix``
workload). The ideal is :mod:`mrc.labs.report.ideal`'s: the healthy ideal (171.8 us) divided by the
capacity left (7.25/8 for one slow T1, 5/8 for four).

A benchmark, not a test: it prints a table (and ``--json`` one document) and checks nothing.
The last columns say what the run cost: wall and CPU seconds of the whole lab run (the
machine may be shared: CPU is the steadier one) and CPU microseconds per delivered packet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mrc

from mrc.labs.errors import LabError  # noqa: E402
from mrc.labs.run.runner import run_lab, sim_stack_factory  # noqa: E402
from mrc.labs.schema.keys import parse_assignment  # noqa: E402

LAB = "degraded-t1s"
DEFAULT_K = (0, 1, 2, 4)


def slow_t1s(k: int, fraction: float = 0.25) -> list[dict[str, Any]]:
    """The ``[[fault]]`` list of K slow T1s (T1s 0..K-1 of plane 0) from t = 0."""
    return [{"kind": "degrade", "target": f"p0.t1.{i}", "at_us": 0, "rate_fraction": fraction}
            for i in range(k)]


def run_one(k: int, transport: str, overrides: dict[str, Any],
            matrix: str | None = None) -> dict[str, Any]:
    """One lab run with K slow T1s; the transport's flow figures and what the run cost."""
    stacks: list[Any] = []

    def factory(spec: Any, seed: int, bin_ps: int, name: str) -> Any:
        stack = sim_stack_factory(spec, seed, bin_ps, name)
        stacks.append(stack)
        return stack

    changes = {"fault": slow_t1s(k), **overrides}
    if matrix is not None:
        changes["workload"] = {"kind": "connection_matrix",
                               "file": str(Path(matrix).resolve())}
    wall0 = time.perf_counter()
    cpu0 = time.process_time()
    result = run_lab(LAB, transports=transport, progress=False, overrides=changes,
                     stack_factory=factory)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    entry = result.summary["transports"][transport]
    flows = entry["flows"]
    packets = stacks[0].recorder.packets_delivered
    return {"k": k, "transport": transport, "ideal_us": flows["ideal_fct_us"],
            "p50_us": flows["p50_fct_us"], "p99_us": flows["p99_fct_us"],
            "max_us": flows["max_fct_us"], "p50_x": flows["p50_fct_us"] / flows["ideal_fct_us"],
            "p99_x": flows["p99_fct_us"] / flows["ideal_fct_us"],
            "max_x": flows["max_fct_us"] / flows["ideal_fct_us"],
            "completed": flows["completed"], "flows": flows["count"],
            "retransmitted": entry["retransmitted_packets"], "trimmed": entry["trimmed_packets"],
            "evs_marked_bad": entry["evs_marked_bad"], "wall_s": wall, "cpu_s": cpu,
            "packets": packets, "cpu_us_per_packet": cpu * 1e6 / max(packets, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, action="append",
                        help="slow T1s of 8 (repeatable; default 0, 1, 2, 4)")
    parser.add_argument("--transport", default="mrc", choices=("mrc", "rc"))
    parser.add_argument("--seed", type=int, help="the run's seed (the derangement's too)")
    parser.add_argument("--matrix", metavar="FILE", help="an htsim connection-matrix file")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a lab key to override, as mrc-lab run --set (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    try:
        for text in args.sets:
            key, value = parse_assignment(text)
            overrides[key] = value
    except LabError as exc:
        print(f"bench_degraded_t1s: {exc}", file=sys.stderr)
        return 2
    if args.seed is not None:
        overrides["run.seed"] = args.seed
    rows = []
    if not args.json:
        print(f"{LAB}: {args.transport}, slow T1s at 25% of their rate, "
              f"{'flows of ' + args.matrix if args.matrix else 'the lab permutation'}")
        print(f"{'K':>2} {'ideal us':>9} {'p50 us':>8} {'p99 us':>8} {'max us':>8} "
              f"{'p50/ideal':>9} {'p99/ideal':>9} {'max/ideal':>9} {'done':>8} {'retx':>5} "
              f"{'bad EVs':>7} {'wall s':>7} {'cpu s':>6} {'cpu us/pkt':>10}")
    for k in args.k or DEFAULT_K:
        try:
            row = run_one(k, args.transport, overrides, args.matrix)
        except LabError as exc:
            print(f"bench_degraded_t1s: {exc}", file=sys.stderr)
            return 2
        rows.append(row)
        if not args.json:
            print(f"{k:>2} {row['ideal_us']:>9.1f} {row['p50_us']:>8.1f} {row['p99_us']:>8.1f} "
                  f"{row['max_us']:>8.1f} {row['p50_x']:>9.3f} {row['p99_x']:>9.3f} "
                  f"{row['max_x']:>9.3f} {row['completed']:>4}/{row['flows']:<3} "
                  f"{row['retransmitted']:>5} {row['evs_marked_bad']:>7} {row['wall_s']:>7.1f} "
                  f"{row['cpu_s']:>6.1f} {row['cpu_us_per_packet']:>10.2f}", flush=True)
    if args.json:
        print(json.dumps({"lab": LAB, "transport": args.transport, "matrix": args.matrix,
                          "overrides": overrides, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
