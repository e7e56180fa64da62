"""fleet.png: interruptions per day and effective training throughput against job size,
MRC and RC, with the spread over trials; drawn from fleet.csv only (headless, Agg)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from mrc.labs.report.plot import TRANSPORT_COLORS


def plot_fleet(table: pd.DataFrame, summary: Mapping[str, Any], *,
               path: str | Path | None = None) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(10, 5.0))
    FigureCanvasAgg(fig)
    ax_int, ax_thr = fig.subplots(1, 2)
    for i, (name, rows) in enumerate(table.groupby("transport", sort=False)):
        color = TRANSPORT_COLORS[i % len(TRANSPORT_COLORS)]
        x = rows["gpus"].to_numpy()
        for ax, mid, lo, hi in ((ax_int, "interruptions_per_day", "interruptions_lo",
                                 "interruptions_hi"),
                                (ax_thr, "effective_throughput", "throughput_lo",
                                 "throughput_hi")):
            stall = float(rows["stall_s_per_day"].iloc[0]) if "stall_s_per_day" in rows \
                else 0.0
            label = str(name) if stall <= 0 else \
                f"{name} (stalled {stall:.3g} s/day at {x[0]:,} GPUs)"
            ax.plot(x, rows[mid], "o-", color=color, lw=1.6, ms=4, label=label)
            ax.fill_between(x, rows[lo], rows[hi], color=color, alpha=0.15, lw=0)
    for ax in (ax_int, ax_thr):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("job size (GPUs, one per NIC)")
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=8)
    ax_int.set_yscale("log")
    ax_int.set_ylabel("job interruptions per day")
    ax_thr.set_ylabel("effective training throughput (of ideal)")
    ax_thr.set_ylim(0, 1.02)
    ticks = sorted(set(table["gpus"].tolist()))
    for ax in (ax_int, ax_thr):
        ax.set_xticks(ticks, [f"{g // 1024}K" if g >= 1024 else str(g) for g in ticks])
        ax.minorticks_off()
    routing = summary.get("routing") or {}
    rc_line = "" if not routing else (
        f"\nRC on its routed fabric: T1 and T0-T1 faults only stall it (detection "
        f"{routing['link_down_detect_us'] / 1e3:g} ms or convergence "
        f"{routing['routing_convergence_us'] / 1e6:g} s, then its next retransmission);"
        "\nT0s, NIC ports, host links and black holes past its retry budget interrupt it")
    fig.suptitle(f"{summary.get('fleet', 'fleet')}: {summary.get('trials')} trials x "
                 f"{summary.get('days'):g} days, {summary.get('workload')}, checkpoint every "
                 f"{summary.get('checkpoint_interval_min'):g} min, restart "
                 f"{summary.get('restart_min'):g} min (bands: 90% of trials){rc_line}",
                 fontsize=9)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=130, metadata={"Software": None})
    return fig
