"""Per-bin measurements of one transport's run: goodput (total and per plane) and the
counters a lab plots next to it.

Goodput is *unique* payload bytes placed in receivers' memory (duplicates from
retransmission never count), binned at the time of placement. Everything is integer
bytes/packets per bin; rates are computed only when the table is produced.

Drops are split by what was lost, because the causes mean different things: ``drops_data``
(DATA packets: payload that must be sent again), ``drops_control`` (ACK/NACK) and
``drops_probe`` (MRC's PROBE and PROBE_REPLY: an MRC sender keeps probing the paths it
believes broken, so a dead plane costs it probes, not data). The network knows the packet's
kind where it drops it and reports it to the stack's observer, which calls :meth:`dropped`.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.nic.runtime import RecorderSink
from mrc.packet import ACK, CNP, DATA, NACK, PROBE, PROBE_REPLY
from mrc.transport.base import ASSUMED_BAD, DENIED
from mrc.units import PS_PER_US

if TYPE_CHECKING:
    import pandas as pd

#: The drop series, one per cause, and the packet kinds each counts.
DROP_SERIES = ("drops_data", "drops_control", "drops_probe")
_DROP_OF_KIND = {DATA: "drops_data", ACK: "drops_control", NACK: "drops_control", CNP: "drops_control",
                 PROBE: "drops_probe", PROBE_REPLY: "drops_probe"}
#: EV states whose EVs are counted per bin (a gauge each): out of use for the sender.
GAUGED_STATES = {ASSUMED_BAD: "assumed_bad_evs", DENIED: "denied_evs"}


def drop_series(kind: int | None) -> str:
    """The series a dropped packet of ``kind`` counts in (an unknown kind counts as data:
    a drop the lab cannot attribute is never hidden among probes)."""
    return _DROP_OF_KIND.get(kind, "drops_data") if kind is not None else "drops_data"


@cython.cclass
class _Series:
    """A growable list of per-bin integers."""

    values: list[int]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self) -> None:
        self.values = []

    def add(self, index: int, amount: int) -> None:
        values = self.values
        if index >= len(values):
            values.extend([0] * (index + 1 - len(values)))
        values[index] += amount

    def get(self, index: int) -> int:
        return self.values[index] if index < len(self.values) else 0


@cython.cclass
class Recorder(RecorderSink):  # (not final: it overrides the sink's C methods)
    """Bins counters for one transport. ``bin_ps`` is the width of every bin.

    Optional series (only in the table when used): ``paused_ports``, the most ports whose
    lossless egress PFC held paused at once during the bin (a gauge of exact changes, like
    ``assumed_bad_evs``); ``max_queue_bytes``, the deepest data queue of any switch port at
    the bin's end; ``flow_gbps:<label>``, each connection's goodput (see ``sample``).
    """

    COUNTERS = ("retransmissions", "trims", *DROP_SERIES, "probes", "cnps")

    planes: cython.longlong
    bin_ps: cython.longlong
    goodput: _Series
    goodput_plane: list[_Series]
    _bin: cython.longlong
    _bin_bytes: cython.longlong
    _bin_plane: cython.longlong[::1]
    counters: dict[str, _Series]
    bytes_delivered: cython.longlong
    packets_delivered: cython.longlong
    _gauge_now: dict[str, int]
    _gauge_changes: dict[str, list[tuple[int, int]]]
    pfc: cython.bint
    _paused_now: cython.longlong
    _paused_changes: list[tuple[int, int]]
    samples: dict[str, _Series]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, planes: int, bin_ps: int) -> None:
        if bin_ps <= 0:
            raise ValueError("bin_ps must be positive")
        self.planes = planes
        self.bin_ps = bin_ps
        self.goodput = _Series()
        self.goodput_plane = [_Series() for _ in range(planes)]
        # The bin ``placed`` adds to, summed in C integers (total and per plane) and added to
        # the two series once, when a placement falls in another bin or the series are read
        # (``_close_bin``): time only moves forward, so that is once per bin, where adding
        # to the series' Python ints costs two boxed read-modify-writes per packet.
        self._bin = 0
        self._bin_bytes = 0
        self._bin_plane = array("q", bytes(8 * planes))
        self.counters = {name: _Series() for name in self.COUNTERS}
        self.bytes_delivered = 0
        #: DATA packets that placed new bytes (the benchmark's unit of work)
        self.packets_delivered = 0
        # EVs per gauged state: remember (time, value) changes, sample per bin later
        self._gauge_now = {metric: 0 for metric in GAUGED_STATES.values()}
        self._gauge_changes = {metric: [] for metric in GAUGED_STATES.values()}
        self.pfc = False  # a PFC fabric: the paused_ports series is part of the table
        self._paused_now = 0
        self._paused_changes = []
        #: sampled at bin ends: metric -> per-bin value (the last sample of the bin)
        self.samples = {}

    @cython.ccall
    @cython.annotation_typing(True)
    def placed(self, now: cython.longlong, plane: cython.longlong,
               nbytes: cython.longlong) -> None:
        """``nbytes`` new payload bytes placed at ``now`` by a packet that came on ``plane``
        (once per delivered DATA packet)."""
        index: cython.longlong = now // self.bin_ps
        if index != self._bin:
            self._close_bin()
            self._bin = index
        self._bin_bytes += nbytes
        self._bin_plane[plane] += nbytes
        self.bytes_delivered += nbytes
        self.packets_delivered += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def _close_bin(self) -> None:
        """Add the open bin's sums to the goodput series (the bin may receive more later:
        a live host's clock may trail another's, and the series are read mid-run too)."""
        if not self._bin_bytes:
            return
        index: cython.longlong = self._bin
        self.goodput.add(index, self._bin_bytes)
        self._bin_bytes = 0
        plane: cython.Py_ssize_t
        for plane in range(self.planes):
            amount: cython.longlong = self._bin_plane[plane]
            if amount:
                self.goodput_plane[plane].add(index, amount)
                self._bin_plane[plane] = 0

    @cython.ccall
    @cython.annotation_typing(True)
    def count(self, name: Any, now: cython.longlong, amount: cython.longlong = 1) -> None:
        """Add ``amount`` to the counter ``name`` (a str; typed Any for the sink's C signature)."""
        self.counters[name].add(now // self.bin_ps, amount)

    def dropped(self, now: int, kind: int | None) -> None:
        """The fabric dropped a packet of ``kind`` (``mrc.packet.DATA``, ``ACK``...)."""
        self.counters[drop_series(kind)].add(now // self.bin_ps, 1)

    def total(self, name: str) -> int:
        """A counter summed over the whole run (every bin, also past the lab's end)."""
        return sum(self.counters[name].values)

    def ev_state_changed(self, now: int, old: object, new: object) -> None:
        """An EV moved from state ``old`` to ``new``: keeps the per-state gauges."""
        for state, metric in GAUGED_STATES.items():
            delta = (new == state) - (old == state)
            if delta:
                self._gauge_now[metric] += delta
                self._gauge_changes[metric].append((now, self._gauge_now[metric]))

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
        import pandas as pd  # (only here: the simulator itself never needs it)

        self._close_bin()
        nbins = max(1, -(-end_ps // self.bin_ps))
        bin_s = self.bin_ps / 1e12
        rows: list[tuple[float, str, str, float]] = []
        gauges = [_Gauge(metric, changes) for metric, changes in self._gauge_changes.items()]
        paused_gauge = _Gauge("paused_ports", self._paused_changes) if self.pfc else None
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
            for gauge in gauges:  # the largest number of EVs in the state during the bin
                rows.append((t_us, transport, gauge.metric,
                             float(gauge.peak_until(start + self.bin_ps))))
            if paused_gauge is not None:  # the most ports paused at once during the bin
                rows.append((t_us, transport, "paused_ports",
                             float(paused_gauge.peak_until(start + self.bin_ps))))
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


class _Gauge:
    """Walks one gauge's (time, value) changes bin by bin."""

    __slots__ = ("metric", "_changes", "_pending", "_value")

    def __init__(self, metric: str, changes: list[tuple[int, int]]) -> None:
        self.metric = metric
        self._changes = iter(changes)
        self._pending = next(self._changes, None)
        self._value = 0

    def peak_until(self, end_ps: int) -> int:
        """The largest value the gauge held from the previous bin's end to ``end_ps``."""
        peak = self._value
        while self._pending is not None and self._pending[0] < end_ps:
            self._value = self._pending[1]
            peak = max(peak, self._value)
            self._pending = next(self._changes, None)
        return peak
