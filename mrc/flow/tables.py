"""A flow run as the tidy tables a packet run writes (``mrc.stack.recorder`` and ``SimStack``):
goodput per bin in total and per plane, the assumed-bad EV gauge, and event rows.

Rates are constant between events, so a bin's goodput is the exact integral of the segments
it overlaps divided by its width (the last bin: its covered part, as the recorder does).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from mrc.units import PS_PER_US


def _integral_at(times: np.ndarray, rates: np.ndarray, at: np.ndarray) -> np.ndarray:
    """∫ rate dt from the first segment start to each time in ``at`` (Gb/s x ps)."""
    cum = np.concatenate([[0.0], np.cumsum(rates * np.diff(times))])
    return np.interp(at, times, cum)


def timeseries(name: str, times: Sequence[float], total: Sequence[float],
               planes: Sequence[np.ndarray], bad_evs: Sequence[float], *, bin_ps: int,
               end_ps: float, plane_count: int) -> pd.DataFrame:
    """Rows ``time_us, transport, metric, value`` for every bin up to ``end_ps``."""
    t = np.asarray(times, dtype=float)
    nbins = max(1, int(-(-end_ps // bin_ps)))
    starts = np.arange(nbins, dtype=float) * bin_ps
    stops = np.minimum(starts + bin_ps, end_ps)
    width = np.where(stops > starts, stops - starts, bin_ps)
    series: dict[str, np.ndarray] = {}
    if len(t) > 1:
        series["goodput_gbps"] = (_integral_at(t, np.asarray(total), stops)
                                  - _integral_at(t, np.asarray(total), starts)) / width
        per_plane = np.asarray(planes).reshape(len(t) - 1, plane_count)
        for p in range(plane_count):
            series[f"goodput_gbps_p{p}"] = (_integral_at(t, per_plane[:, p], stops)
                                            - _integral_at(t, per_plane[:, p], starts)) / width
        peak = np.zeros(nbins)
        bad = np.asarray(bad_evs, dtype=float)
        first = np.floor(t[:-1] / bin_ps).astype(np.int64)
        last = np.ceil(t[1:] / bin_ps).astype(np.int64)
        for a, b, v in zip(first.tolist(), last.tolist(), bad.tolist(), strict=True):
            if v:
                peak[a:max(b, a + 1)] = np.maximum(peak[a:max(b, a + 1)], v)
        series["assumed_bad_evs"] = np.round(peak)
    else:
        series["goodput_gbps"] = np.zeros(nbins)
        for p in range(plane_count):
            series[f"goodput_gbps_p{p}"] = np.zeros(nbins)
        series["assumed_bad_evs"] = np.zeros(nbins)
    time_us = starts / PS_PER_US
    metrics = list(series)
    frame = pd.DataFrame({
        "time_us": np.repeat(time_us, len(metrics)),
        "transport": name,
        "metric": np.tile(metrics, nbins),
        "value": np.stack([series[m] for m in metrics], axis=1).ravel(),
    })
    return frame


def events(name: str, rows: Sequence[tuple[float, str, str, dict[str, Any]]]) -> pd.DataFrame:
    """Event rows ``time_us, transport, kind, target, detail`` sorted by time (stable)."""
    ordered = sorted(rows, key=lambda r: r[0])
    frame = pd.DataFrame(
        [(r[0] / PS_PER_US, r[1], r[2], json.dumps(r[3], sort_keys=True, default=str))
         for r in ordered], columns=["time_us", "kind", "target", "detail"])
    frame.insert(1, "transport", name)
    return frame
