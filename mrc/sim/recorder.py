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
    """Bins counters for one transport. ``bin_ps`` is the width of every bin.

    Optional series (only in the table when used): ``paused_ports``, the most ports whose
    lossless egress PFC held paused at once during the bin (a gauge of exact changes, like
    ``assumed_bad_evs``); ``max_queue_bytes``, the deepest data queue of any switch port at
    the bin's end; ``flow_gbps:<label>``, each connection's goodput (see ``sample``).
    """

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
        self.pfc = False  # a PFC fabric: the paused_ports series is part of the table
        self._paused_now = 0
        self._paused_changes: list[tuple[int, int]] = []
        #: sampled at bin ends: metric -> per-bin value (the last sample of the bin)
        self.samples: dict[str, _Series] = {}

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

    def paused_ports_changed(self, now: int, delta: int) -> None:
        """A port's lossless egress was paused (+1) or resumed (-1) (``Network.pause_hook``)."""
        self._paused_now += delta
        self._paused_changes.append((now, self._paused_now))

    def sample(self, metric: str, now: int, value: int) -> None:
        """A value read at ``now`` (a bin's end): it becomes that bin's value of ``metric``."""
        series = self.samples.get(metric)
        if series is None:
            series = self.samples[metric] = _Series()
        index = (now - 1) // self.bin_ps if now > 0 else 0
        values = series.values
        if index >= len(values):
            values.extend([0] * (index + 1 - len(values)))
        values[index] = value

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
        paused_iter = iter(self._paused_changes)
        paused_next = next(paused_iter, None)
        paused = 0
        flows = sorted(m for m in self.samples if m.startswith("flow_bytes:"))
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
            if self.pfc:
                most = paused
                while paused_next is not None and paused_next[0] < start + self.bin_ps:
                    paused = paused_next[1]
                    most = max(most, paused)
                    paused_next = next(paused_iter, None)
                rows.append((t_us, transport, "paused_ports", float(most)))
            queue = self.samples.get("max_queue_bytes")
            if queue is not None:
                rows.append((t_us, transport, "max_queue_bytes", float(queue.get(i))))
            for metric in flows:  # cumulative bytes at bin ends -> goodput per bin
                series = self.samples[metric]
                done = series.get(i) if i < len(series.values) else (
                    series.values[-1] if series.values else 0)
                before = 0 if i == 0 else (series.get(i - 1) if i - 1 < len(series.values)
                                           else (series.values[-1] if series.values else 0))
                rows.append((t_us, transport, "flow_gbps:" + metric[len("flow_bytes:"):],
                             (done - before) * 8 / width_s / 1e9))
        return pd.DataFrame(rows, columns=["time_us", "transport", "metric", "value"])
