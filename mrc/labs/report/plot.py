"""The figures of the labs layer, drawn only from tables (no simulator objects).

``bandwidth.png``: goodput over time for every transport on one set of axes, fault windows
shaded and labelled, the goodput ceiling drawn: the figure a user puts in a report.
``busbw.png``: a collective's busbw and iteration time by message size. (A sweep's figure is
:mod:`mrc.labs.sweep.plot`.)

Every figure is its own :class:`~matplotlib.figure.Figure` on an Agg canvas, never pyplot's
global state: figures drawn in several threads of one process (Dask workers) cannot meet,
so nothing needs a lock, and the pictures are the same on every machine.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator
from matplotlib.transforms import blended_transform_factory

TRANSPORT_COLORS = ["#1f5fbf", "#d9541e", "#2a9d3a", "#8e44ad", "#b8860b", "#17becf"]
FAULT_COLORS = {
    "down": "#d62728", "flap": "#ff7f0e", "loss": "#9a9a00", "degrade": "#9467bd",
    "drain": "#2ca02c",
}
_FAMILY = {"link_down": "down", "switch_down": "down", "port_down": "down",
           "switch_reboot": "down", "link_flap": "flap", "loss": "loss", "degrade": "degrade",
           "drain": "drain", "nic_stall": "down"}
_SHORT = {"link_down": "link down", "switch_down": "switch down", "port_down": "port down",
          "switch_reboot": "reboot", "link_flap": "flap", "loss": "loss",
          "degrade": "degraded", "drain": "drain", "nic_stall": "NIC stalled"}


def _spans(fault: Mapping[str, Any], end_us: float) -> list[tuple[float, float]]:
    spans = fault.get("spans")
    if spans:
        return [(float(a), float(b)) for a, b in spans]
    until = fault.get("until_us")
    return [(float(fault["at_us"]), float(until) if until is not None else end_us)]


def _label(fault: Mapping[str, Any]) -> str:
    text = f"{_SHORT.get(fault['kind'], fault['kind'])} {fault['target']}"
    params = fault.get("params") or {}
    if "probability" in params:
        text += f" p={params['probability']:g}"
    if "rate_fraction" in params:
        text += f" x{params['rate_fraction']:g}"
    if "count" in params:
        text += f" x{params['count']}"
    return text


def _merge(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals, so overlapping windows shade once (no dark band)."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _when(fault: Mapping[str, Any], scale: float, unit: str) -> str:
    at = float(fault["at_us"]) / scale
    until = fault.get("until_us")
    return f"{at:g}-{float(until) / scale:g} {unit}" if until is not None else \
        f"from {at:g} {unit}"


def _full_bins(rows: pd.DataFrame, bin_us: float, end_us: float) -> pd.DataFrame:
    """A transport's bins that cover their whole width: the last, partial bin of a run is a
    rate over a sliver of time and would read as a spike or a drop."""
    return rows[rows["time_us"].to_numpy(dtype=float) + bin_us <= end_us + 1e-6]


def plot_bandwidth(timeseries: pd.DataFrame, summary: Mapping[str, Any], *,
                   faults: Sequence[Mapping[str, Any]] | None = None,
                   bin_us: float | None = None, title: str | None = None,
                   subtitle: str | None = None,
                   overrides: Sequence[tuple[str, Any]] | Mapping[str, Any] = (),
                   iterations: pd.DataFrame | None = None,
                   path: str | Path | None = None) -> Figure:
    """Draw (and with ``path``, save) the bandwidth figure.

    ``faults``: entries like summary['faults'], optionally with ``spans`` (list of
    (start, end) us, e.g. each down period of a flap) and ``params``; default: the summary's.
    Each fault is numbered at its start (tags staggered so they never overlap) and listed
    with its window in a table under the plot; windows of one colour are shaded once.
    ``overrides``: the ``--set`` keys the run changed, shown under the subtitle (the lab
    file's description may no longer hold).
    ``iterations``: collective iterations (transport, start_us, time_us, warmup); when given,
    a panel shows each iteration's time at its start, one line per message size.
    A panel of the EVs out of use (ASSUMED_BAD solid, operator DENIED dashed) appears when
    there were any. Bins that cover only part of their width (the end of a run) are not drawn.
    """
    faults = list(faults if faults is not None else summary.get("faults", []))
    transports: Mapping[str, Any] = summary.get("transports", {})
    good = timeseries[timeseries["metric"] == "goodput_gbps"]
    if bin_us is None:
        times = np.unique(good["time_us"].to_numpy(dtype=float))
        bin_us = float(np.min(np.diff(times))) if times.size > 1 else 1.0
    ends = [float(v) for v in (summary.get("duration_us"), summary.get("sim_time_us")) if v]
    end_us = min(ends) if ends else (float(good["time_us"].max()) + bin_us
                                     if not good.empty else 1.0)
    x = _TimeAxis(bin_us, end_us, *((1e3, "ms") if end_us > 20_000 else (1.0, "\u00b5s")))
    listed = [f for f in faults if f["kind"] in _FAMILY]
    panels = _Panels.make(timeseries, iterations, listed)
    names = list(transports) or list(dict.fromkeys(good["transport"]))
    lines = _goodput_lines(good, names, transports, x)
    ax = panels.goodput
    ymax = _draw_goodput(ax, lines, x)
    if panels.iterations is not None and panels.timed is not None:
        _draw_iterations(panels.iterations, panels.timed, lines, x)
    if panels.evs is not None:
        _draw_evs(panels.evs, panels.ev_rows, lines, x)
    if panels.paused is not None:
        _draw_paused(panels.paused, panels.paused_rows, lines, x)
    ceiling = summary.get("goodput_ceiling_gbps")
    if ceiling:
        _draw_ceiling(ax, float(ceiling))
        ymax = max(ymax, float(ceiling))
    ax.set_ylim(0, max(ymax, 1.0) * 1.25)
    ax.set_xlim(0, end_us / x.scale)
    _ideal_done(ax, transports, x.scale, x.unit)
    _draw_faults(panels, listed, x)
    _style_panels(panels, x)
    ax.set_title(_bandwidth_title(summary, title, subtitle, overrides), fontsize=10, loc="left")
    fig = panels.fig
    if listed:
        lines_text = [f"{k}  {_label(f)}  ({_when(f, x.scale, x.unit)})"
                      + ("  on no path of the workload's traffic" if f.get("off_path") else "")
                      for k, f in enumerate(listed, start=1)]
        fig.text(0.01, 0.005, "faults:\n" + "\n".join(lines_text), fontsize=8, va="bottom",
                 ha="left", family="monospace", color="0.2")
        fig.tight_layout(rect=(0, panels.table_h / fig.get_figheight(), 1, 1))
    else:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=130, metadata={"Software": None})
    return fig


@dataclass(frozen=True)
class _TimeAxis:
    """The time axis of the bandwidth figure: bin width and end in us, and how it is shown
    (``scale`` us per shown unit)."""

    bin_us: float
    end_us: float
    scale: float
    unit: str


_EV_METRICS = ("assumed_bad_evs", "denied_evs")


@dataclass
class _Panels:
    """The figure's panels, top to bottom: goodput, then (when there is something to show)
    collective iteration times, EVs out of use, PFC-paused ports; and the height of the
    fault table under them."""

    fig: Figure
    axes: Any
    goodput: Any
    iterations: Any
    evs: Any
    paused: Any
    timed: pd.DataFrame | None
    ev_rows: pd.DataFrame
    paused_rows: pd.DataFrame
    table_h: float

    @classmethod
    def make(cls, timeseries: pd.DataFrame, iterations: pd.DataFrame | None,
             listed: Sequence[Mapping[str, Any]]) -> _Panels:
        evs = timeseries[timeseries["metric"].isin(_EV_METRICS)]
        show_evs = not evs.empty and float(evs["value"].max()) > 0
        paused = timeseries[timeseries["metric"] == "paused_ports"]  # PFC fabrics only
        show_paused = not paused.empty and float(paused["value"].max()) > 0
        timed = None
        if iterations is not None and not iterations.empty:
            timed = iterations[iterations["time_us"].notna()]
            timed = timed if not timed.empty else None
        ratios = ([3.2] + ([1.6] if timed is not None else []) + ([1.0] if show_evs else [])
                  + ([1.0] if show_paused else []))
        table_h = 0.16 * len(listed) + (0.2 if listed else 0)
        fig = figure(figsize=(10, 5.2 + 1.1 * (len(ratios) - 1) + table_h))
        axes = fig.subplots(len(ratios), 1, sharex=True, squeeze=False,
                            gridspec_kw={"height_ratios": ratios})
        return cls(fig, axes, axes[0][0], axes[1][0] if timed is not None else None,
                   axes[1 + (timed is not None)][0] if show_evs else None,
                   axes[-1][0] if show_paused else None, timed, evs, paused, table_h)


@dataclass(frozen=True)
class _Line:
    """One transport's goodput line: what it is drawn from and in which colour."""

    name: str
    color: str
    info: Mapping[str, Any]
    own_end: float
    t: np.ndarray
    v: np.ndarray


def _goodput_lines(good: pd.DataFrame, names: Sequence[str], transports: Mapping[str, Any],
                   x: _TimeAxis) -> list[_Line]:
    """The transports that have goodput bins to draw (a transport without is left out of
    every panel), each in its colour of the lab's order."""
    out = []
    for i, name in enumerate(names):
        info = transports.get(name, {})
        own_end = min(x.end_us, float(info.get("sim_end_us") or x.end_us))
        rows = _full_bins(good[good["transport"] == name].sort_values("time_us"), x.bin_us,
                          own_end)
        t = rows["time_us"].to_numpy(dtype=float)
        if t.size:
            out.append(_Line(name, TRANSPORT_COLORS[i % len(TRANSPORT_COLORS)], info, own_end,
                             t, rows["value"].to_numpy(dtype=float)))
    return out


def _draw_goodput(ax: Any, lines: Sequence[_Line], x: _TimeAxis) -> float:
    """Each transport's goodput steps and, when its job failed, where; returns the highest
    goodput drawn."""
    ymax = 0.0
    for line in lines:
        name, info, t, v = line.name, line.info, line.t, line.v
        ymax = max(ymax, float(v.max()))
        kind = info.get("kind", "?")
        label = f"{name}: {info.get('outcome', '?')}" if kind == name else \
            f"{name} ({kind}): {info.get('outcome', '?')}"
        if info.get("failed_at_us") is not None:
            label += f" at {info['failed_at_us'] / x.scale:g} {x.unit}"
        label += stall_label(info)
        ax.step(np.append(t, t[-1] + x.bin_us) / x.scale, np.append(v, v[-1]), where="post",
                color=line.color, lw=1.6, label=label)
        if info.get("failed_at_us") is not None:
            at = info["failed_at_us"] / x.scale
            ax.axvline(at, color=line.color, ls=":", lw=1.4)
            ax.annotate(f"{name} job failed", (at, 0.3), xycoords=("data", "axes fraction"),
                        xytext=(4, 0), textcoords="offset points", color=line.color,
                        fontsize=8, rotation=90, va="bottom")
    return ymax


def _draw_iterations(ax: Any, timed: pd.DataFrame, lines: Sequence[_Line],
                     x: _TimeAxis) -> None:
    """Each collective iteration's time at its start, one line per message size."""
    for line in lines:
        it = timed[timed["transport"] == line.name]
        sizes = list(dict.fromkeys(it["size_bytes"])) if "size_bytes" in it else [None]
        for k, size in enumerate(sizes):  # one line per size: no jumps between sizes
            part = it if size is None else it[it["size_bytes"] == size]
            ax.plot(part["start_us"].to_numpy(dtype=float) / x.scale,
                    part["time_us"].to_numpy(dtype=float), "o-", ms=2.5, lw=0.8,
                    color=line.color, label=line.name if k == 0 else None)


def _draw_evs(ax: Any, evs: pd.DataFrame, lines: Sequence[_Line], x: _TimeAxis) -> None:
    """The EVs out of use per transport: ASSUMED_BAD solid, operator DENIED dashed."""
    for line in lines:
        for metric, style in zip(_EV_METRICS, ("-", "--"), strict=True):
            b = evs[(evs["transport"] == line.name) & (evs["metric"] == metric)]
            b = _full_bins(b.sort_values("time_us"), x.bin_us, line.own_end)
            if not b.empty and float(b["value"].max()) > 0:
                bt = b["time_us"].to_numpy(dtype=float)
                bv = b["value"].to_numpy(dtype=float)
                word = "ASSUMED_BAD" if metric == "assumed_bad_evs" else "DENIED"
                ax.step(np.append(bt, bt[-1] + x.bin_us) / x.scale, np.append(bv, bv[-1]),
                        where="post", color=line.color, lw=1.3, ls=style,
                        label=f"{line.name} {word}")


def _draw_paused(ax: Any, paused: pd.DataFrame, lines: Sequence[_Line], x: _TimeAxis) -> None:
    """PFC-paused ports per transport."""
    for line in lines:
        pz = paused[paused["transport"] == line.name].sort_values("time_us")
        if not pz.empty and float(pz["value"].max()) > 0:
            pt = pz["time_us"].to_numpy(dtype=float)
            pv = pz["value"].to_numpy(dtype=float)
            ax.step(np.append(pt, pt[-1] + x.bin_us) / x.scale, np.append(pv, pv[-1]),
                    where="post", color=line.color, lw=1.3, label=line.name)


def _draw_ceiling(ax: Any, ceiling: float) -> None:
    ax.axhline(ceiling, color="0.35", ls="--", lw=1)
    ax.annotate(f"goodput ceiling {ceiling:.0f} Gb/s", (0.005, ceiling),
                xycoords=("axes fraction", "data"), xytext=(0, 4),
                textcoords="offset points", fontsize=8, color="0.3", va="bottom",
                bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none",
                      "alpha": 0.8})


def _draw_faults(panels: _Panels, listed: Sequence[Mapping[str, Any]], x: _TimeAxis) -> None:
    """Each fault numbered at its start (tags staggered in rows so they never overlap), and
    its windows shaded on every panel, once per colour."""
    ax = panels.goodput
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    shaded: dict[str, list[tuple[float, float]]] = {}
    rows_used: list[float] = []  # the x (axes fraction) of the last tag on each row
    span_x = max(x.end_us, 1e-9)
    for k, fault in enumerate(listed, start=1):
        color = FAULT_COLORS[_FAMILY[fault["kind"]]]
        spans = _spans(fault, x.end_us)
        shaded.setdefault(color, []).extend(
            (a, max(b, a + x.bin_us * 0.05)) for a, b in spans)
        x0 = spans[0][0]
        ax.axvline(x0 / x.scale, color=color, lw=0.8, alpha=0.7)
        frac = x0 / span_x
        row = next((r for r, last in enumerate(rows_used) if frac - last > 0.035), None)
        if row is None:
            row = len(rows_used)
            rows_used.append(frac)
        else:
            rows_used[row] = frac
        ax.text(x0 / x.scale, 0.985 - 0.075 * row, f" {k}", transform=trans, fontsize=8,
                color=color, va="top", ha="left", fontweight="bold", clip_on=True)
    for color, spans in shaded.items():
        for a, b in _merge(spans):
            for axis in (ax, panels.iterations, panels.evs, panels.paused):
                if axis is not None:
                    axis.axvspan(a / x.scale, b / x.scale, color=color, alpha=0.13, lw=0)


def _style_panels(panels: _Panels, x: _TimeAxis) -> None:
    """Labels, grids, scales and legends of every panel."""
    ax = panels.goodput
    ax.set_ylabel("goodput (Gb/s)")
    ax.grid(True, alpha=0.25)
    ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
    panels.axes[-1][0].set_xlabel(f"time ({x.unit})")
    if panels.iterations is not None and panels.timed is not None:
        ax_iter = panels.iterations
        ax_iter.set_ylabel("iteration\ntime (\u00b5s)", fontsize=9)
        ax_iter.grid(True, alpha=0.25)
        times = panels.timed["time_us"].to_numpy(dtype=float)
        if times.min() > 0 and times.max() / times.min() > 20:  # a size sweep
            ax_iter.set_yscale("log")
        else:
            ax_iter.set_ylim(bottom=0)
    if panels.evs is not None:
        panels.evs.set_ylabel("EVs out\nof use", fontsize=9)
        panels.evs.grid(True, alpha=0.25)
        panels.evs.set_ylim(bottom=0)
        panels.evs.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
        panels.evs.legend(loc="upper right", fontsize=7, framealpha=0.9)
    if panels.paused is not None:
        panels.paused.set_ylabel("PFC-paused\nports", fontsize=9)
        panels.paused.grid(True, alpha=0.25)
        panels.paused.set_ylim(bottom=0)
        panels.paused.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))


def stall_label(info: Mapping[str, Any]) -> str:
    """``; 2/16 QPs stalled, up to 260 us`` (and the real-world stall when scaled), or ""."""
    stalls = info.get("stalls") or {}
    if not stalls.get("qps_hit"):
        return ""
    text = f"; {stalls['qps_hit']}/{stalls['qps']} QPs stalled, up to {stalls['stall_max_us']:g} us"
    if stalls.get("stall_max_real_us") is not None:
        text += f" ({stalls['stall_max_real_us'] / 1e3:.3g} ms real)"
    return text


def _bandwidth_title(summary: Mapping[str, Any], title: str | None, subtitle: str | None,
                     overrides: Sequence[tuple[str, Any]] | Mapping[str, Any]) -> str:
    """The lab, its seed and runtime, the description and the ``--set`` keys the run
    changed."""
    head = title or str(summary.get("lab", "lab"))
    seed = summary.get("seed")
    head += f"  (seed {seed}, {summary.get('runtime', 'sim')})" if seed is not None else ""
    factor = (summary.get("time_scale") or {}).get("factor", 1.0)
    head += f", real-world timers x{factor:g}" if factor != 1 else ""
    if subtitle:
        head += "\n" + "\n".join(textwrap.wrap(subtitle, 110)[:2])
    changed = list(overrides.items()) if isinstance(overrides, Mapping) else list(overrides)
    if changed:
        shown = ", ".join(f"{k}={v}" for k, v in changed)
        head += "\n" + "\n".join(textwrap.wrap(f"this run overrides the lab file: {shown}",
                                                110)[:2])
    return head


def plot_busbw(collective: pd.DataFrame, summary: Mapping[str, Any], *,
               path: str | Path | None = None) -> Figure:
    """nccl-tests' picture of a size sweep: busbw against message size (log x), and the time
    per iteration against size in its own panel (log-log), one line per transport, the NIC's
    goodput ceiling (in GB/s) drawn in the first."""
    fig = figure(figsize=(9, 6.4))
    ax_bw, ax_t = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    transports: Mapping[str, Any] = summary.get("transports", {})
    names = list(transports) or list(dict.fromkeys(collective["transport"]))
    for i, name in enumerate(names):
        rows = collective[(collective["transport"] == name)].sort_values("size_bytes")
        rows = rows[rows["time_us"].notna()]
        if rows.empty:
            continue
        color = TRANSPORT_COLORS[i % len(TRANSPORT_COLORS)]
        size = rows["size_bytes"].to_numpy(dtype=float)
        ax_bw.plot(size, rows["busbw_GBps"].to_numpy(dtype=float), "o-", color=color,
                   label=name)
        ax_t.plot(size, rows["time_us"].to_numpy(dtype=float), "o-", color=color, label=name)
    nic = summary.get("nic_goodput_ceiling_gbps")
    if nic:
        ax_bw.axhline(nic / 8, color="0.35", ls="--", lw=1)
        ax_bw.annotate(f"one NIC's goodput ceiling {nic / 8:.1f} GB/s", (0.005, nic / 8),
                       xycoords=("axes fraction", "data"), xytext=(0, 4),
                       textcoords="offset points", fontsize=8, color="0.3", va="bottom")
        ax_bw.set_ylim(0, nic / 8 * 1.2)
    for axis in (ax_bw, ax_t):
        axis.set_xscale("log", base=2)
        axis.grid(True, which="both", alpha=0.25)
    ax_t.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _size_label(x)))
    ax_t.set_yscale("log")
    ax_bw.set_ylabel("busbw (GB/s)")
    ax_t.set_ylabel("time per\niteration (\u00b5s)")
    ax_t.set_xlabel("message size (bytes)")
    ax_bw.legend(fontsize=8, loc="lower right")
    workload = summary.get("workload", "collective")
    ax_bw.set_title(f"{summary.get('lab', 'lab')}: {workload} busbw by size  (seed "
                    f"{summary.get('seed')}, {summary.get('runtime', 'sim')})", fontsize=10,
                    loc="left")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=130, metadata={"Software": None})
    return fig


def _size_label(size: float) -> str:
    """nccl-tests' way of writing a size: 64K, 1M, 2G."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size:g}"


def _ideal_done(ax: Any, transports: Mapping[str, Any], scale: float, unit: str) -> None:
    """Flow workloads: when every flow would be done on the fluid ideal (mrc.labs.report.ideal)."""
    done = [t["flows"]["ideal_done_us"] for t in transports.values()
            if (t.get("flows") or {}).get("ideal_done_us") is not None]
    if done:
        x = done[0] / scale
        ax.axvline(x, color="0.2", ls="--", lw=1.1)
        ax.annotate(f"ideal: all flows done {x:.1f} {unit}", (x, 0.3),
                    xycoords=("data", "axes fraction"), xytext=(4, 0),
                    textcoords="offset points", fontsize=8, color="0.2", rotation=90,
                    ha="left", va="bottom")


def close(fig: Figure) -> None:
    """Release a figure's artists now (it belongs to no pyplot registry, so nothing else
    holds it)."""
    fig.clear()


def figure(figsize: tuple[float, float]) -> Figure:
    """A new figure on its own Agg canvas (what ``savefig`` renders with)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig
