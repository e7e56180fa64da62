"""Several transports on one simulated fabric at once (a lab's ``[run] mixed = true``).

By default a lab runs each transport on its own copy of the fabric, one after the other, so
their numbers compare like for like. A mixed run puts them on the same fabric at the same
time, each on its own traffic class (MRC best effort with trimming, RC on the lossless
priority when the fabric runs PFC), so what one does to the other shows: RC's pauses
stopping MRC's lossless neighbours does not happen (MRC is not paused), MRC's best-effort
packets and RC's lossless ones share the wire by round robin and share nothing in the buffer
(the static per-queue model of :mod:`mrc.sim.pfc`).

:class:`MixedStack` is one :class:`~mrc.stack.stack.SimStack` with a recorder per transport:
every QP is registered under its transport, and what is counted per QP (goodput,
retransmissions, probes, CNPs, trims and drops of its packets) goes to its transport's
recorder; fabric-wide series (paused ports, queue depth) go to every transport's.
:meth:`MixedStack.view` gives each transport's workload driver a stack of its own to drive:
it opens connections under that transport, and its ``sim.stop()`` (a finite job finished or
failed) stops the simulator only once every transport's job has.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from mrc.sim.routing import RoutingConfig
from mrc.stack.recorder import DROP_SERIES, Recorder
from mrc.stack.stack import Connection, SimStack
from mrc.transport.base import QueuePair, TransportEvent
from mrc.units import PS_PER_US
from topology.spec import FabricSpec


class MixedStack(SimStack):
    """One fabric, several transports at once; ``view(name)`` is one transport's share."""

    def __init__(self, spec: FabricSpec, seed: int, bin_ps: int, names: list[str], *,
                 routing: RoutingConfig | None = None) -> None:
        super().__init__(spec, seed, bin_ps, "mixed", routing=routing)
        self.names = list(names)
        self.recorders = {name: Recorder(spec.planes, bin_ps) for name in names}
        for rec in self.recorders.values():
            rec.pfc = spec.pfc
        self._fabric_recorder = self.recorder
        self._transport_of: dict[int, str] = {}  # QPN -> transport
        self._row_transport: list[str] = []  # transport of each event row, in row order
        self._stopped: set[str] = set()
        self.opening_transport: str | None = None

    # ----------------------------------------------------------------- views
    def view(self, name: str) -> TransportView:
        if name not in self.recorders:
            raise ValueError(f"unknown transport {name!r}; this run has {self.names}")
        return TransportView(self, name)

    def open_as(self, name: str, kind: str, src: int, dst: int,
                params: dict[str, Any] | None = None) -> Connection:
        self.opening_transport = name
        try:
            return self.open(kind, src, dst, params)
        finally:
            self.opening_transport = None

    def stop_for(self, name: str) -> None:
        """A transport's job is done: stop once every transport's is."""
        self._stopped.add(name)
        if self._stopped >= set(self.names):
            self.sim.stop()

    # ----------------------------------------------------------------- routing
    def register(self, conn: Connection, qp: Any, planes: Any, host: int | None = None) -> None:
        super().register(conn, qp, planes, host)
        self._transport_of[qp.qpn] = conn.transport

    def _recorder_of_qp(self, conn: Connection) -> Recorder:
        return self.recorders[conn.transport]

    def _recorder_of_qpn(self, qpn: int) -> Recorder | None:
        name = self._transport_of.get(qpn)
        return None if name is None else self.recorders[name]

    def _recorders_of(self, conn: Connection) -> Recorder:
        return self.recorders[conn.transport]

    def _all_recorders(self) -> list[Recorder]:
        return list(self.recorders.values())

    def _paused_ports(self, now: int, delta: int) -> None:
        for rec in self.recorders.values():
            rec.paused_ports_changed(now, delta)

    def _observe(self, now: int, where: str, pkt: Any, event: str) -> None:
        rec = self._recorder_of_qpn(getattr(pkt, "qpn", -1))
        if rec is None:
            return  # not a QP's packet (a PFC frame)
        self.recorder = rec
        try:
            super()._observe(now, where, pkt, event)
        finally:
            self.recorder = self._fabric_recorder

    def _on_qp_event(self, event: TransportEvent, qp: QueuePair) -> None:
        name = self._transport_of.get(qp.qpn, self.names[0])
        self.recorder = self.recorders[name]
        try:
            super()._on_qp_event(event, qp)
        finally:
            self.recorder = self._fabric_recorder
        self._tag_rows(name)

    def note_event(self, now_ps: int, kind: str, target: str, **detail: Any) -> None:
        self.note_event_as(None, now_ps, kind, target, **detail)

    def note_event_as(self, name: str | None, now_ps: int, kind: str, target: str,
                      **detail: Any) -> None:
        """A row for one transport (``None``: the fabric's, e.g. a fault: every transport's)."""
        super().note_event(now_ps, kind, target, **detail)
        self._tag_rows(name or "*")

    def _tag_rows(self, name: str) -> None:
        """Say whose the rows added since the last tagging are (a QP event's handler may
        add rows of its own transport before the event's row is tagged)."""
        self._row_transport.extend([name] * (len(self._rows) - len(self._row_transport)))

    # ----------------------------------------------------------------- results
    def events_of(self, name: str) -> pd.DataFrame:
        rows = [row for row, who in zip(self._rows, self._row_transport, strict=True)
                if who in (name, "*")]
        rows.sort(key=lambda r: r[0])
        frame = pd.DataFrame(rows, columns=["time_us", "kind", "target", "detail"])
        frame.insert(1, "transport", name)
        return frame

    def timeseries_of(self, name: str, end_ps: int | None = None) -> pd.DataFrame:
        return self.recorders[name].timeseries(name, self.sim.now if end_ps is None else end_ps)

    def totals_of(self, name: str) -> dict[str, Any]:
        rec = self.recorders[name]
        everything = self.connections
        self.connections = [c for c in everything if c.transport == name]
        self.recorder = rec
        try:
            out = super().totals()
        finally:
            self.connections = everything
            self.recorder = self._fabric_recorder
        # what the fabric did to this transport's packets (trims and drops are per packet)
        out["trimmed_packets"] = sum(rec.counters["trims"].values)
        out["dropped_packets"] = sum(rec.total(series) for series in DROP_SERIES)
        out["dropped_by_kind"] = {series.removeprefix("drops_"): rec.total(series)
                                  for series in DROP_SERIES}
        return out


class _ViewClock:
    """The simulator as one transport's driver sees it: ``stop`` means "my job is done"."""

    def __init__(self, stack: MixedStack, name: str) -> None:
        self._stack = stack
        self._name = name

    @property
    def now(self) -> int:
        return self._stack.sim.now

    def at(self, time_ps: int, fn: Any, arg: Any = None) -> None:
        self._stack.sim.at(time_ps, fn, arg)

    def after(self, delay_ps: int, fn: Any, arg: Any = None) -> None:
        self._stack.sim.after(delay_ps, fn, arg)

    def stop(self) -> None:
        self._stack.stop_for(self._name)

    def run(self, until_ps: int | None = None) -> int:
        return self._stack.sim.run(until_ps)


class TransportView:
    """One transport's share of a :class:`MixedStack`, with the stack API a workload driver
    and the labs runner use (``sim``, ``open``, ``note_event``, ``timeseries``, ``events``,
    ``totals``, ``goodput_ceiling_gbps``)."""

    def __init__(self, stack: MixedStack, name: str) -> None:
        self.stack = stack
        self.name = name
        self.sim = _ViewClock(stack, name)
        self.spec = stack.spec
        self.net = stack.net

    def open(self, kind: str, src: int, dst: int, params: dict[str, Any] | None = None
             ) -> Connection:
        return self.stack.open_as(self.name, kind, src, dst, params)

    def note_event(self, now_ps: int, kind: str, target: str, **detail: Any) -> None:
        self.stack.note_event_as(self.name, now_ps, kind, target, **detail)

    def timeseries(self, end_ps: int | None = None) -> pd.DataFrame:
        return self.stack.timeseries_of(self.name, end_ps)

    def events(self) -> pd.DataFrame:
        return self.stack.events_of(self.name)

    def totals(self) -> dict[str, Any]:
        return self.stack.totals_of(self.name)

    def goodput_ceiling_gbps(self, ports: int | None = None) -> float:
        return self.stack.goodput_ceiling_gbps(ports)

    @property
    def recorder(self) -> Recorder:
        return self.stack.recorders[self.name]

    def __repr__(self) -> str:
        return f"<TransportView {self.name} at {self.sim.now / PS_PER_US:g} us>"
