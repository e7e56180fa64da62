"""The simulated fabric: the container every element points back to, and what they share.

The model is store-and-forward. A packet handed to an output port is serialized at the
port's rate (``(size + Ethernet overhead) * 8 / rate``, exact integer picoseconds), then
propagates for the link delay, then spends the far switch's latency before that switch forwards
it. Queueing happens only at output ports.

Why the code looks the way it does: a Python event costs far more than the arithmetic around it,
so a packet crossing a hop costs exactly one heap event, its arrival, congested or not (how:
:mod:`mrc.sim.ports`).

One room per element, each holding direct references to the others' state (no lookups
through the network on the per-packet path):

* :mod:`mrc.sim.ports`: ``OutPort``, one direction of a link: queues, trimming, ECN marking,
  serialization, lazy departures, loss and link faults.
* :mod:`mrc.sim.host`: ``Host`` and its ``NicPort`` per plane, which pulls data from the
  host's agent (:class:`mrc.sim.element.HostAgent`) whenever its wire goes idle.
* :mod:`mrc.sim.switch`: ``Switch``, uSID shift-and-forward from static tables.
* :mod:`mrc.sim.link`: ``Link``, both directions of a link and why it is held down.
* :mod:`mrc.sim.pfc`: on a fabric with PFC, the ports of the lossless class (ingress
  accounting, PAUSE frames, per-priority stop, watchdog) that replace the plain ones.
* :mod:`mrc.sim.element`: what they share (the drop reasons, the hook types, the
  ``HostAgent`` protocol) and ``Fabric``, all they know of the network that holds them.
* here: ``Network`` (lookup by name, statistics, hooks), the one module that names every
  element. :func:`mrc.sim.fabric.build_network` wires it all together.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mrc.sim.element import DROP_REASONS, Observer, PauseHook, Tap
from mrc.sim.link import Link
from topology import names

if TYPE_CHECKING:
    from mrc.sim.engine import Simulator
    from mrc.sim.host import Host, NicPort
    from mrc.sim.ports import OutPort
    from mrc.sim.switch import Switch
    from topology.spec import FabricSpec


class Network:
    """Container that every element points back to (as a :class:`mrc.sim.element.Fabric`):
    simulator, spec, hooks, fault log.

    :func:`mrc.sim.fabric.build_network` creates and fills it; the lookup and statistics
    helpers live here so that elements can share them.
    """

    def __init__(self, sim: Simulator, spec: FabricSpec) -> None:
        self.sim = sim
        self.spec = spec
        self.hosts: list[Host] = []
        self.switches: dict[str, Switch] = {}
        self.links: dict[str, Link[OutPort]] = {}
        #: Every output port by name (``a->b``), NIC ports included.
        self.ports: dict[str, OutPort] = {}
        #: NIC output ports by NIC port name (``h17.p3``).
        self.nic_ports: dict[str, NicPort] = {}
        #: ``t0[plane][i]`` and ``t1[plane][k]``: switches by position.
        self.t0: list[list[Switch]] = []
        self.t1: list[list[Switch]] = []
        #: What faults did, in order (``mrc.sim.faults.FaultRecord``), for the labs' logs.
        self.fault_log: list[object] = []
        #: Called on every drop, trim and ECN mark; None costs nothing on the hot path.
        self.observer: Observer | None = None
        #: Told when a port's lossless egress is paused or resumed (PFC fabrics only).
        self.pause_hook: PauseHook | None = None
        self._tap: Tap | None = None
        #: RC's routing control plane (``mrc.sim.routing.Routing``): ECMP groups and their
        #: repair; ``build_network`` installs it.
        self.routing: Any = None

    # ------------------------------------------------------------------ hooks
    @property
    def tap(self) -> Tap | None:
        return self._tap

    @tap.setter
    def tap(self, fn: Tap | None) -> None:
        """Install a capture hook on every port (each port keeps its own reference, so the
        hot path checks one attribute rather than walking to the network)."""
        self._tap = fn
        for port in self.ports.values():
            port.tap = fn

    # ------------------------------------------------------------------ lookup
    def element(self, name: str) -> Host | Switch | Link[OutPort] | OutPort:
        """Any element by name: host ``h17``, switch ``p3.t0.12``/``p3.t1.5``, NIC port
        ``h17.p3`` (its output port), link ``h17.p3--p3.t0.4``/``p3.t0.12--p3.t1.5`` (either
        end first), output port ``p3.t0.12->p3.t1.5``, or a selector such as ``h3.p2.t0``
        (see :mod:`topology.names`). Unknown names raise ``names.UnknownElementError``."""
        found = (self.switches.get(name) or self.links.get(name) or self.nic_ports.get(name)
                 or self.ports.get(name))
        if found is not None:
            return found
        element = names.resolve(self.spec, name)  # selectors, reversed links; or the reason
        if element.kind == names.HOST:
            return self.hosts[element.index]  # type: ignore[index]
        if element.kind == names.NIC_PORT:
            return self.nic_ports[element.name]
        if element.kind == names.LINK:
            return self.links[element.name]
        return self.switches[element.name]

    def host(self, index: int) -> Host:
        return self.hosts[index]

    def nic_port(self, host: int, plane: int) -> NicPort:
        return self.hosts[host].ports[plane]

    def link(self, name: str) -> Link[OutPort]:
        """A link by name (either end first, or a selector like ``h3.p2.uplink``)."""
        found = self.element(name)
        if not isinstance(found, Link):
            raise names.UnknownElementError(name, f"{found!r} is not a link")
        return found

    def kick_all(self) -> None:
        for host in self.hosts:
            host.kick_all()

    # ------------------------------------------------------------------ statistics
    def port_stats(self) -> list[dict[str, object]]:
        """One row per output port (a tidy table: feed it to pandas)."""
        return [port.stats() for port in self.ports.values()]

    def port_stats_frame(self):  # -> pandas.DataFrame (pandas imported lazily: not hot)
        import pandas as pd

        return pd.DataFrame(self.port_stats())

    def switch_stats(self) -> list[dict[str, object]]:
        return [sw.stats() for sw in self.switches.values()]

    def host_stats(self) -> list[dict[str, object]]:
        return [host.stats() for host in self.hosts]

    def totals(self) -> dict[str, int]:
        """Fabric-wide sums of the port, switch and host counters."""
        out: dict[str, int] = {"tx_packets": 0, "tx_bytes": 0, "delivered": 0, "trims": 0,
                               "ecn_marks": 0}
        for reason in DROP_REASONS:
            out[f"drop_{reason}"] = 0
        for port in self.ports.values():
            out["tx_packets"] += port.tx_packets
            out["tx_bytes"] += port.tx_bytes
            out["delivered"] += port.delivered
            out["trims"] += port.trims
            out["ecn_marks"] += port.ecn_marks
            for reason, count in port.drops.items():
                out[f"drop_{reason}"] += count
        for drops in [*(sw.drops for sw in self.switches.values()),
                      *(host.drops for host in self.hosts)]:
            for reason, count in drops.items():  # (a black hole's only when it struck)
                out[f"drop_{reason}"] = out.get(f"drop_{reason}", 0) + count
        out["drops"] = sum(out[f"drop_{reason}"] for reason in DROP_REASONS) + out.get(
            "drop_blackhole", 0)
        if self.spec.pfc:
            out.update(pfc_totals(self.ports.values()))
        return out


def pfc_totals(ports: Iterable[OutPort]) -> dict[str, int]:
    """Fabric-wide PFC counters: PAUSE frames sent and received, time ports spent paused
    (summed over ports, in ps), ports ever paused, watchdog storms."""
    out = {"pause_frames_sent": 0, "pause_frames_received": 0, "paused_ps": 0,
           "ports_paused": 0, "watchdog_storms": 0}
    for port in ports:
        row = getattr(port, "pfc_counters", None)
        if row is None:
            continue
        sent, received, paused_ps, storms = row()
        out["pause_frames_sent"] += sent
        out["pause_frames_received"] += received
        out["paused_ps"] += paused_ps
        out["ports_paused"] += received > 0
        out["watchdog_storms"] += storms
    return out
