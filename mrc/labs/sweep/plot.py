"""A sweep's figure: one runs-table column against a swept parameter, per transport.

Drawn from the runs table alone (:mod:`mrc.labs.sweep.table`), on its own figure like every
figure of the labs layer (:mod:`mrc.labs.report.plot`), and written atomically: a reader
never sees half a picture.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mrc.labs.errors import LabError
from mrc.labs.output.durable import replace_file
from mrc.labs.report.plot import figure
from mrc.labs.sweep.table import SEED_PARAM, metric_column


def plot_name(metric: str, by: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"plot-{metric}-by-{by}")
    return f"{safe}.png"


def plot_sweep(table: pd.DataFrame, metric: str, by: str, path: str | Path, *,
               params: Sequence[str] = (), title: str | None = None) -> Path:
    """METRIC against PARAM, one series per transport (and per value of any other swept
    parameter but the seed): the mean, with bars from min to max over the seeds and the
    individual runs as faint dots. Null values (a failed job's recovery time) are left out
    and counted under the point."""
    column = metric_column(table, metric)
    if by not in table.columns:
        raise LabError(f"not a column of the runs table; swept parameters: "
                       f"{', '.join(params) or '(none)'}", "--by")
    data = table[table["status"] == "ok"].copy()
    if data.empty:
        raise LabError("no completed runs to plot", "--plot")
    values = pd.to_numeric(data[column], errors="coerce")
    if values.isna().all() and data[column].notna().any():
        raise LabError(f"{column!r} is not numeric (for outcomes plot job_failed, the share "
                       "of runs whose job failed)", "--plot")
    data["_y"] = values
    x = _XAxis.of(data, by)
    # another swept parameter is its own series, unless it moves with ``by`` (zipped)
    others = [p for p in params if p not in (by, SEED_PARAM) and p in data
              and data[p].nunique(dropna=False) > 1
              and data.groupby(by, dropna=False)[p].nunique(dropna=False).max() > 1]
    groups = list(data.groupby(["transport", *others], sort=False, dropna=False))
    seeds = data[SEED_PARAM].nunique() if SEED_PARAM in data else None

    fig = figure(figsize=(9, 5.2))
    ax = fig.add_subplot()
    for i, (key, rows) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        label = str(key[0]) + "".join(f", {p}={v}" for p, v in zip(others, key[1:], strict=True))
        offset = 0.0 if x.log else (i - (len(groups) - 1) / 2) * x.width / max(len(groups), 1)
        _draw_series(ax, rows, x, offset, label)
    _draw_ideal(ax, data, column, x)
    x.style(ax)
    ax.set_ylabel(column)
    spread = f"mean, bars min..max over {seeds} seeds" if seeds else "mean, bars min..max"
    ax.set_title(f"{title + ': ' if title else ''}{column} by {by} ({spread})", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="best")
    if data["_y"].isna().any():
        fig.text(0.01, 0.01, "null values (e.g. no recovery time for a failed job) are left out "
                 "and counted at the bottom", fontsize=7, color="0.4")
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    picture = io.BytesIO()
    fig.savefig(picture, format="png", dpi=120, metadata={"Software": None})
    replace_file(target, picture.getvalue())  # a reader never sees half a picture
    return target


@dataclass(frozen=True)
class _XAxis:
    """Where each value of the swept parameter ``by`` sits: its own value when numeric (a
    size swept over decades on a log axis, as nccl-tests' busbw-by-size), else its rank."""

    by: str
    order: list[Any]
    positions: dict[Any, float]
    numeric: bool
    log: bool
    spacing: float

    @classmethod
    def of(cls, data: pd.DataFrame, by: str) -> _XAxis:
        numeric = bool(pd.api.types.is_numeric_dtype(data[by]) and data[by].notna().all())
        order = list(dict.fromkeys(data[by].tolist()))
        if numeric:
            order = sorted(order)
        positions = {v: (float(v) if numeric else float(i)) for i, v in enumerate(order)}
        steps = sorted(set(positions.values()))
        spacing = min((b - a for a, b in zip(steps, steps[1:], strict=False)), default=1.0)
        log = bool(numeric and steps[0] > 0 and steps[-1] / steps[0] >= 16
                   and (by.endswith("_bytes") or ".sizes_bytes" in by))
        return cls(by, order, positions, numeric, log, spacing)

    @property
    def width(self) -> float:
        """How far apart the series of one x value may spread."""
        return 0.5 * self.spacing

    def style(self, ax: Any) -> None:
        if self.log:
            ax.set_xscale("log", base=2)
        else:
            steps = sorted(set(self.positions.values()))
            ax.set_xlim(steps[0] - 0.6 * self.spacing, steps[-1] + 0.6 * self.spacing)
        if not self.numeric:
            many = len(self.order) > 4
            ax.set_xticks([self.positions[v] for v in self.order], [str(v) for v in self.order],
                          rotation=30 if many else 0, ha="right" if many else "center")
        ax.set_xlabel(self.by)


def _draw_series(ax: Any, rows: pd.DataFrame, x: _XAxis, offset: float, label: str) -> None:
    """One series: the mean per x value with min..max bars, every run as a faint dot, and
    how many runs had no value."""
    by = x.by
    stats = rows.groupby(by, sort=False)["_y"].agg(["mean", "min", "max", "count", "size"])
    stats = stats.reindex([v for v in x.order if v in stats.index])
    xs = [x.positions[v] + offset for v in stats.index]
    mean = stats["mean"].to_numpy(dtype=float)
    low = mean - stats["min"].to_numpy(dtype=float)
    high = stats["max"].to_numpy(dtype=float) - mean
    bars = ax.errorbar(xs, mean, yerr=[low, high], marker="o", capsize=4,
                       linewidth=1.5 if x.numeric else 0.8,
                       linestyle="-" if x.numeric else ":", label=label)
    color = bars[0].get_color()
    dots = rows.dropna(subset=["_y"])
    ax.scatter([x.positions[v] + offset for v in dots[by]], dots["_y"], s=12, alpha=0.35,
               color=color, linewidths=0)
    for at, (_, s) in zip(xs, stats.iterrows(), strict=True):
        if s["count"] < s["size"]:
            ax.annotate(f"{int(s['size'] - s['count'])}/{int(s['size'])} null", (at, 0),
                        xytext=(0, 3),
                        textcoords="offset points", xycoords=("data", "axes fraction"),
                        ha="center", fontsize=7, color=color)


def _draw_ideal(ax: Any, data: pd.DataFrame, column: str, x: _XAxis) -> None:
    """Flow completion times: the fluid ideal per x value (or 1.0 for a ratio to it)."""
    ideal = "flows_ideal_fct_us"
    if column.startswith("flows_") and column.endswith("_fct_us") and ideal in data:
        line = data.groupby(x.by, sort=False)[ideal].mean().reindex(x.order)
        ax.plot([x.positions[v] for v in x.order], line.to_numpy(dtype=float), "k--", lw=1.2,
                label="ideal (healthy ideal / capacity left)")
    elif column.startswith("flows_") and column.endswith("_vs_ideal"):
        ax.axhline(1.0, color="k", ls="--", lw=1.2, label="ideal")
