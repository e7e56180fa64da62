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
  host's agent (:class:`HostAgent`) whenever its wire goes idle.
* :mod:`mrc.sim.switch`: ``Switch``, uSID shift-and-forward from static tables.
* :mod:`mrc.sim.link`: ``Link``, both directions of a link and why it is held down.
* :mod:`mrc.sim.pfc`: on a fabric with PFC, the ports of the lossless class (ingress
  accounting, PAUSE frames, per-priority stop, watchdog) that replace the plain ones.
* here: ``Network`` (lookup by name, statistics, hooks), the drop reasons, the hook types and
  the ``HostAgent`` protocol. :func:`mrc.sim.fabric.build_network` wires it all together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from mrc.packet import Packet
from mrc.sim.link import Link
from topology import names

if TYPE_CHECKING:
    from mrc.sim.engine import Simulator
    from mrc.sim.host import Host, NicPort
    from mrc.sim.ports import OutPort
    from mrc.sim.switch import Switch
    from topology.spec import FabricSpec

#: Why a packet was dropped. ``buffer``: the data queue was full and trimming is off;
#: ``header_queue``: even the priority queue was full; ``down``: handed to a port that is down;
#: ``link_down``: queued at or on the wire of a port when it went down; ``loss``: random loss;
#: ``no_route``: a switch found no entry for the active uSID; ``misdelivered``: a host received
#: a packet whose carrier was not consumed or whose inner destination is another host.
#: PFC (:mod:`mrc.sim.pfc`): ``lossless_overflow``: a lossless packet found its ingress
#: headroom full (a bug of the headroom sizing: counted so a test can prove it never happens);
#: ``pfc_watchdog``: a lossless queue the PFC watchdog declared stormed dropped it;
#: ``rx_stalled``: a host whose NIC stopped draining its receive queue could not take it.
DROP_REASONS = ("buffer", "header_queue", "down", "link_down", "loss", "no_route",
                "misdelivered", "lossless_overflow", "pfc_watchdog", "rx_stalled")

#: ``tap(now, port_name, pkt)``: sees every packet that crossed a link, as the far element
#: takes it (``now`` = that moment, so calls come in global time order; the packet is as it was
#: on that wire: outer address, ECN and trim state not yet rewritten by the far switch).
Tap = Callable[[int, str, Packet], None]
#: ``observer(now, where, pkt, event)``: ``event`` is ``"trim"``, ``"ecn"`` or a drop reason;
#: ``where`` is a port, switch or host name.
Observer = Callable[[int, str, Packet, str], None]
#: ``pause_hook(now, delta)``: a port's lossless egress became paused (+1) or resumed (-1).
PauseHook = Callable[[int, int], None]


class HostAgent(Protocol):
    """What a host's NIC drives: the NIC glue of a transport, or a benchmark traffic source."""

    def pull(self, now: int, plane: int) -> Packet | None:
        """The port of ``plane`` is idle and has no control packet waiting: the next packet
        to put on that wire, or None (then call ``Host.kick`` when there is one). A pull only
        hands a packet back: it never sends or kicks on the host's ports."""
        ...

    def on_receive(self, now: int, pkt: Packet) -> None:
        """A packet from the fabric reached this host."""
        ...

    # Optional: ``on_port_state(now, plane, up)`` is called, when the agent defines it, as
    # the NIC port of ``plane`` loses or regains its link (a NIC sees loss of signal), and
    # ``on_port_rate(now, plane, bps)`` as that port's rate changes (a degraded link).


class Network:
    """Container that every element points back to: simulator, spec, hooks, fault log.

    :func:`mrc.sim.fabric.build_network` creates and fills it; the lookup and statistics
    helpers live here so that elements can share them.
    """

    def __init__(self, sim: Simulator, spec: FabricSpec) -> None:
        self.sim = sim
        self.spec = spec
        self.hosts: list[Host] = []
        self.switches: dict[str, Switch] = {}
        self.links: dict[str, Link] = {}
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
    def element(self, name: str) -> Host | Switch | Link | OutPort:
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

    def link(self, name: str) -> Link:
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
            for reason, count in drops.items():
                out[f"drop_{reason}"] += count
        out["drops"] = sum(out[f"drop_{reason}"] for reason in DROP_REASONS)
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
