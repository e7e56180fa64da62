"""Per-bin measurements of one transport's run: goodput (total and per plane) and the
counters a lab plots next to it.

Goodput is *unique* payload bytes placed in receivers' memory (duplicates from
retransmission never count), binned at the time of placement. Everything is integer
bytes/packets per bin; rates are computed only when the table is produced.
"""

from __future__ import annotations

import pandas as pd

from mrc.units import PS_PER_US


class _Series:
    """A growable list of per-bin integers."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[int] = []

    def add(self, index: int, amount: int) -> None:
        values = self.values
        if index >= len(values):
            values.extend([0] * (index + 1 - len(values)))
        values[index] += amount

    def get(self, index: int) -> int:
        return self.values[index] if index < len(self.values) else 0


class Recorder:
    """Bins counters for one transport. ``bin_ps`` is the width of every bin."""

    COUNTERS = ("retransmissions", "trims", "drops", "probes", "cnps")

    def __init__(self, planes: int, bin_ps: int) -> None:
        if bin_ps <= 0:
            raise ValueError("bin_ps must be positive")
        self.planes = planes
        self.bin_ps = bin_ps
        self.goodput = _Series()
        self.goodput_plane = [_Series() for _ in range(planes)]
        self.counters = {name: _Series() for name in self.COUNTERS}
        self.bytes_delivered = 0
        #: DATA packets that placed new bytes (the benchmark's unit of work)
        self.packets_delivered = 0
        # assumed-bad EVs is a gauge: remember (time, value) changes, sample per bin later
        self._bad_now = 0
        self._bad_changes: list[tuple[int, int]] = []

    def placed(self, now: int, plane: int, nbytes: int) -> None:
        """``nbytes`` new payload bytes placed at ``now`` by a packet that came on ``plane``
        (once per delivered DATA packet: the two series adds are written out)."""
        index = now // self.bin_ps
        total = self.goodput.values
        if index >= len(total):
            total.extend([0] * (index + 1 - len(total)))
        total[index] += nbytes
        per_plane = self.goodput_plane[plane].values
        if index >= len(per_plane):
            per_plane.extend([0] * (index + 1 - len(per_plane)))
        per_plane[index] += nbytes
        self.bytes_delivered += nbytes
        self.packets_delivered += 1

    def count(self, name: str, now: int, amount: int = 1) -> None:
        self.counters[name].add(now // self.bin_ps, amount)

    def bad_evs_changed(self, now: int, delta: int) -> None:
        self._bad_now += delta
        self._bad_changes.append((now, self._bad_now))

    def timeseries(self, transport: str, end_ps: int) -> pd.DataFrame:
        """Tidy rows ``time_us, transport, metric, value`` for every bin up to ``end_ps``.

        A bin that ends after ``end_ps`` is scaled to its covered part, so the last partial
        bin does not read as a dip.
        """
        nbins = max(1, -(-end_ps // self.bin_ps))
        bin_s = self.bin_ps / 1e12
        rows: list[tuple[float, str, str, float]] = []
        change_iter = iter(self._bad_changes)
        pending = next(change_iter, None)
        bad = 0
        for i in range(nbins):
            start = i * self.bin_ps
            width_s = min(self.bin_ps, end_ps - start) / 1e12 if end_ps > start else bin_s
            t_us = start / PS_PER_US
            rows.append((t_us, transport, "goodput_gbps", self.goodput.get(i) * 8 / width_s / 1e9))
            for p, series in enumerate(self.goodput_plane):
                rows.append((t_us, transport, f"goodput_gbps_p{p}",
                             series.get(i) * 8 / width_s / 1e9))
            for name, series in self.counters.items():
                rows.append((t_us, transport, name, float(series.get(i))))
            # gauge: the largest number of assumed-bad EVs seen during the bin
            peak = bad
            while pending is not None and pending[0] < start + self.bin_ps:
                bad = pending[1]
                peak = max(peak, bad)
                pending = next(change_iter, None)
            rows.append((t_us, transport, "assumed_bad_evs", float(peak)))
        return pd.DataFrame(rows, columns=["time_us", "transport", "metric", "value"])
