"""The user-space SRv6 fabric: real encoded packets in, shift-and-forward, real packets out.

Hosts send each packet, encoded by ``mrc.wire``, as the payload of a UDP datagram to this
fabric. The fabric reads the outer IPv6 header of the bytes and moves the packet hop by hop
through **the simulator's own fabric** (``mrc.sim.network``, built by
``mrc.sim.fabric.build_network``): store-and-forward output ports with a FIFO data queue,
trimming at buffer admission onto a strict-priority header queue, ECN marking above a
threshold, drops when even the header queue is full; at each switch the active uSID is looked
up in that switch's static table (``topology.tables``) and the carrier is shifted. A packet
whose uSIDs lead nowhere, or into a dead port, is lost there and counted there; nothing
routes around the carrier. There is one port model in the code base, so the live fabric
cannot drift from the simulator.

How bytes meet the model: each datagram becomes a :class:`~mrc.packet.Packet` carrying only
what a switch reads from the outer header (destination carrier, ECN, trim mark, size, plane,
inner destination), with the datagram itself in ``Packet.frame``. When the packet leaves the
fabric, what the switches did to the object (carrier shifted, CE mark, trim to the header) is
written back into the bytes, so what the host receives is what a real uN/uA switch would emit.
The inner packet, and with it the UDP checksum and ICRC, is never touched.

Why a discrete-event core inside a wall-clock server: queueing needs every port's events in
time order, and asyncio timers cost far more than heap pushes and fire only to the millisecond.
So :class:`FabricCore` runs the simulator's event engine in modelled picoseconds (no
sockets, testable by hand and comparable with the simulator to the picosecond), and
:class:`~mrc.live.fabric_server.FabricServer` feeds it datagrams stamped with the
:class:`~mrc.live.clock.Clock`, runs every event that is due, sends what reaches a host, and
arms one timer for the next event.

Faults are the simulator's primitives (``mrc.sim.faults``) applied to that same network. A
host link going down is seen by the host's NIC (loss of signal): ``nic_link`` tells the host
driver, as the simulator's NIC port tells its agent; a degraded host link paces the NIC too.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from mrc import wire
from mrc.live.udp import MAX_DATAGRAM
from mrc.packet import (
    ACK,
    CNP,
    DATA,
    ECN_CE,
    ECN_ECT0,
    FLAG_ROCE,
    PROBE,
    PROBE_REPLY,
    TRIM_DSCP,
    Packet,
    make_packet,
)
from mrc.sim import faults as sim_faults
from mrc.sim.capture import capture_ports
from mrc.sim.element import DROP_REASONS
from mrc.sim.engine import Simulator
from mrc.sim.fabric import build_network
from mrc.sim.host import Host, NicPort
from mrc.sim.link import Link
from mrc.sim.ports import OutPort
from mrc.sim.switch import Switch
from mrc.wire import roce
from topology import routed, usid
from topology.spec import FabricSpec

__all__ = ["DROP_REASONS", "REJECT_REASONS", "FabricCore", "write_outer"]

_OFF_BTH = wire.OFF_BTH
_OFF_DA = wire.OFF_OUTER_DST
#: the outer destination's two 64-bit halves, as ``Packet`` keeps them
_DA = struct.Struct(">QQ")
_OFF_HLIM = 7  # outer IPv6 hop limit
_BLOCK_PREFIX = (usid.BLOCK_BASE >> 8).to_bytes(3, "big")  # fc bb 00
#: the outer destination's first 3 bytes: the uSID block (MRC) or the routed one (RC, fd 52 00)
_PREFIXES = (_BLOCK_PREFIX, (routed.ROUTED_BASE >> 8).to_bytes(3, "big"))
#: What a switch makes of a BTH opcode: DATA queues as data, everything else rides the
#: header queue (unknown opcodes too: a switch does not parse them, it only classifies).
_KIND_OF_OPCODE = {wire.OP_RDMA_WRITE_ONLY: DATA, wire.OP_RDMA_WRITE_ONLY_IMM: DATA,
                   wire.OP_ACKNOWLEDGE: ACK, wire.OP_MRC_PROBE: PROBE,
                   wire.OP_MRC_PROBE_REPLY: PROBE_REPLY}
#: ...and of a RoCE RC packet's (RoCEv2's own: one IPv6 header, BTH at 48): every RDMA WRITE
#: opcode is DATA, an ACKNOWLEDGE queues as data too (FLAG_ROCE), a CNP rides the header queue
_ROCE_KIND_OF_OPCODE = {**{op: DATA for op in roce.WRITE_OPCODES}, wire.OP_ACKNOWLEDGE: ACK,
                        roce.OP_CNP: CNP}
_ROCE_OFF_BTH = 48
#: Why a datagram was refused at the door, before it was a packet in the fabric:
#: ``malformed``: not an IPv6-in-IPv6 MRC envelope; ``unknown_source``: the datagram came from
#: an address that is not a registered host; ``spoofed``: the inner source is another host;
#: ``no_plane``: the outer destination is not in a plane of this fabric; ``no_host``: the
#: destination host has no socket (yet, or any more).
REJECT_REASONS = ("malformed", "unknown_source", "spoofed", "no_plane", "no_host")

#: Fault primitives (``mrc.sim.faults`` names) the live fabric applies.
PRIMITIVES = ("link_down", "link_up", "switch_down", "switch_up", "nic_port_down",
              "nic_port_up", "set_loss", "degrade", "restore")

#: ``tap(time_ps, port_name, packet_bytes)``: a packet crossed a link (as the far end takes
#: it, outer header as it was on that wire).
Tap = Callable[[int, str, bytearray], None]
#: ``deliver(host, packet_bytes, time_ps)``: a packet reached host ``host``.
Deliver = Callable[[int, bytearray, int], None]
#: ``nic_link(host, plane, up, bps)``: what a host's NIC port sees of its link (loss of
#: signal, or the rate it now runs at).
NicLink = Callable[[int, int, bool, int], None]
#: ``observer(time_ps, event, pkt)``: ``"trim"``, ``"ecn"`` or a drop reason, where it
#: happened, and the packet (its ``kind`` says whether data, control or a probe was lost).
Observer = Callable[[int, str, Packet | None], None]


def write_outer(buf: bytearray, pkt: Packet) -> None:
    """Put what the switches did to ``pkt`` into its bytes: the (shifted) carrier, the hop
    limit, the CE mark, and the trim (cut to ``pkt.size`` and re-marked; a packet already that short is only
    re-marked, as a switch does)."""
    _DA.pack_into(buf, _OFF_DA, pkt.da_hi, pkt.da_lo)
    buf[_OFF_HLIM] = pkt.hop_limit
    if pkt.trimmed and not wire.is_trimmed(buf) and not wire.trim(buf, pkt.size):
        wire.set_outer_dscp(buf, TRIM_DSCP)
    if pkt.ecn == ECN_CE:
        wire.mark_ce(buf)


class _NicSide:
    """A host as the fabric's NIC ports see it (the ``HostAgent`` of ``mrc.sim.element``).

    The host paces its own ports (``mrc.live.host``); the DATA datagrams it sent wait here,
    in the NIC's memory, until the NIC port pulls them, exactly when the simulator's NIC would
    pull its transport (control packets take the port's priority queue instead). Arrivals are
    written back into their bytes and handed to the server."""

    __slots__ = ("core", "index", "queues", "queued_bytes")

    def __init__(self, core: FabricCore, index: int, planes: int) -> None:
        self.core = core
        self.index = index
        self.queues: list[deque[Packet]] = [deque() for _ in range(planes)]
        self.queued_bytes = [0] * planes

    def pull(self, now: int, plane: int) -> Packet | None:
        queue = self.queues[plane]
        if not queue:
            return None
        pkt = queue.popleft()
        self.queued_bytes[plane] -= pkt.size
        return pkt

    def on_receive(self, now: int, pkt: Packet) -> None:
        buf = pkt.frame
        assert buf is not None
        write_outer(buf, pkt)
        core = self.core
        core.delivered_datagrams += 1
        core.deliver(self.index, buf, now)

    def on_port_state(self, now: int, plane: int, up: bool) -> None:
        """Loss of signal: what waited in the NIC for this port is lost; the host is told."""
        if not up:
            queue = self.queues[plane]
            if queue:
                port = self.core.net.hosts[self.index].ports[plane]
                port.drops["link_down"] = port.drops.get("link_down", 0) + len(queue)
                queue.clear()
                self.queued_bytes[plane] = 0
        self.core._signal(self.index, plane, up)

    def on_port_rate(self, now: int, plane: int, bps: int) -> None:
        """A degraded (or restored) link: the host paces its NIC port at the new rate."""
        if self.core.net.hosts[self.index].ports[plane].up:
            self.core._signal(self.index, plane, True)


class FabricCore:
    """The fabric as a discrete-event system in modelled picoseconds, on packet bytes.

    Feed it with :meth:`inject` (a datagram from a host at time ``now``) and advance it with
    :meth:`run_until`; packets that reach a host go to ``deliver``. Nothing here touches a
    socket or a clock, so tests drive it by hand and compare it with the simulator. ``net`` is
    the simulator's network (``mrc.sim.network.Network``) on ``sim``'s event heap; ``switches``,
    ``links`` and ``ports`` are its element tables.
    """

    def __init__(self, spec: FabricSpec, *, seed: int = 0, deliver: Deliver | None = None,
                 nic_link: NicLink | None = None, nic_buffer_bytes: int = 16 << 20) -> None:
        self.spec = spec
        self.sim = Simulator(seed)
        self.net = build_network(self.sim, spec)
        self.net.observer = self._observe
        self.deliver: Deliver = deliver or (lambda host, buf, t: None)
        self.nic_link = nic_link
        self.observer: Observer | None = None
        self.nic_buffer_bytes = nic_buffer_bytes
        self.tap: Tap | None = None
        self._tap_ports: frozenset[str] | None = None  # None: every port
        self.switches: dict[str, Switch] = self.net.switches
        self.links: dict[str, Link] = self.net.links
        self.ports: dict[str, OutPort] = self.net.ports
        self.sides = [_NicSide(self, h, spec.planes) for h in range(spec.hosts)]
        #: ``_nic_ports[host][plane]``: the NIC port a host's datagrams of that plane enter.
        self._nic_ports: list[list[NicPort]] = [host.ports for host in self.net.hosts]
        for host, side in zip(self.net.hosts, self.sides, strict=True):
            host.attach(side)
        self.drops: dict[str, int] = {}  # datagrams refused at the door (REJECT_REASONS)
        self.rx_datagrams = 0
        self.delivered_datagrams = 0
        #: Datagrams entering each plane, split DATA / other (for per-plane checks).
        self.ingress_data = [0] * spec.planes
        self.ingress_control = [0] * spec.planes
        self._src_bytes = [usid.host_address(h).to_bytes(16, "big") for h in range(spec.hosts)]

    @property
    def now(self) -> int:
        """Modelled picoseconds (the simulator's clock)."""
        return self.sim.now

    @now.setter
    def now(self, value: int) -> None:
        self.sim.now = value

    # ------------------------------------------------------------------ traffic
    def inject(self, data: bytes | bytearray, src: int | None) -> bool:
        """A datagram from host ``src`` (None: an unknown sender) at ``self.now``.

        Only cheap structural checks, as a switch would do: an IPv6-in-IPv6 envelope of
        consistent length, a destination in one of our planes' blocks, and an inner source
        that is the sending host. Everything else is dropped and counted; returns True when
        the packet entered the fabric (its NIC port may still lose it, and counts that)."""
        self.rx_datagrams += 1
        if src is None:
            self._ingress_drop("unknown_source")
            return False
        if len(data) > MAX_DATAGRAM or not wire.outer_ok(data):
            self._ingress_drop("malformed")
            return False
        if data[24:27] not in _PREFIXES or data[27] >= self.spec.planes:
            self._ingress_drop("no_plane")
            return False
        rc = wire.is_roce(data)  # RoCE RC's own packet: its one header is the "outer" one
        if (data[8:24] if rc else data[48:64]) != self._src_bytes[src]:
            self._ingress_drop("spoofed")
            return False
        plane = data[27]
        buf = data if isinstance(data, bytearray) else bytearray(data)
        if rc:
            kind = _ROCE_KIND_OF_OPCODE.get(buf[_ROCE_OFF_BTH], ACK)
            flags = FLAG_ROCE if kind != CNP else 0  # (RC's ACKs queue as data)
        else:
            kind, flags = _KIND_OF_OPCODE.get(buf[_OFF_BTH], ACK), 0
        size = len(buf)
        da_hi, da_lo = _DA.unpack_from(buf, _OFF_DA)
        # (make_packet: compiled, a C call; Packet's keywords would be parsed per datagram)
        dst = self._carrier_host(da_hi, da_lo) if rc else wire.inner_hosts(buf)[1]
        pkt = make_packet(kind, src, dst, 0, 0, 0, 0, 0, 0, 0,
                          flags, 0, 0, 0, 0, 0, da_hi, da_lo, size, None, 0, plane)
        pkt.hop_limit = buf[_OFF_HLIM]
        ecn = (buf[1] >> 4) & 3
        if ecn != ECN_ECT0:
            pkt.ecn = ecn
        if (((buf[0] & 0x0F) << 2) | (buf[1] >> 6)) == TRIM_DSCP:  # (hosts never send one)
            pkt.trimmed = True
        pkt.frame = buf
        port = self._nic_ports[src][plane]
        if kind != DATA:
            self.ingress_control[plane] += 1
            port.send(pkt)  # the NIC's priority queue (a dead port counts the drop)
            return True
        self.ingress_data[plane] += 1
        if not port.up:
            port.drop_unsent(pkt)
            return True
        side = self.sides[src]
        queued = side.queued_bytes
        if queued[plane] + size > self.nic_buffer_bytes:
            port.drops["buffer"] = port.drops.get("buffer", 0) + 1
            self._observe(self.sim.now, port.name, pkt, "buffer")
            return True
        side.queues[plane].append(pkt)
        queued[plane] += size
        port.kick()
        return True

    def _carrier_host(self, da_hi: int, da_lo: int) -> int:
        """The host a RoCE packet goes to: a routed destination (:mod:`topology.routed`, RC
        on the routed fabric) names it in its interface ID; a uSID carrier ends at it (its
        last T0 and that T0's port: the one IPv6 header names no host, :mod:`mrc.wire.roce`)."""
        address = (da_hi << 64) | da_lo
        if routed.is_routed(address):
            return routed.parse(address)[2]
        usids = usid.carrier(address)
        t0 = next((u - usid.T0_BASE for u in reversed(usids)
                   if usid.T0_BASE <= u < usid.T1_BASE), 0)
        port = usids[-1] - usid.PORT_BASE if usids and usids[-1] >= usid.PORT_BASE else 0
        return t0 * self.spec.hosts_per_t0 + port

    def _ingress_drop(self, reason: str) -> None:
        # Not reported to the observer: these never were the transports' packets.
        self.drops[reason] = self.drops.get(reason, 0) + 1

    def run_until(self, now: int) -> int:
        """Process every event due at or before ``now`` (the engine's ``run_until``); returns
        how many ran."""
        return self.sim.run_until(now)

    def set_tap(self, tap: Tap | None, *, point: str = "delivered") -> None:
        """Capture packets as they cross links, at the ports ``point`` names
        (:func:`mrc.sim.capture.capture_ports`: ``delivered`` each datagram once as it
        reaches its host, ``sent`` once as it leaves its host, ``every_hop`` every link)."""
        self.tap = tap
        self._tap_ports = capture_ports(self.net, point)
        self.net.tap = self._on_tap if tap is not None else None

    def _on_tap(self, now: int, port: str, pkt: Packet) -> None:
        if self.tap is None or pkt.frame is None:
            return
        if self._tap_ports is not None and port not in self._tap_ports:
            return
        buf = bytearray(pkt.frame)  # the bytes as on that wire; the frame moves on unchanged
        write_outer(buf, pkt)
        self.tap(now, port, buf)

    def _observe(self, now: int, where: str, pkt: Packet | None, event: str) -> None:
        if self.observer is not None:
            self.observer(now, event, pkt)

    # ------------------------------------------------------------------ lookup
    def element(self, name: str) -> Host | Switch | Link | OutPort:
        """Any element by name or selector (``mrc.sim.network.Network.element``)."""
        return self.net.element(name)

    # ------------------------------------------------------------------ faults
    def _signal(self, host: int, plane: int, up: bool) -> None:
        if self.nic_link is not None:
            self.nic_link(host, plane, up, self.net.hosts[host].ports[plane].bps)

    def fault(self, primitive: str, target: str, **params: Any) -> dict[str, Any]:
        """Apply one ``mrc.sim.faults`` primitive now; returns what it did (its effect)."""
        if primitive not in PRIMITIVES:
            raise ValueError(f"the live fabric has no fault {primitive!r}")
        return dict(sim_faults.apply(self.net, primitive, target, **params).effect)

    @property
    def fault_log(self) -> list[dict[str, Any]]:
        """Every fault applied, in order, as flat records (time, action, target, params,
        effect)."""
        return [{"time_ps": r.time_ps, "action": r.action, "target": r.target, **r.params,
                 **r.effect} for r in self.net.fault_log
                if isinstance(r, sim_faults.FaultRecord)]

    def apply(self, action: str, target: str, params: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        """Run one fault now, by its primitive or fault-schedule name (``loss_start`` with
        ``probability``, ...: ``mrc.sim.faults.SCHEDULE_ACTIONS``); returns its effect."""
        if action in PRIMITIVES:
            return self.fault(action, target, **(params or {}))
        primitive, kwargs = sim_faults.primitive(action, params or {})
        return self.fault(primitive, target, **kwargs)

    def schedule(self, time_ps: int, action: str, target: str,
                 params: dict[str, Any] | None = None) -> None:
        """Apply a fault at modelled time ``time_ps`` (not before the fabric's now: the engine
        refuses the past), in order with the packets."""
        self.element(target)  # refuse unknown targets now, not mid-run
        self.sim.at(time_ps, self._fire, (action, target, params))

    def _fire(self, job: tuple[str, str, dict[str, Any] | None]) -> None:
        self.apply(*job)

    # ------------------------------------------------------------------ statistics
    def port_stats(self) -> list[dict[str, Any]]:
        return [dict(port.stats()) for port in self.ports.values()]

    def totals(self) -> dict[str, int]:
        """Fabric-wide counters: the network's (ports, switches, hosts) plus the door's."""
        out: dict[str, int] = {"rx_datagrams": self.rx_datagrams,
                               "delivered_datagrams": self.delivered_datagrams,
                               "events": self.sim.events_processed}
        out.update(self.net.totals())
        for reason in REJECT_REASONS:
            out[f"rejected_{reason}"] = self.drops.get(reason, 0)
        out["rejected"] = sum(self.drops.values())
        return out
