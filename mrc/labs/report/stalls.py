"""Stalls: how many QPs a fault stopped, and for how long (summary.json's ``stalls``).

The unit is the **QP as a receiver of data**: a QP that placed any new bytes during the run,
counted where it places them (a bidirectional write_bw pair of RC QPs is two, one per
direction of data). QPs, not connections, because a fault hits paths and each RC QP rides
one path (its ECMP hash), while a connection stripes over several: a connection is stopped
when any of its QPs is, and counting connections would hide how many paths the fault took.

A QP is **hit** when it placed nothing for longer than the stall threshold
(:func:`mrc.stack.stalls.stall_threshold_ps`: 3 base RTTs) in a gap that overlaps the fault
span (the first fault's start to the last fault's end, or the run's end) and that lost data
explains: a retransmitted packet ended it, or, for a gap still open at the end, its sender
sent retransmissions after its last placement (a QP idle because its connection's message
waits on another QP is not hit). An open gap counts up to when the job failed
(``failed_at_us``), or to the run's end when the job was still ``running``; a job that
completed has no open gaps. A QP held by PFC pauses without loss is therefore not counted
here (the ``pfc`` block says how long ports were paused). Its **stall** is its
longest such gap: ``stall_max_us`` and ``stall_median_us`` are taken over the hit QPs. With
a time scale other than 1 (:mod:`mrc.labs.run.time_scale`) both are also given in real-world
time (``*_real_us``: divided by the factor).

Caveat: a collective whose ring waits on one stopped QP stops every QP of the ring; they
are all hit (they did stop), though the fault's path crossed only one. write_bw keeps every
QP busy, so there a gap is a stall of that QP's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mrc.labs.report.stall_fields import STALL_FIELDS, UNIT
from mrc.units import PS_PER_US

__all__ = ["STALL_FIELDS", "UNIT", "stall_stats"]



def _span(faults: Sequence[Mapping[str, Any]], end_us: float) -> tuple[float, float] | None:
    if not faults:
        return None
    start = min(float(f["at_us"]) for f in faults)
    ends = [f.get("until_us") for f in faults]
    known = [float(e) for e in ends if e is not None]
    stop = end_us if len(known) < len(ends) else max(known)
    return start, max(stop, start)


def _longest(record: Mapping[str, Any], span: tuple[float, float], open_end_us: float | None,
             threshold_ps: int) -> int:
    """The QP's longest gap over the threshold that overlaps ``span`` (ps; 0: none)."""
    lo, hi = span[0] * PS_PER_US, span[1] * PS_PER_US
    gaps = list(record["gaps"])
    last = record["last_placed_ps"]
    if open_end_us is not None and record.get("sender_last_retx_ps", -1) >= last:
        gaps.append((last, int(round(open_end_us * PS_PER_US))))
    best = 0
    for a, b in gaps:
        if b - a > threshold_ps and b > lo and a < hi:
            best = max(best, b - a)
    return best


def _r(value: float) -> float:
    out = round(float(value), 3)
    return 0.0 if out == 0 else out


def stall_stats(records: Sequence[Mapping[str, Any]], *, faults: Sequence[Mapping[str, Any]],
                outcome: str, failed_at_us: float | None, end_us: float, threshold_ps: int,
                time_scale: float = 1.0) -> dict[str, Any]:
    """summary.json's ``stalls`` for one transport (module doc)."""
    out: dict[str, Any] = {"unit": UNIT, "threshold_us": _r(threshold_ps / PS_PER_US),
                           "qps": len(records), "qps_hit": 0, "hit_pct": None,
                           "stall_max_us": None, "stall_median_us": None}
    span = _span(faults, end_us)
    if records:
        out["hit_pct"] = 0.0
    if span is None or not records:
        return out
    open_end = failed_at_us if outcome == "failed" else end_us if outcome == "running" else None
    stalls = [s for s in (_longest(r, span, open_end, threshold_ps) for r in records) if s]
    out["qps_hit"] = len(stalls)
    out["hit_pct"] = _r(100 * len(stalls) / len(records))
    if stalls:
        out["stall_max_us"] = _r(max(stalls) / PS_PER_US)
        out["stall_median_us"] = _r(float(np.median(stalls)) / PS_PER_US)
        if time_scale != 1:
            out["stall_max_real_us"] = _r(max(stalls) / PS_PER_US / time_scale)
            out["stall_median_real_us"] = _r(float(np.median(stalls)) / PS_PER_US / time_scale)
    return out
