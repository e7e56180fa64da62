"""Flow model versus packet model: steady goodput before, during and after a lab's faults.

Both runs are cut into the same windows (``summary.fault_bounds``): *before* the first fault,
*during* (first fault to the last fault's end, or the end of the run), *after* (the last
end to the end of the run). Each window starts ``SETTLE_US`` after its event, so what is
compared is the level goodput settles at, not the transient the packet model has and the flow
model leaves out (MRC's detection, RC's in-flight messages draining); a window's level is the
mean of the bins that lie wholly inside it. ``benchmarks/flow_crosscheck.py`` prints the
table; ``tests/test_flow_crosscheck.py`` holds the flow model to the packet model's levels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mrc.labs.report.summary import SETTLE_US, fault_bounds, goodput_series

WINDOWS = ("before", "during", "after")


def comparable(lab: Any) -> bool:
    """A lab the cross-check reads: it has faults and a healthy stretch before the first
    (the gaps are shares of that level; a lab degraded from t = 0, such as degraded-t1s,
    has none and is compared on flow completion times instead)."""
    return bool(lab.faults) and min(f.at_us for f in lab.faults) > 0


def steady_levels(result: Any) -> dict[str, dict[str, float | None]]:
    """``{transport: {before, during, after}}`` mean Gb/s of a lab result's settled bins."""
    lab = result.lab
    bin_us = lab.run.bin_us
    first, last, ongoing = fault_bounds(result.summary["faults"])
    start = lab.workload.start_us if hasattr(lab.workload, "start_us") else 0.0
    out: dict[str, dict[str, float | None]] = {}
    for name, t in result.summary["transports"].items():
        end = min(float(t.get("sim_end_us") or lab.run.duration_us), lab.run.duration_us)
        bounds: dict[str, tuple[float, float]] = {}
        if first is None:
            bounds["before"] = (start + SETTLE_US, end)
        else:
            bounds["before"] = (start + SETTLE_US, first)
            stop = end if ongoing or last is None else last
            bounds["during"] = (first + SETTLE_US, stop)
            if not ongoing and last is not None:
                bounds["after"] = (last + SETTLE_US, end)
        goodput = goodput_series(result.timeseries, name)
        starts = goodput.index.to_numpy(dtype=float)
        levels: dict[str, float | None] = dict.fromkeys(WINDOWS)
        for window, (lo, hi) in bounds.items():
            inside = (starts >= lo - 1e-9) & (starts + bin_us <= hi + 1e-9)
            values = goodput.to_numpy()[inside]
            levels[window] = float(np.mean(values)) if values.size else None
        out[name] = levels
    return out


def flow_levels(lab: Any) -> tuple[dict[str, dict[str, float | None]], dict[str, str]]:
    """The flow model's steady levels of every transport of ``lab`` it models, and for each
    transport it refuses (:func:`mrc.labs.run.flow.check_flow`) the one-line reason."""
    from mrc.labs.errors import LabError
    from mrc.labs.run.flow import run_flow_lab
    from mrc.labs.run.runner import prepare

    levels: dict[str, dict[str, float | None]] = {}
    refused: dict[str, str] = {}
    for name in prepare(lab, max_nic_ports=None).transports:
        try:
            levels.update(steady_levels(run_flow_lab(lab, transports=name)))
        except LabError as exc:
            refused[name] = str(exc)
    return levels, refused


def compare(packet: dict[str, dict[str, float | None]],
            flow: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    """Rows per (transport, window): both levels, and the gap as a share of the packet
    model's healthy (``before``) level, the scale on which "within 5%" is read (a stalled
    RC job is at 0 in both models; a relative gap to 0 would mean nothing)."""
    rows = []
    for name, levels in packet.items():
        healthy = levels.get("before") or 0.0
        for window in WINDOWS:
            p, f = levels.get(window), flow.get(name, {}).get(window)
            if p is None or f is None:
                continue
            gap = abs(f - p) / healthy if healthy > 0 else math.inf
            rows.append({"transport": name, "window": window, "packet_gbps": round(p, 1),
                         "flow_gbps": round(f, 1), "gap_of_healthy": round(gap, 4)})
    return rows
