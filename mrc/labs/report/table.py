"""The text a run prints: the per-transport comparison table and its footnotes.

Every column says what it counts, and a footnote says what the goodput adds up, only as
far as it is true for this workload (a one-way test is not "both directions summed"). The
table is derived from summary.json alone, so a saved summary prints the same table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mrc.labs.report.summary_fields import OUTCOMES
from mrc.labs.schema.lab import Collective, ConnectionMatrix, Lab, Permutation, WriteBw


def goodput_sum(lab: Lab) -> str:
    """What the lab's goodput figures add up: which directions, which receivers."""
    w = lab.workload
    if isinstance(w, WriteBw):
        pairs = [f"h{a}<->h{b}" if w.bidirectional else f"h{a}->h{b}" for a, b in w.pairs]
        shown = ", ".join(pairs[:3]) + (f" and {len(pairs) - 3} more" if len(pairs) > 3 else "")
        if w.bidirectional:
            return f"both directions of {shown} summed"
        return f"one direction ({shown})" + (" summed" if len(pairs) > 1 else "")
    if isinstance(w, Collective):
        return f"{w.kind} over {len(w.hosts)} ranks: every rank's received bytes summed"
    if isinstance(w, Permutation):
        return f"a permutation of {len(w.hosts)} hosts: every flow summed"
    if isinstance(w, ConnectionMatrix):
        return f"{len(w.flows)} connection-matrix flows summed"
    return "every receiver summed"


def _num(value: Any, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _recovery(t: Mapping[str, Any]) -> str:
    status = t.get("recovery")
    if status == "recovered":
        return _num(t.get("recovery_us"))
    if status == "no dip":
        return "0 (no dip)"
    if status == "no fault":
        return "-"
    return status or "-"


def _hit(t: Mapping[str, Any]) -> str:
    stalls = t.get("stalls")
    if not stalls or not stalls.get("qps"):
        return "-"
    return f"{stalls['qps_hit']}/{stalls['qps']}"


def _real(us: float) -> str:
    """A real-world time in the unit that reads best."""
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} us"


def _threshold(summary: Mapping[str, Any]) -> str:
    for t in summary.get("transports", {}).values():
        if t.get("stalls"):
            return _num(t["stalls"]["threshold_us"])
    return "-"


def _time_scale_notes(summary: Mapping[str, Any]) -> list[str]:
    """The time scale's footnote and its warnings (none at factor 1)."""
    lines: list[str] = []
    factor = (summary.get("time_scale") or {}).get("factor", 1.0)
    if factor != 1:
        lines.append(f"time scale {factor:g}: every real-world control timer (RC's local ACK "
                     "timeout and retry budget, routing detection and convergence) runs x"
                     f"{factor:g}; real-world stall = stall / {factor:g}")
        for entry in summary["time_scale"].get("below_rtt", []):
            lines.append(f"warning: time scale {factor:g} takes {entry['timer']} "
                         f"({entry['full_us']:g} us) below the base RTT "
                         f"({summary['time_scale']['base_rtt_us']:g} us): "
                         "its order against the fabric, and the verdict, may not hold")
    return lines


def comparison_table(summary: Mapping[str, Any]) -> str:
    """The short per-transport comparison printed after a run (goodput in Gb/s)."""
    header = (f"{'transport':<12}{'kind':<5}{'outcome':<10}{'before':>8}{'during':>8}"
              f"{'kept':>7}{'QPs hit':>9}{'stall':>9}{'min':>8}{'detect':>8}{'settle':>8}  {'recovery':<14}"
              f"{'retx':>6}{'data_drops':>11}{'ctl':>6}{'probe':>7}{'EVs bad/back':>14}")
    lines = [header]
    outcomes = set()
    for name, t in summary.get("transports", {}).items():
        g = t["goodput_gbps"]
        drops = t.get("dropped_packets") or {}
        kept = t.get("retained_pct")
        outcomes.add(t["outcome"])
        lines.append(
            f"{name:<12}{t['kind']:<5}{t['outcome']:<10}{_num(g['before']):>8}"
            f"{_num(g['during']):>8}{_num(kept, '.1f') + ('%' if kept is not None else ''):>7}"
            f"{_hit(t):>9}{_num((t.get('stalls') or {}).get('stall_max_us')):>9}"
            f"{_num(g['min']):>8}{_num(t.get('detect_us')):>8}{_num(t.get('settle_us')):>8}"
            f"  {_recovery(t):<14}{t['retransmitted_packets']:>6}"
            f"{_num(drops.get('data'), 'd'):>11}{_num(drops.get('control'), 'd'):>6}"
            f"{_num(drops.get('probe'), 'd'):>7}"
            f"{str(t.get('evs_marked_bad', 0)) + '/' + str(t.get('evs_reintegrated', 0)):>14}")
        if t.get("failure_reason"):
            lines.append(f"{'':<12}failed at {_num(t['failed_at_us'])} us: "
                         f"{t['failure_reason']}")
        real = (t.get("stalls") or {}).get("stall_max_real_us")
        if real is not None:
            lines.append(f"{'':<12}stall in real-world time: {_real(real)} (longest), "
                         f"{_real(t['stalls']['stall_median_real_us'])} (median)")
    ceiling = summary.get("goodput_ceiling_gbps")
    summed = summary.get("goodput_sum")
    text = "goodput: Gb/s of unique payload placed in receivers' memory"
    if summed:
        text += f", {summed}"
    if ceiling is not None:
        text += f"; ceiling {ceiling:.1f} Gb/s"
    lines.append(text)
    lines += _time_scale_notes(summary)
    if summary.get("faults") and _threshold(summary) != "-":
        lines.append("QPs hit: QPs (receivers of data) a fault stopped for over "
                     f"{_threshold(summary)} us; stall: the longest, in us")
    elif summary.get("faults"):
        lines.append("QPs hit, stall: not recorded by this model (-)")
        lines.append("kept: during as % of before. us after the first fault: detect = first "
                     "reaction, settle = until within 10%\nof the level under the fault, "
                     "recovery = until back to 90% of before for good. drops by what was lost "
                     "(data, control, probe);\nEVs: marked ASSUMED_BAD / put back. "
                     "Definitions: README, Summary fields")
    off_path: dict[str, list[str]] = {}  # why -> the faults it holds for, as the plot numbers
    for i, fault in enumerate(summary.get("faults") or []):
        if fault.get("off_path"):
            off_path.setdefault(fault["off_path"], []).append(
                f"{i + 1} ({fault['kind']} {fault['target']})")
    for why, faults in off_path.items():
        lines.append(f"note: fault{'s' if len(faults) > 1 else ''} {', '.join(faults)} "
                     f"{'are' if len(faults) > 1 else 'is'} on no path of the workload's "
                     f"traffic ({why}): {'they' if len(faults) > 1 else 'it'} cannot change "
                     "these results")
    first = min((float(f["at_us"]) for f in summary.get("faults") or []), default=None)
    for name, t in summary.get("transports", {}).items():
        if t.get("recovery") == "ended first":
            lines.append(f"ended first: {name}'s run ended at {_num(t.get('sim_end_us'))} us, "
                         f"before the first fault at {_num(first)} us; it never met the fault")
    if "running" in outcomes:
        lines.append(f"running: {OUTCOMES['running']}")
    for name, t in summary.get("transports", {}).items():
        flows = t.get("flows")
        if flows:
            lines.append(f"flows {name}: {flows['completed']}/{flows['count']} completed; FCT "
                         f"p50 {_num(flows.get('p50_fct_us'))} us, p99 "
                         f"{_num(flows.get('p99_fct_us'))} us, max "
                         f"{_num(flows.get('max_fct_us'))} us")
    for runtime in ("live", "kernel"):
        paced = summary.get(runtime) or {}
        if paced.get("kept_up") is False:
            lines.append(f"WARNING: {paced.get('pace_warning')}")
    return "\n".join(lines)


def files_line(folder: Path, files: Sequence[Path]) -> str:
    """``results in DIR/: a, b, c`` naming every file written."""
    names = ", ".join(sorted(Path(f).name for f in files))
    return f"results in {folder}/: {names}"
