"""Time the kernel fabric: build and teardown of a lab's fabric, and fault primitives.

    python benchmarks/bench_kernel_fabric.py [PRESET] [--repeat N]    # needs root

Builds the preset (default lab-8plane: 80 namespaces, 256 veth pairs) ``repeat`` times and
prints each step's wall time, then applies a T1 and a T0 failure and repair to an idle fabric
and prints how long the kernel took to apply each (the floor of a run's fault timing error).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mrc

from mrc.kernel.fabric import KernelFabric  # noqa: E402
from mrc.kernel.faults import KernelFaults  # noqa: E402
from mrc.kernel.shaping import Shaping  # noqa: E402
from mrc.labs.run.kernel import unavailable  # noqa: E402
from topology.spec import preset  # noqa: E402


def main(argv: list[str]) -> int:
    reason = unavailable()
    if reason:
        print(f"bench_kernel_fabric: {reason}", file=sys.stderr)
        return 2
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    names = [a for i, a in enumerate(argv) if not a.startswith("--")
             and (i == 0 or argv[i - 1] != "--repeat")]
    spec = preset(names[0] if names else "lab-8plane")
    builds, teardowns, steps = [], [], []
    faults_ms: dict[str, list[float]] = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        fabric = KernelFabric.build(spec, Shaping(spec, 20_000))
        builds.append(time.perf_counter() - t0)
        steps.append(fabric.times.steps)
        try:
            faults = KernelFaults(fabric)
            for action, target in (("switch_down", "p0.t1.3"), ("switch_up", "p0.t1.3"),
                                   ("switch_down", "p3.t0.0"), ("switch_up", "p3.t0.0"),
                                   ("link_down", "p1.t0.0--p1.t1.1"),
                                   ("link_up", "p1.t0.0--p1.t1.1")):
                t1 = time.perf_counter()
                faults.apply(action, target)
                faults_ms.setdefault(f"{action} {target}", []).append(
                    (time.perf_counter() - t1) * 1e3)
        finally:
            t2 = time.perf_counter()
            fabric.close()
            teardowns.append(time.perf_counter() - t2)
    print(json.dumps({
        "preset": spec.name, "namespaces": len(fabric.switches) + len(fabric.hosts),
        "veth_pairs": len(fabric.links), "repeat": repeat,
        "build_s": {"median": round(statistics.median(builds), 3), "max": round(max(builds), 3)},
        "teardown_s": {"median": round(statistics.median(teardowns), 4),
                       "max": round(max(teardowns), 4)},
        "build_steps_s": steps[-1],
        "fault_apply_ms_median": {k: round(statistics.median(v), 2)
                                  for k, v in faults_ms.items()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
