"""A host as the fabric sees it: one NIC port per plane, and delivery to its agent.

The agent (:class:`mrc.sim.element.HostAgent`: the NIC driver of the transports,
:class:`mrc.sim.nic.Nic`, or a traffic source) fills the ports: a ``NicPort`` pulls the next
data packet from it each time its wire goes idle, so line-rate pacing is the port's job, not
the agent's. A pull only hands a packet back: the agent never calls into the port meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.nic.driver import NicDriver
from mrc.packet import Packet
from mrc.sim.engine import Handler, Simulator
from mrc.sim.ports import OutPort
from topology import routed, usid

if TYPE_CHECKING:
    from mrc.sim.element import Fabric, HostAgent
    from mrc.sim.switch import Switch

#: the carrier bits of a destination, in the halves a packet keeps it as (one that reached
#: its host has consumed every uSID: they are all zero)
_CARRIER_HI = cython.declare(cython.ulonglong, usid.CARRIER_MASK >> 64)
_CARRIER_LO = cython.declare(cython.ulonglong, usid.CARRIER_MASK & ((1 << 64) - 1))
#: a routed destination (RC, topology.routed) arrives unchanged: its top 24 bits and the IID
_ROUTED_TOP = cython.declare(cython.ulonglong, routed.ROUTED_BASE >> 8)
_IID_MARK = cython.declare(cython.ulonglong, usid.HOST_IID_MARK)


@cython.cclass
class Host:
    """A host (NIC) with one port per plane. It delivers what arrives to its agent and lets
    the agent fill idle ports (``HostAgent.pull``)."""

    # What a delivery reads first, in the C struct's first cache line; the rest after.
    index: cython.longlong
    _rx_nic: cython.bint  # arrivals go to ``nic.on_receive`` (not stalled)
    #: the agent when it is a NIC driver (the transports' NIC): the ports and this host
    #: call it directly (a C call when compiled) instead of through a bound method
    nic: NicDriver | None
    _on_receive: Callable[[int, Packet], None] | None
    rx_packets: cython.longlong
    rx_bytes: cython.longlong
    sim: Simulator
    name: Any  # str
    net: Fabric
    ports: list[NicPort]  # by plane
    agent: HostAgent | None
    drops: dict[str, int]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, net: Fabric, index: int, name: str) -> None:
        self.name = name
        self.net = net
        self.sim = net.sim
        self.index = index
        self.ports = []
        self.agent = None
        self.nic = None
        self._on_receive = None
        self._rx_nic = False
        self.rx_packets = 0
        self.rx_bytes = 0
        self.drops = {}

    def __repr__(self) -> str:
        return f"<Host {self.name}>"

    def attach(self, agent: HostAgent) -> None:
        """Give the NIC to ``agent``; call ``kick_all`` (or let the agent do it) to start."""
        self.agent = agent
        self._on_receive = agent.on_receive
        self.nic = agent if isinstance(agent, NicDriver) else None
        self._rx_nic = self.nic is not None

    @cython.ccall
    @cython.annotation_typing(True)
    def send_control(self, pkt: Packet) -> None:
        """Send on port ``pkt.plane``'s priority queue; dropped (and counted) if it is down."""
        self.ports[pkt.plane].send(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def kick(self, plane: cython.longlong) -> None:
        """The agent has something for ``plane``: an idle port pulls now."""
        self.ports[plane].kick()

    def kick_all(self) -> None:
        for port in self.ports:
            port.kick()

    def set_rx_stalled(self, stalled: bool) -> None:
        """A stuck host: its NIC stops draining the receive queue, so what arrives is lost
        (on a PFC fabric the T0's port to it holds its lossless class and the NIC pauses the
        T0 instead: ``mrc.sim.pfc.PfcPort.set_rx_stall``)."""
        agent = self.agent
        if stalled:
            self._on_receive = self._drop_stalled
        else:
            self._on_receive = agent.on_receive if agent is not None else None
        self._rx_nic = not stalled and self.nic is not None

    def _drop_stalled(self, now: int, pkt: Packet) -> None:
        self.drops["rx_stalled"] = self.drops.get("rx_stalled", 0) + 1
        if self.net.observer is not None:
            self.net.observer(now, self.name, pkt, "rx_stalled")

    @cython.ccall
    @cython.annotation_typing(True)
    def receive(self, pkt: Packet) -> None:
        if ((pkt.da_hi & _CARRIER_HI or pkt.da_lo & _CARRIER_LO)
                and not (pkt.da_hi >> 40 == _ROUTED_TOP
                         and pkt.da_lo == _IID_MARK | self.index)) or pkt.dst != self.index:
            self.drops["misdelivered"] = self.drops.get("misdelivered", 0) + 1
            if self.net.observer is not None:
                self.net.observer(self.net.sim.now, self.name, pkt, "misdelivered")
            return
        self.rx_packets += 1
        self.rx_bytes += pkt.size
        if self._rx_nic:
            self.nic.on_receive(self.sim.now, pkt)  # type: ignore[union-attr]
        elif self._on_receive is not None:
            self._on_receive(self.sim.now, pkt)

    def stats(self) -> dict[str, object]:
        return {"host": self.name, "rx_packets": self.rx_packets, "rx_bytes": self.rx_bytes,
                "tx_packets": sum(p.tx_packets for p in self.ports),
                "drop_misdelivered": self.drops.get("misdelivered", 0),
                "ports_up": sum(p.up for p in self.ports)}


@cython.cclass
class NicPort(OutPort):
    """A host's port on one plane (host -> T0). Data is pulled from the host's agent each time
    the wire goes idle, so line-rate pacing is the port's job; control packets queue on the
    priority queue (unbounded: the NIC's memory is the transport's to manage) and go first.

    Unlike switch ports it keeps a transmit-done event per packet: the agent must be asked at
    the moment the wire frees up, with its state at that moment."""

    _tx_done_cb: Callable[[int], None]
    host: Host
    #: the priority PFC has paused on this port (-1: none; see mrc.sim.pfc): the NIC
    #: driver does not poll QPs of that priority
    paused_priority: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, net: Fabric, name: str, host: Host, dst: Switch, plane: int, *,
                 far_latency_ps: int) -> None:
        super().__init__(net, name, host, dst, plane, far_latency_ps=far_latency_ps)
        self.host = host
        self.header_limit = 1 << 62
        # the transmit-done callback: compiled, a Handler the engine calls in C (as the
        # port's arrivals, see OutPort._arrive); in pure Python the bound method
        self._tx_done_cb = _TxDone(self) if cython.compiled else self._tx_done
        self.paused_priority = -1

    @cython.ccall
    @cython.annotation_typing(True)
    def send(self, pkt: Packet) -> None:
        """Queue a control packet; transmits at once when the port is idle."""
        if not self.up:
            self._drop(pkt, "down")
            return
        self._hqb += pkt.size
        if self._hqb > self.peak_hqbytes:
            self.peak_hqbytes = self._hqb
        self.hq.append(pkt)
        if not self._pending:
            self._next(self.sim.now)

    @cython.ccall
    @cython.annotation_typing(True)
    def kick(self) -> None:
        """Pull now if the port is idle and up."""
        if self.up and not self._pending:
            self._next(self.sim.now)

    @cython.ccall
    @cython.annotation_typing(True)
    def _drain(self, now: cython.longlong) -> None:
        """Nothing to catch up: transmit-done events start every packet on time."""

    @cython.ccall
    @cython.annotation_typing(True)
    def backlog(self) -> tuple:  # tuple[int, int, int, int]
        return 0, 0, self._hqb, len(self.hq)

    @cython.ccall
    @cython.annotation_typing(True)
    def _tx_done(self, epoch: cython.longlong) -> None:
        if epoch == self.epoch:
            self._next(self.busy_until)

    @cython.ccall
    @cython.annotation_typing(True)
    def _next(self, now: cython.longlong) -> None:
        """Put the next packet on the wire (``_transmit``): control first, else whatever the
        agent gives; and be told when the wire is free again."""
        pkt: Packet | None
        if self._hqb:  # (the byte count says whether control waits: no deque test)
            pkt = self.hq.popleft()
            self._hqb -= pkt.size
        else:
            host: Host = self.host
            nic: NicDriver | None = host.nic
            if nic is not None:
                pkt = nic.pull(now, self.plane, self.paused_priority)
            else:
                agent = host.agent
                pkt = agent.pull(now, self.plane) if agent is not None else None
            if pkt is None:
                self._pending = False
                return
        self._pending = True
        end: cython.longlong = self._transmit(pkt, now)
        self.busy_until = end
        self.sim.schedule(end, self._tx_done_cb, self.epoch)

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def set_down(self) -> cython.longlong:
        lost = OutPort.set_down(self)  # (explicit: the compiled build has no super() here)
        self._notify(False)
        return lost

    @cython.ccall
    @cython.annotation_typing(True)
    def set_up(self) -> None:
        was_up = self.up
        OutPort.set_up(self)
        if not was_up:
            self._notify(True)
            self.kick()

    @cython.ccall
    @cython.annotation_typing(True)
    def set_rate_fraction(self, fraction: Any) -> None:  # (a float)
        OutPort.set_rate_fraction(self, fraction)
        notify = getattr(self.host.agent, "on_port_rate", None)
        if notify is not None:
            notify(self.sim.now, self.plane, self.bps)

    @cython.ccall
    @cython.annotation_typing(True)
    def drop_unsent(self, pkt: Packet) -> None:
        """Count a packet the host put on this port while its link was down."""
        self._drop(pkt, "down")

    def _notify(self, up: bool) -> None:
        notify = getattr(self.host.agent, "on_port_state", None)
        if notify is not None:
            notify(self.sim.now, self.plane, up)


@cython.cclass
class _TxDone(Handler):
    """``NicPort._tx_done`` as an event callback the compiled engine calls in C."""

    port: NicPort
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, port: NicPort) -> None:
        self.port = port

    @cython.cfunc
    @cython.annotation_typing(True)
    def fire(self, epoch: object) -> cython.void:
        self.port._tx_done(epoch)
