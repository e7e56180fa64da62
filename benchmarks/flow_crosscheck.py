"""Flow model versus packet model on every bundled fault lab: steady goodput levels.

    python benchmarks/flow_crosscheck.py            # runs both models, prints the table
    python benchmarks/flow_crosscheck.py --write    # also refreshes tests/data/flow_crosscheck.json

The JSON holds the packet model's steady levels (``mrc.labs.crosscheck.steady_levels``) so
``tests/test_flow_crosscheck.py`` can hold the flow model to them in well under a second,
without rerunning the packet simulator (about 30 s for all labs). Rerun with ``--write``
whenever the packet model's results change (``results/regenerate.py`` says when).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mrc.labs.crosscheck import compare, steady_levels
from mrc.labs.flowrun import run_flow_lab
from mrc.labs.runner import run_lab
from mrc.labs.schema import bundled_names, load_lab

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "flow_crosscheck.json"


def fault_labs() -> list[str]:
    return [name for name in bundled_names() if load_lab(name).faults]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="refresh the test's reference")
    parser.add_argument("labs", nargs="*", help="labs to check (default: every fault lab)")
    args = parser.parse_args()
    reference: dict[str, object] = {}
    print(f"{'lab':<22}{'transport':<10}{'window':<8}{'packet':>9}{'flow':>9}{'gap':>8}")
    for name in args.labs or fault_labs():
        t0 = time.perf_counter()
        packet = steady_levels(run_lab(name, progress=False))
        t1 = time.perf_counter()
        flow = steady_levels(run_flow_lab(name))
        t2 = time.perf_counter()
        reference[name] = packet
        for row in compare(packet, flow):
            print(f"{name:<22}{row['transport']:<10}{row['window']:<8}"
                  f"{row['packet_gbps']:>9.1f}{row['flow_gbps']:>9.1f}"
                  f"{100 * row['gap_of_healthy']:>7.1f}%")
        print(f"{'':<22}(packet {t1 - t0:.1f} s, flow {t2 - t1:.2f} s)")
    print("gap: |flow - packet| as a share of the packet model's healthy (before) level")
    if args.write:
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        REFERENCE.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n",
                             encoding="utf-8")
        print(f"wrote {REFERENCE}")


if __name__ == "__main__":
    main()
