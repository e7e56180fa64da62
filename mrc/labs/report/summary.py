"""summary.json: the headline numbers of a lab run, derived only from its tables.

Everything here takes pandas tables and plain dicts (never a simulator object), so the live
runtime can reuse it. :mod:`mrc.labs.report.summary_fields` defines every field in one sentence
each; the README's "Summary fields" section says the same, and a test holds the three
together. The definitions that need more than a sentence:

Bins are ``time_us`` = bin start, width ``bin_us``; bins that cover less than half their
width (the end of a run) are left out of everything here. The *fault window* runs from the
first fault's start to the next fault event (the start or end of any ``[[fault]]`` entry;
a flap counts as one event from its first down to its last up) or the end of the run.

* ``before``: mean goodput over the steady bins that end before the first fault; leading
  ramp-up bins (below 90% of the median of the later half of the pre-fault bins) are
  skipped. Without faults, the steady bins of the whole run.
* ``during``: mean over bins whose middle lies between the first fault's start and the last
  fault's end (the end of the run if a fault never ends; then ``after`` is null).
* ``after``: mean over bins after the last fault's end. ``min``: the lowest bin after the
  ramp-up. ``retained_pct``: ``during`` as a percentage of ``before``.
* ``detect_us``: from the first fault's start to the transport's first reaction, read from
  the event log (exact times, not bins): an EV leaving GOOD for ASSUMED_BAD (MRC), an RC
  retry or a QP error. Null: the transport never reacted (the fault missed its paths, or
  was an operator's drain: DENIED is not a detection).
* ``recovery_us``: from the first fault's start until goodput is back to at least 90% of
  ``before`` *for good*: the start of the first bin after the last bin of the fault window
  that fell below that level, provided the bins from there to the window's end cover at
  least 50 us (a bin of good luck at the end of a window is not a recovery). ``recovery`` says how to read it: ``"recovered"``,
  ``"no dip"`` (no bin of the window fell below; ``recovery_us`` is 0), ``"not recovered"``
  (still below at the window's end; ``recovery_us`` is null: a transport that settles at
  87.5% of its old rate has not recovered, however fast it settled), ``"job failed"``,
  ``"no fault"``, ``"no baseline"`` (no steady bins before the fault), ``"ended first"``
  (the run ended, its workload done or its job failed, before the first fault: it never
  met the fault).
* ``settle_us``: from the first fault's start until goodput stays within 10% of the level
  it holds under the fault (the median of the window's bins from fault + 50 us on), by the
  same "for good" rule; 0 when no bin of the window left that band; null when the job
  failed, when nothing is left to settle to (a level under 5% of ``before``) or without a
  fault. It says how fast a transport found its new footing, whatever the footing is.

Recovery and settling have a resolution of one bin and are upper bounds: goodput is known
to be back by the start of the bin named, perhaps earlier within the bin before it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mrc import _build
from mrc.labs.report.summary_fields import DROP_CAUSES, OUTCOMES, TOP_FIELDS, TRANSPORT_FIELDS
from mrc.transport.base import ASSUMED_BAD, EVENT_EV_STATE, EVENT_QP_ERROR, EVENT_RETRY

__all__ = ["DROP_CAUSES", "OUTCOMES", "TOP_FIELDS", "TRANSPORT_FIELDS"]  # defined there

SETTLE_US = 50.0  # the level under the fault is measured from fault + 50 us
RECOVERED = 0.9  # recovered: back to 90% of before; settled: within 10% of the new level
STEADY = 0.9  # ramp-up ends at 90% of the typical pre-fault goodput
DETECT_KINDS = (EVENT_RETRY, EVENT_QP_ERROR)
FLOAT_FORMAT = "%.9g"
def _r(value: float | None, digits: int = 3) -> float | None:
    """Round for the JSON (stable, readable); NaN and None become null."""
    if value is None:
        return None
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return None
    out = round(value, digits)
    return 0.0 if out == 0 else out


# ====================================================================== goodput windows
def goodput_series(timeseries: pd.DataFrame, transport: str,
                   metric: str = "goodput_gbps") -> pd.Series:
    """One transport's metric indexed by bin start (us), sorted."""
    rows = timeseries[(timeseries["transport"] == transport) & (timeseries["metric"] == metric)]
    return pd.Series(rows["value"].to_numpy(dtype=float),
                     index=rows["time_us"].to_numpy(dtype=float)).sort_index()


def full_bins(goodput: pd.Series, bin_us: float, end_us: float) -> pd.Series:
    """Bins that cover at least half their width before ``end_us``."""
    starts = goodput.index.to_numpy(dtype=float)
    keep = starts + bin_us / 2 <= end_us + 1e-9
    return goodput[keep]


def steady_start(goodput: pd.Series, bin_us: float, until_us: float) -> float | None:
    """Start of the first bin past the ramp-up, looking only at bins ending by ``until_us``."""
    pre = goodput[goodput.index.to_numpy() + bin_us <= until_us + 1e-9]
    if pre.empty:
        return None
    later = pre.iloc[len(pre) // 2:]
    typical = float(np.median(later.to_numpy()))
    if typical <= 0:
        return float(pre.index[0])
    reached = pre[pre.to_numpy() >= STEADY * typical]
    return float(reached.index[0]) if not reached.empty else float(pre.index[0])


def _mean_where(goodput: pd.Series, bin_us: float, lo: float, hi: float) -> float | None:
    mids = goodput.index.to_numpy(dtype=float) + bin_us / 2
    sel = goodput[(mids >= lo) & (mids < hi)]
    return float(sel.mean()) if not sel.empty else None


def goodput_stats(goodput: pd.Series, *, bin_us: float, end_us: float,
                  first_fault_us: float | None, last_end_us: float | None,
                  ongoing: bool) -> dict[str, float | None]:
    """``{"before", "during", "after", "min"}`` in Gb/s (see the module docstring)."""
    bins = full_bins(goodput, bin_us, end_us)
    horizon = first_fault_us if first_fault_us is not None else end_us
    start = steady_start(bins, bin_us, horizon)
    if first_fault_us is None:
        steady = bins[bins.index >= start] if start is not None else bins
        before = float(steady.mean()) if not steady.empty else None
        during = after = None
    else:
        if start is None:
            before = None
        else:
            pre = bins[(bins.index >= start)
                       & (bins.index.to_numpy() + bin_us <= first_fault_us + 1e-9)]
            before = float(pre.mean()) if not pre.empty else None
        stop = end_us if ongoing or last_end_us is None else last_end_us
        during = _mean_where(bins, bin_us, first_fault_us, stop)
        after = None if ongoing or last_end_us is None else _mean_where(
            bins, bin_us, last_end_us, math.inf)
    tail = bins[bins.index >= start] if start is not None else bins
    low = float(tail.min()) if not tail.empty else None
    return {"before": _r(before), "during": _r(during), "after": _r(after), "min": _r(low)}


def fault_bounds(faults: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None, bool]:
    """(first start, last end, ongoing): ``ongoing`` when some fault never ends."""
    if not faults:
        return None, None, False
    first = min(float(f["at_us"]) for f in faults)
    ends = [f.get("until_us") for f in faults]
    ongoing = any(e is None for e in ends)
    last = max(float(e) for e in ends if e is not None) if not all(e is None for e in ends) \
        else None
    return first, last, ongoing


# ====================================================================== detection and recovery
def _state_after(row: Mapping[str, Any]) -> str | None:
    for key in ("new", "new_state", "state"):
        value = row.get(key)
        if isinstance(value, str):
            return value
    detail = row.get("detail")
    if isinstance(detail, str):  # the stack stores details as JSON text
        try:
            detail = json.loads(detail)
        except ValueError:
            return None
    if isinstance(detail, Mapping):
        value = detail.get("new")
        return value if isinstance(value, str) else None
    return None


def detect_us(events: pd.DataFrame, first_fault_us: float | None) -> float | None:
    """First fault to the first NIC-side detection (ASSUMED_BAD EV, QP retry or error)."""
    if first_fault_us is None or events is None or events.empty:
        return None
    later = events[events["time_us"] >= first_fault_us - 1e-9]
    for row in later.sort_values("time_us", kind="mergesort").to_dict("records"):
        kind = row.get("kind")
        if kind in DETECT_KINDS or (kind == EVENT_EV_STATE and _state_after(row) == ASSUMED_BAD):
            return _r(float(row["time_us"]) - first_fault_us)
    return None


def _window_bins(goodput: pd.Series, *, bin_us: float, end_us: float,
                 first_fault_us: float, next_event_us: float | None) -> pd.Series:
    """The full bins of the fault window that end after the fault starts."""
    bins = full_bins(goodput, bin_us, end_us)
    window_end = min(next_event_us if next_event_us is not None else end_us, end_us)
    starts = bins.index.to_numpy(dtype=float)
    return bins[(starts + bin_us > first_fault_us + 1e-9) & (starts < window_end - 1e-9)]


def back_for_good(window: pd.Series, ok: np.ndarray, first_fault_us: float, bin_us: float
                  ) -> tuple[str, float | None]:
    """``("no dip", 0)`` when every bin is ok, ``("back", t)`` with ``t`` the time from the
    fault to the start of the bin after the last bad one, ``("never", None)`` when the bins
    after the last bad one cover less than :data:`SETTLE_US` (a bin or two of good luck at
    the end of the window is not a recovery)."""
    bad = np.flatnonzero(~ok)
    if bad.size == 0:
        return "no dip", 0.0
    last = int(bad[-1])
    stretch = len(window) - 1 - last
    if stretch * bin_us < SETTLE_US - 1e-9:
        return "never", None
    return "back", _r(max(0.0, float(window.index[last + 1]) - first_fault_us))


def recovery(goodput: pd.Series, *, bin_us: float, end_us: float,
             first_fault_us: float | None, next_event_us: float | None,
             before_gbps: float | None, failed: bool) -> tuple[str, float | None]:
    """``(recovery, recovery_us)``: back to 90% of the pre-fault level, for good (module
    docstring)."""
    if first_fault_us is None:
        return "no fault", None
    if first_fault_us >= end_us:  # the workload was done (or the job failed) before it
        return "ended first", None
    if failed:
        return "job failed", None
    if before_gbps is None or before_gbps <= 0:
        return "no baseline", None
    window = _window_bins(goodput, bin_us=bin_us, end_us=end_us, first_fault_us=first_fault_us,
                          next_event_us=next_event_us)
    if window.empty:
        return "not recovered", None
    status, t = back_for_good(window, window.to_numpy() >= RECOVERED * before_gbps,
                              first_fault_us, bin_us)
    return {"never": "not recovered", "back": "recovered"}.get(status, status), t


def recovery_us(goodput: pd.Series, *, bin_us: float, end_us: float,
                first_fault_us: float | None, next_event_us: float | None,
                before_gbps: float | None, failed: bool) -> float | None:
    """First fault until goodput is back to 90% of ``before`` for good (null: not)."""
    return recovery(goodput, bin_us=bin_us, end_us=end_us, first_fault_us=first_fault_us,
                    next_event_us=next_event_us, before_gbps=before_gbps, failed=failed)[1]


def settle_us(goodput: pd.Series, *, bin_us: float, end_us: float,
              first_fault_us: float | None, next_event_us: float | None,
              before_gbps: float | None, failed: bool) -> float | None:
    """First fault until goodput stays within 10% of its level under the fault."""
    if first_fault_us is None or failed:
        return None
    window = _window_bins(goodput, bin_us=bin_us, end_us=end_us, first_fault_us=first_fault_us,
                          next_event_us=next_event_us)
    if window.empty:
        return None
    starts = window.index.to_numpy(dtype=float)
    settled = window[starts >= first_fault_us + SETTLE_US - 1e-9]
    level = float(np.median((settled if not settled.empty else window).to_numpy()))
    if before_gbps is not None and before_gbps > 0 and level < 0.05 * before_gbps:
        return None  # nothing left to settle to
    values = window.to_numpy()
    status, t = back_for_good(window, np.abs(values - level) <= (1 - RECOVERED) * level,
                              first_fault_us, bin_us)
    return t if status != "never" else None


# ====================================================================== the summary
def transport_summary(*, kind: str, outcome: str, failed_at_us: float | None,
                      failure_reason: str | None, totals: Mapping[str, Any],
                      goodput: pd.Series, events: pd.DataFrame, bin_us: float, end_us: float,
                      faults: Sequence[Mapping[str, Any]],
                      fault_event_times_us: Iterable[float] = ()) -> dict[str, Any]:
    """One transport's entry of ``summary.json['transports']``."""
    first, last, ongoing = fault_bounds(faults)
    stats = goodput_stats(goodput, bin_us=bin_us, end_us=end_us, first_fault_us=first,
                          last_end_us=last, ongoing=ongoing)
    next_event = None
    if first is not None:
        later = sorted(t for t in fault_event_times_us if t > first + 1e-9)
        next_event = later[0] if later else None
    failed = outcome == "failed"

    def count(key: str) -> int:
        return int(totals.get(key, 0) or 0)

    window: dict[str, Any] = {"bin_us": bin_us, "end_us": end_us, "first_fault_us": first,
                              "next_event_us": next_event, "before_gbps": stats["before"],
                              "failed": failed}
    status, back_us = recovery(goodput, **window)
    by_kind = totals.get("dropped_by_kind")
    if by_kind is None:  # the runtime's fabric cannot say what it dropped (kernel)
        dropped: dict[str, int | None] = {cause: None for cause in DROP_CAUSES}
        dropped["unattributed"] = count("dropped_packets")
    else:
        dropped = {cause: int(by_kind.get(cause, 0) or 0) for cause in DROP_CAUSES}
    before, during = stats["before"], stats["during"]
    return {
        "kind": kind,
        "outcome": outcome,
        "failed_at_us": _r(failed_at_us),
        "failure_reason": failure_reason,
        "bytes_delivered": count("bytes_delivered"),
        "goodput_gbps": stats,
        "retained_pct": _r(100 * during / before, 1) if during is not None and before else None,
        "detect_us": detect_us(events, first),
        "settle_us": settle_us(goodput, **window),
        "recovery_us": back_us,
        "recovery": status,
        "retransmitted_packets": count("retransmitted_packets"),
        "trimmed_packets": count("trimmed_packets"),
        "dropped_packets": dropped,
        "probes_sent": count("probes_sent"),
        "evs_marked_bad": count("paths_marked_bad"),
        "evs_reintegrated": count("paths_reintegrated"),
    }


def build_summary(*, lab: str, seed: int, runtime: str, sim_time_us: float, wall_s: float,
                  goodput_ceiling_gbps: float, faults: Sequence[Mapping[str, Any]],
                  transports: Mapping[str, Mapping[str, Any]],
                  extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary.json document, keys in the issue's order (extra keys after)."""
    doc: dict[str, Any] = {
        "lab": lab,
        "seed": int(seed),
        "runtime": runtime,
        "sim_time_us": _r(sim_time_us),
        "wall_s": _r(wall_s, 2),
        "build": _build.BUILD,  # compiled core or pure Python (same results; wall_s differs)
        "goodput_ceiling_gbps": _r(goodput_ceiling_gbps),
        "faults": [{"kind": f["kind"], "target": f["target"], "at_us": _r(f["at_us"]),
                    "until_us": _r(f.get("until_us")),
                    **({"off_path": f["off_path"]} if f.get("off_path") else {})}
                   for f in faults],
        "transports": {name: dict(t) for name, t in transports.items()},
    }
    if extra:
        doc.update(extra)
    return doc


def flow_stats(flows: pd.DataFrame | None,
               ideal_us: float | None = None) -> dict[str, Any] | None:
    """Flow completion times of one transport (permutation, connection matrix), and with
    ``ideal_us`` (:mod:`mrc.labs.report.ideal`) the median and the slowest against it."""
    if flows is None or flows.empty:
        return None
    done = flows[flows["ok"] == True]  # noqa: E712 (column may hold None)
    fct = done["fct_us"].to_numpy(dtype=float)
    out = {"count": len(flows), "completed": len(done),
           "p50_fct_us": _r(np.percentile(fct, 50)) if fct.size else None,
           "mean_fct_us": _r(fct.mean()) if fct.size else None,
           "p99_fct_us": _r(np.percentile(fct, 99)) if fct.size else None,
           "max_fct_us": _r(fct.max()) if fct.size else None}
    if ideal_us is not None:
        out["ideal_fct_us"] = _r(ideal_us)
        out["ideal_done_us"] = _r(float(flows["start_us"].min()) + ideal_us)
        out["p50_vs_ideal"] = _r(np.percentile(fct, 50) / ideal_us, 4) if fct.size else None
        out["p99_vs_ideal"] = _r(np.percentile(fct, 99) / ideal_us, 4) if fct.size else None
        out["max_vs_ideal"] = _r(fct.max() / ideal_us, 4) if fct.size else None
    return out


# ====================================================================== writers
def dumps_summary(summary: Mapping[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """CSV with a fixed float format and line ending, so equal runs give equal bytes."""
    frame.to_csv(path, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")


def write_outputs(out_dir: Path, *, summary: Mapping[str, Any], timeseries: pd.DataFrame,
                  events: pd.DataFrame, collective: pd.DataFrame | None = None,
                  iterations: pd.DataFrame | None = None, flows: pd.DataFrame | None = None,
                  lab: Mapping[str, Any] | None = None) -> list[Path]:
    """Write a run's tables into ``out_dir`` (created); returns the paths written.

    The folder is a fresh one (:mod:`mrc.labs.output.folder` puts the complete set in place of the
    old one), so nothing of an earlier run can be left beside these. The pictures are drawn
    by :mod:`mrc.labs.report.plot` from the same tables.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    path = out_dir / "summary.json"
    path.write_text(dumps_summary(summary), encoding="utf-8")
    written.append(path)
    for name, frame in (("timeseries.csv", timeseries), ("events.csv", events),
                        ("collective.csv", collective), ("iterations.csv", iterations),
                        ("flows.csv", flows)):
        if frame is None:
            continue
        write_csv(frame, out_dir / name)
        written.append(out_dir / name)
    if lab is not None:
        path = out_dir / "lab.json"
        path.write_text(json.dumps(lab, indent=2, default=str) + "\n", encoding="utf-8")
        written.append(path)
    return written


# ====================================================================== PFC, DCQCN, fairness
def pfc_stats(totals: Mapping[str, Any]) -> dict[str, Any] | None:
    """The PFC block of a transport's summary (None on a fabric without PFC): PAUSE frames
    sent and received, time ports spent paused (summed over ports), ports ever paused, the
    paused time of every port ever paused (longest first), watchdog storms, and the drops of the lossless machinery
    (``lossless_overflow_drops`` must stay 0: they would be a headroom bug)."""
    if "pause_frames_sent" not in totals:
        return None
    keys = ("pause_frames_sent", "pause_frames_received", "ports_paused", "watchdog_storms",
            "lossless_overflow_drops", "watchdog_drops", "stalled_host_drops")
    out: dict[str, Any] = {k: int(totals.get(k, 0) or 0) for k in keys}
    out["paused_us"] = _r(totals.get("paused_us", 0.0))
    out["paused_by_port"] = [{"port": p["port"], "paused_us": _r(p["paused_us"])}
                             for p in totals.get("paused_by_port", [])]
    return out


def _metric(timeseries: pd.DataFrame, transport: str, metric: str) -> pd.Series:
    return goodput_series(timeseries, transport, metric)


def flow_fairness(timeseries: pd.DataFrame, transport: str, *, bin_us: float,
                  end_us: float, tolerance: float = 0.1,
                  window_us: float = 100.0) -> dict[str, Any] | None:
    """How evenly a few connections shared the fabric (the ``flow_gbps:*`` series, kept for
    jobs of at most 16 connections; None with fewer than two).

    Goodput is averaged over windows of ``window_us`` (at least one bin): a rate-based
    congestion control is a sawtooth, and a 10 us bin holds a few dozen packets.
    ``fair_share_gbps``: the mean over the run of the connections' mean goodput.
    ``converged_us``: start of the first window from which every later window has each
    connection within ``tolerance`` of that window's mean over the connections (null if that
    never holds to the end). ``jain_index``: Jain's fairness index of the connections' mean
    goodputs from ``converged_us`` on (or over the run)."""
    rows = timeseries[(timeseries["transport"] == transport)
                      & timeseries["metric"].str.startswith("flow_gbps:")]
    if rows.empty:
        return None
    table = rows.pivot_table(index="time_us", columns="metric", values="value",
                             aggfunc="first").sort_index()
    if table.shape[1] < 2:
        return None
    starts = table.index.to_numpy(dtype=float)
    table = table[starts + bin_us / 2 <= end_us + 1e-9]
    if not len(table):
        return None
    span = max(1, int(round(window_us / bin_us)))
    windows = table.rolling(span).mean().iloc[span - 1:]
    windows.index = table.index[:len(windows)]
    values = windows.to_numpy(dtype=float)
    if not len(values):
        return None
    mean = values.mean(axis=1)
    ok = np.all(np.abs(values - mean[:, None]) <= tolerance * mean[:, None], axis=1) & (mean > 0)
    converged = None
    for i in range(len(ok) - 1, -1, -1):
        if not ok[i]:
            break
        converged = float(windows.index[i])
    whole = table.to_numpy(dtype=float)
    steady = whole if converged is None else whole[table.index.to_numpy() >= converged]
    per_flow = steady.mean(axis=0)
    jain = float(per_flow.sum() ** 2 / (len(per_flow) * (per_flow ** 2).sum())) \
        if (per_flow ** 2).sum() > 0 else None
    return {"flows": int(whole.shape[1]), "window_us": _r(span * bin_us),
            "fair_share_gbps": _r(float(whole.mean())), "converged_us": _r(converged),
            "jain_index": _r(jain, 4), "min_flow_gbps": _r(float(per_flow.min())),
            "max_flow_gbps": _r(float(per_flow.max()))}


def queue_stats(timeseries: pd.DataFrame, transport: str, *, bin_us: float,
                end_us: float) -> dict[str, Any] | None:
    """The deepest data queue of any switch port (sampled at bin ends): peak and mean."""
    series = _metric(timeseries, transport, "max_queue_bytes")
    if series.empty:
        return None
    series = full_bins(series, bin_us, end_us)
    if series.empty:
        return None
    return {"peak_bytes": int(series.max()), "mean_bytes": int(round(float(series.mean())))}


def flow_goodput(timeseries: pd.DataFrame, transport: str, *, bin_us: float, end_us: float,
                 faults: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Each connection's goodput windows (``before``/``during``/``after``/``min``, Gb/s, as
    for the transport's total) from the ``flow_gbps:*`` series, keyed by ``src->dst``:
    what a victim flow or an unrelated job kept while others were congested or stuck."""
    metrics = sorted(m for m in timeseries["metric"].unique() if str(m).startswith("flow_gbps:"))
    rows = timeseries[timeseries["transport"] == transport]
    if not metrics or rows.empty:
        return None
    first, last, ongoing = fault_bounds(faults)
    out: dict[str, Any] = {}
    for metric in metrics:
        series = goodput_series(rows, transport, metric)
        if series.empty:
            continue
        stats = goodput_stats(series, bin_us=bin_us, end_us=end_us, first_fault_us=first,
                              last_end_us=last, ongoing=ongoing)
        bins = full_bins(series, bin_us, end_us)
        stats["mean"] = _r(float(bins.mean())) if not bins.empty else None
        out[metric[len("flow_gbps:"):]] = stats
    return out or None
