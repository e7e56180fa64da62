"""Issue 16, items 14-15: the pictures say what happened without drawing over themselves.

Synthetic tables with known content; the checks read the figure's artists (positions in
display coordinates after a draw), not pixels."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Polygon, Rectangle

from mrc.labs.report.plot import close, plot_bandwidth, plot_busbw
from mrc.labs.sweep import plot as sweep_plot
from mrc.labs.sweep.plot import plot_sweep

BIN = 10.0


def timeseries(end: float = 995.0, denied: bool = False) -> pd.DataFrame:
    rows = []
    for t in np.arange(0, end, BIN):
        covered = min(BIN, end - t)
        full = 740.0 if t < 200 else 650.0
        # the recorder scales a partial last bin to its covered part: a noisy sliver
        value = full if covered == BIN else 3.0
        rows += [(t, "mrc", "goodput_gbps", value), (t, "rc", "goodput_gbps", value * 0.9),
                 (t, "mrc", "assumed_bad_evs", 4.0 if 200 <= t < 300 else 0.0),
                 (t, "mrc", "denied_evs", 8.0 if denied and 400 <= t < 600 else 0.0)]
    return pd.DataFrame(rows, columns=["time_us", "transport", "metric", "value"])


def summary(faults: list[dict]) -> dict:
    return {"lab": "synthetic", "seed": 1, "runtime": "sim", "sim_time_us": 995.0,
            "duration_us": 995.0, "goodput_ceiling_gbps": 766.0, "faults": faults,
            "transports": {"mrc": {"kind": "mrc", "outcome": "completed",
                                   "failed_at_us": None},
                           "rc": {"kind": "rc", "outcome": "completed", "failed_at_us": None}}}


FAULTS = [
    {"kind": "switch_down", "target": "p1.t1.3", "at_us": 200.0, "until_us": 600.0},
    {"kind": "switch_reboot", "target": "p2.t1.0", "at_us": 204.0, "until_us": 500.0},
    {"kind": "loss", "target": "p0.t0.0--p0.t1.1", "at_us": 208.0, "until_us": 400.0,
     "params": {"probability": 0.01}},
    {"kind": "link_flap", "target": "p3.t0.0--p3.t1.2", "at_us": 212.0, "until_us": 512.0,
     "params": {"count": 4}, "spans": [(212.0, 232.0), (312.0, 332.0), (412.0, 432.0),
                                       (502.0, 512.0)]},
    {"kind": "drain", "target": "p1.t1.3", "at_us": 700.0, "until_us": 800.0},
]


def draw(fig):  # type: ignore[no-untyped-def]
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def test_fault_tags_never_overlap_and_are_listed(tmp_path: Path) -> None:
    fig = plot_bandwidth(timeseries(), summary(FAULTS), faults=FAULTS, bin_us=BIN,
                         path=tmp_path / "b.png")
    renderer = draw(fig)
    ax = fig.axes[0]
    tags = [t for t in ax.texts if t.get_text().strip().isdigit()]
    assert sorted(int(t.get_text()) for t in tags) == [1, 2, 3, 4, 5]
    boxes = [t.get_window_extent(renderer) for t in tags]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)  # four faults within 12 us: staggered rows
    table = "\n".join(t.get_text() for t in fig.texts)
    for k, fault in enumerate(FAULTS, start=1):
        assert f"{k}  " in table and fault["target"] in table
    assert "loss p0.t0.0--p0.t1.1 p=0.01" in table and "(700-800 \u00b5s)" in table
    close(fig)


def test_shading_is_drawn_once_per_colour() -> None:
    fig = plot_bandwidth(timeseries(), summary(FAULTS), faults=FAULTS, bin_us=BIN)
    ax = fig.axes[0]
    spans: dict[str, list[tuple[float, float]]] = {}
    for patch in ax.patches:
        if isinstance(patch, Polygon | Rectangle):
            xs = patch.get_xy()[:, 0] if isinstance(patch, Polygon) else \
                [patch.get_x(), patch.get_x() + patch.get_width()]
            spans.setdefault(to_hex(patch.get_facecolor()), []).append((min(xs), max(xs)))
    assert spans
    for colour, intervals in spans.items():
        intervals.sort()
        for (_a0, a1), (b0, _b1) in zip(intervals, intervals[1:], strict=False):
            assert a1 < b0, (colour, intervals)  # overlapping windows merged: no dark band
    close(fig)


def test_ceiling_label_sits_above_its_line_and_names_are_not_repeated() -> None:
    fig = plot_bandwidth(timeseries(), summary([]), faults=[], bin_us=BIN)
    renderer = draw(fig)
    ax = fig.axes[0]
    (label,) = [t for t in ax.texts if t.get_text().startswith("goodput ceiling")]
    line_y = ax.transData.transform((0, 766.0))[1]
    assert label.get_window_extent(renderer).y0 >= line_y  # not struck through
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["mrc: completed", "rc: completed"]
    close(fig)


def test_partial_last_bin_is_not_drawn() -> None:
    fig = plot_bandwidth(timeseries(end=995.0), summary([]), faults=[], bin_us=BIN)
    ax = fig.axes[0]
    for line in ax.get_lines():
        y = np.asarray(line.get_ydata(), dtype=float)
        if y.size > 2:  # a goodput step line (the ceiling is a two-point line)
            assert y.min() > 100, "the 5 us sliver at the end would read as a drop"
            assert float(np.asarray(line.get_xdata())[-1]) <= 990.0 + 1e-9
    close(fig)


def test_subtitle_follows_overrides_and_denied_evs_are_drawn() -> None:
    fig = plot_bandwidth(timeseries(denied=True), summary([]), faults=[], bin_us=BIN,
                         subtitle="A T1 is drained at 400 us.",
                         overrides=[("fault.0.at_us", 150.0), ("run.seed", 7)])
    title = fig.axes[0].get_title(loc="left")
    assert "A T1 is drained at 400 us." in title
    assert "this run overrides the lab file: fault.0.at_us=150.0, run.seed=7" in title
    ev_axis = fig.axes[-1]
    labels = [line.get_label() for line in ev_axis.get_lines()]
    assert "mrc DENIED" in labels and "mrc ASSUMED_BAD" in labels
    assert ev_axis.get_ylabel() == "EVs out\nof use"
    close(fig)


def test_busbw_by_size_on_a_log_axis_with_time_in_its_own_panel() -> None:
    sizes = [65536, 262144, 1048576, 4194304]
    rows = []
    for name, speed in (("mrc", 1.0), ("rc", 0.9)):
        for size in sizes:
            t = 5 + size / 190_000 / speed
            rows.append({"transport": name, "size_bytes": size, "time_us": t,
                         "busbw_GBps": size / t / 1e3, "status": "ok"})
    table = pd.DataFrame(rows)
    fig = plot_busbw(table, {"lab": "s", "seed": 1, "workload": "sendrecv",
                             "nic_goodput_ceiling_gbps": 1531.9,
                             "transports": {"mrc": {}, "rc": {}}})
    bw, per_iter = fig.axes
    assert bw.get_xscale() == "log" and per_iter.get_xscale() == "log"
    assert per_iter.get_yscale() == "log" and "iteration" in per_iter.get_ylabel()
    assert bw.get_ylabel() == "busbw (GB/s)"
    xs = sorted({float(x) for line in bw.get_lines() for x in line.get_xdata()
                 if len(line.get_xdata()) > 2})
    assert xs == [float(s) for s in sizes]
    close(fig)


def test_sweep_over_sizes_uses_a_log_axis(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = []
    real = sweep_plot.figure
    monkeypatch.setattr(sweep_plot, "figure", lambda **kw: drawn.append(real(**kw)) or drawn[-1])
    rows = [{"run_id": f"r{i}", "status": "ok", "transport": "mrc", "run.seed": 1,
             "workload.message_bytes": size, "goodput_gbps_before": 100.0 + i}
            for i, size in enumerate([4096, 65536, 1048576])]
    path = plot_sweep(pd.DataFrame(rows), "goodput_gbps_before", "workload.message_bytes",
                      tmp_path / "p.png", params=["workload.message_bytes", "run.seed"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn[0].axes[0].get_xscale() == "log"
