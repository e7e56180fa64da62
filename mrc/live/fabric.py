"""The user-space SRv6 fabric: real encoded packets in, shift-and-forward, real packets out.

Hosts send each packet, encoded by ``mrc.wire``, as the payload of a UDP datagram to this
fabric. The fabric reads the outer IPv6 destination of the bytes, enters the sending host's NIC
link of the plane named by the uSID block, and moves the packet hop by hop exactly as the
simulator does (``mrc.sim.network``): store-and-forward output ports with a FIFO data queue,
trimming at buffer admission onto a strict-priority header queue, ECN marking above a
threshold, drops when even the header queue is full; at each switch the active uSID is looked
up in that switch's static table (``topology.tables``) and the carrier is shifted in place, so
what leaves is what a real uN/uA switch would emit. A packet whose uSIDs lead nowhere, or into
a dead port, is lost there and counted there; nothing routes around the carrier.

Why a discrete-event core inside a wall-clock server: queueing needs every port's events in
time order, and asyncio timers cost far more than heap pushes and fire only to the millisecond.
So :class:`FabricCore` is a small event engine in modelled picoseconds (no sockets, testable by
hand and comparable with the simulator to the picosecond), and :class:`FabricServer` feeds it
datagrams stamped with the :class:`~mrc.live.clock.Clock`, runs every event that is due, sends
what reaches a host, and arms one timer for the next event. Lateness of the wall clock never
changes modelled timestamps; it is measured and reported (``lag_*``).

Faults are the simulator's primitives with the same semantics (``mrc.sim.faults``): causes
hold a link down, a dead switch downs all its links, queued and on-wire packets are lost,
random loss per transmission, degraded rate for later packets. A host link going down is seen
by the host's NIC (loss of signal): ``nic_link`` tells the host driver, as in the simulator
a host under a dead T0 stops pulling on that plane; a degraded host link paces the NIC too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import random
import socket
from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from mrc import wire
from mrc.live.clock import Clock
from mrc.packet import ECN_CE, ECN_NOT_ECT, TRIM_DSCP
from topology import names, tables, usid
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

_PS_BITS = 8 * 1_000_000_000_000
_ETH = ETHERNET_OVERHEAD_BYTES
_DATA_OPS = (wire.OP_RDMA_WRITE_ONLY, wire.OP_RDMA_WRITE_ONLY_IMM)
_OFF_BTH = wire.OFF_BTH
_OFF_DA = wire.OFF_OUTER_DST
_OFF_ACTIVE = wire.OFF_ACTIVE_USID
_ZERO_CARRIER = bytes(12)
_BLOCK_PREFIX = (usid.BLOCK_BASE >> 8).to_bytes(3, "big")  # fc bb 00
#: Largest datagram accepted (an IPv6 packet cannot be longer without jumbograms).
MAX_DATAGRAM = 65_535
#: Datagrams read per wake-up beyond the first (then the loop gets its turn).
RX_BATCH = 64

#: Why the fabric lost a packet (the simulator's reasons, same meaning).
DROP_REASONS = ("buffer", "header_queue", "down", "link_down", "loss", "no_route",
                "misdelivered")
#: Why a datagram was refused at the door, before it was a packet in the fabric:
#: ``malformed``: not an IPv6-in-IPv6 MRC envelope; ``unknown_source``: the datagram came from
#: an address that is not a registered host; ``spoofed``: the inner source is another host;
#: ``no_plane``: the outer destination is not in a plane of this fabric; ``no_host``: the
#: destination host has no socket (yet, or any more).
REJECT_REASONS = ("malformed", "unknown_source", "spoofed", "no_plane", "no_host")

CAUSE_LINK = "link"
CAUSE_NIC = "nic"

#: ``tap(time_ps, port_name, packet_bytes)``: a packet starts crossing a link.
Tap = Callable[[int, str, bytearray], None]
#: ``deliver(host, packet_bytes, time_ps)``: a packet reached host ``host``.
Deliver = Callable[[int, bytearray, int], None]
#: ``nic_link(host, plane, up, bps)``: what a host's NIC port sees of its link (loss of
#: signal, or the rate it now runs at).
NicLink = Callable[[int, int, bool, int], None]
#: ``observer(time_ps, event)``: ``"trim"``, ``"ecn"`` or a drop reason, where it happened.
Observer = Callable[[int, str], None]


class FabricPort:
    """One direction of a link: output queues at the sender plus the wire to the far end.

    Semantics are those of ``mrc.sim.network.OutPort`` (keep them in step): an idle port
    starts serializing at once; otherwise a DATA packet is admitted to the FIFO data queue if
    it fits under the trim threshold (CE-marked when the queue already exceeds the ECN
    threshold), else trimmed onto the strict-priority header queue (or dropped with trimming
    off); trimmed packets and every non-DATA packet use the header queue. A NIC uplink
    (``nic=True``) never trims or marks: that queue is the host's memory.
    """

    __slots__ = (
        "core", "name", "link", "plane", "far_switch", "far_host", "nic", "nominal_bps",
        "bps", "_ppb", "delay_ps", "far_latency_ps", "_flight", "up", "epoch", "busy_until",
        "pending", "q", "hq", "qbytes", "hqbytes", "admit_limit", "trimming", "trim_size",
        "header_limit", "ecn_threshold", "loss_p", "tapped", "_special", "tx_packets",
        "tx_bytes", "delivered", "trims", "ecn_marks", "peak_qbytes", "peak_hqbytes", "drops",
        "_host_bytes", "_arrive_cb", "_tx_done_cb",
    )

    def __init__(self, core: FabricCore, name: str, plane: int, *, far_switch: Switch | None,
                 far_host: int | None, far_latency_ps: int, nic: bool = False) -> None:
        spec = core.spec
        self.core = core
        self.name = name
        self.link: FabricLink | None = None
        self.plane = plane
        self.far_switch = far_switch
        self.far_host = far_host
        self._host_bytes = b"" if far_host is None else far_host.to_bytes(4, "big")
        self.nic = nic
        self.nominal_bps = spec.link_bps
        self.bps = spec.link_bps
        self._ppb = 0
        self.delay_ps = spec.link_delay_ps
        self.far_latency_ps = far_latency_ps
        self._flight = self.delay_ps + far_latency_ps
        self.up = True
        self.epoch = 0
        self.busy_until = 0
        self.pending = False
        self.q: deque[bytearray] = deque()
        self.hq: deque[bytearray] = deque()
        self.qbytes = 0
        self.hqbytes = 0
        if nic:
            self.admit_limit = core.nic_buffer_bytes
            self.trimming = False
            self.header_limit = core.nic_buffer_bytes
            self.ecn_threshold = 1 << 62
        else:
            self.trimming = spec.trimming
            self.admit_limit = (int(spec.trim_threshold_bytes)  # type: ignore[arg-type]
                                if spec.trimming else spec.buffer_bytes)
            self.header_limit = spec.header_queue_bytes
            self.ecn_threshold = spec.ecn_threshold_bytes
        self.trim_size = spec.trim_size_bytes
        self.loss_p = 0.0
        self.tapped = False
        self._special = False
        self.tx_packets = 0
        self.tx_bytes = 0
        self.delivered = 0
        self.trims = 0
        self.ecn_marks = 0
        self.peak_qbytes = 0
        self.peak_hqbytes = 0
        self.drops: dict[str, int] = {}
        # bound once: the hot path pushes them on the heap for every packet and hop
        self._arrive_cb = self._arrive
        self._tx_done_cb = self._tx_done
        self._set_bps(spec.link_bps)

    def __repr__(self) -> str:
        return f"<FabricPort {self.name} {'up' if self.up else 'DOWN'} q={self.qbytes}B>"

    # ------------------------------------------------------------------ hot path
    def send(self, buf: bytearray) -> None:
        """Admit one packet at ``core.now``: transmit if idle, else queue, trim, mark or drop."""
        if not self.up:
            self._drop("down")
            return
        core = self.core
        now = core.now
        size = len(buf)
        if not self.pending and self.busy_until <= now:
            ppb = self._ppb
            end = now + ((size + _ETH) * ppb if ppb else self.serialization_ps(size))
            self.busy_until = end
            self.tx_packets += 1
            self.tx_bytes += size
            if self._special and self._on_wire(now, buf):
                return
            heappush(core.heap, (end + self._flight, core.seq(), self._arrive_cb,
                                 (buf, self.epoch)))
            return
        if buf[_OFF_BTH] in _DATA_OPS and not wire.is_trimmed(buf):
            qbytes = self.qbytes
            if qbytes + size <= self.admit_limit:
                if qbytes > self.ecn_threshold:
                    ecn = (buf[1] >> 4) & 3
                    if ecn != ECN_NOT_ECT and ecn != ECN_CE:
                        buf[1] |= 0x30
                        self.ecn_marks += 1
                        if core.observer is not None:
                            core.observer(now, "ecn")
                qbytes += size
                self.qbytes = qbytes
                if qbytes > self.peak_qbytes:
                    self.peak_qbytes = qbytes
                self.q.append(buf)
            elif self.trimming:
                if not wire.trim(buf, self.trim_size):
                    wire.set_outer_dscp(buf, TRIM_DSCP)  # already short: the re-mark alone
                self.trims += 1
                if core.observer is not None:
                    core.observer(now, "trim")
                if not self._enqueue_header(buf):
                    return
            else:
                self._drop("buffer")
                return
        elif not self._enqueue_header(buf):
            return
        if not self.pending:
            self.pending = True
            heappush(core.heap, (self.busy_until, core.seq(), self._tx_done_cb, self.epoch))

    def _tx_done(self, epoch: int) -> None:
        """The wire is free: start the next waiting packet (header queue first)."""
        if epoch != self.epoch:
            return
        hq = self.hq
        q = self.q
        if hq:
            buf = hq.popleft()
            size = len(buf)
            self.hqbytes -= size
        else:
            buf = q.popleft()
            size = len(buf)
            self.qbytes -= size
        now = self.busy_until
        end = now + ((size + _ETH) * self._ppb if self._ppb else self.serialization_ps(size))
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += size
        core = self.core
        if not (self._special and self._on_wire(now, buf)):
            heappush(core.heap, (end + self._flight, core.seq(), self._arrive_cb, (buf, epoch)))
        if hq or q:
            heappush(core.heap, (end, core.seq(), self._tx_done_cb, epoch))
        else:
            self.pending = False

    def _arrive(self, item: tuple[bytearray, int]) -> None:
        """The packet reached the far end: forward it (switch) or hand it over (host)."""
        buf, epoch = item
        if epoch != self.epoch:
            self._drop("link_down")  # it was on the wire when the port went down
            return
        self.delivered += 1
        sw = self.far_switch
        if sw is None:
            if buf[28:40] != _ZERO_CARRIER or buf[76:80] != self._host_bytes:
                self._drop("misdelivered")
                return
            core = self.core
            core.delivered_datagrams += 1
            core.deliver(self.far_host, buf, core.now)  # type: ignore[arg-type]
            return
        if buf[24:28] != sw.block_bytes:
            sw.no_route()
            return
        active = buf[_OFF_ACTIVE] << 8 | buf[_OFF_ACTIVE + 1]
        own = sw.usid
        while active == own:  # uN (a carrier may name the same switch twice)
            active = wire.shift_outer_dst(buf)
        port = sw.forward.get(active)
        if port is None:
            port = sw.ua.get(active)
            if port is None:
                sw.no_route()
                return
            wire.shift_outer_dst(buf)
        port.send(buf)

    # ------------------------------------------------------------------ slow path
    def _on_wire(self, now: int, buf: bytearray) -> bool:
        """Capture and random loss; True when the packet is lost on the wire."""
        if self.tapped and self.core.tap is not None:
            self.core.tap(now, self.name, buf)
        if self.loss_p and self.core.rng.random() < self.loss_p:
            self._drop("loss")
            return True
        return False

    def _enqueue_header(self, buf: bytearray) -> bool:
        hqbytes = self.hqbytes + len(buf)
        if hqbytes > self.header_limit:
            self._drop("header_queue")
            return False
        self.hqbytes = hqbytes
        if hqbytes > self.peak_hqbytes:
            self.peak_hqbytes = hqbytes
        self.hq.append(buf)
        return True

    def _drop(self, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        observer = self.core.observer
        if observer is not None:
            observer(self.core.now, reason)

    def _update_special(self) -> None:
        self._special = (self.tapped and self.core.tap is not None) or self.loss_p > 0

    def set_down(self) -> int:
        """Lose everything queued and on the wire; refuse new packets."""
        lost = len(self.q) + len(self.hq)
        if lost:
            self.drops["link_down"] = self.drops.get("link_down", 0) + lost
        self.up = False
        self.epoch += 1
        self.q.clear()
        self.hq.clear()
        self.qbytes = self.hqbytes = 0
        self.busy_until = self.core.now
        self.pending = False
        return lost

    def set_up(self) -> None:
        if not self.up:
            self.up = True
            self.busy_until = self.core.now

    def set_rate_fraction(self, fraction: float) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"rate fraction must be in (0, 1], got {fraction}")
        self._set_bps(max(1, int(round(self.nominal_bps * fraction))))

    def set_loss(self, p: float) -> None:
        if not 0 <= p <= 1:
            raise ValueError(f"loss probability must be in [0, 1], got {p}")
        self.loss_p = float(p)
        self._update_special()

    def _set_bps(self, bps: int) -> None:
        self.bps = bps
        self._ppb = _PS_BITS // bps if _PS_BITS % bps == 0 else 0

    def serialization_ps(self, size: int) -> int:
        """Wire time of ``size`` IPv6 bytes plus Ethernet overhead, rounded up (as the sim)."""
        return -((size + _ETH) * -_PS_BITS // self.bps)

    def stats(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "port": self.name, "link": self.link.name if self.link else None,
            "plane": self.plane, "up": self.up, "rate_bps": self.bps, "loss_p": self.loss_p,
            "tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
            "delivered": self.delivered, "trims": self.trims, "ecn_marks": self.ecn_marks,
            "peak_queue_bytes": self.peak_qbytes, "peak_header_queue_bytes": self.peak_hqbytes,
        }
        for reason in DROP_REASONS:
            row[f"drop_{reason}"] = self.drops.get(reason, 0)
        return row


class Switch:
    """A T0 or T1 of one plane: its own uSID and the expanded static table."""

    __slots__ = ("core", "name", "plane", "tier", "index", "usid", "block_bytes", "forward",
                 "ua", "ports", "up", "drops")

    def __init__(self, core: FabricCore, name: str, plane: int, tier: int, index: int) -> None:
        self.core = core
        self.name = name
        self.plane = plane
        self.tier = tier
        self.index = index
        self.usid = usid.t0_usid(index) if tier == 0 else usid.t1_usid(index)
        self.block_bytes = usid.block(plane).to_bytes(4, "big")
        #: Active uSID -> output port, no shift (T0: T1 uSIDs up; T1: T0 uSIDs down).
        self.forward: dict[int, FabricPort] = {}
        #: uA (T0 only): local port uSID -> host downlink, shifted once more.
        self.ua: dict[int, FabricPort] = {}
        self.ports: list[FabricPort] = []  # output ports (the switch's side of its links)
        self.up = True
        self.drops: dict[str, int] = {}

    def no_route(self) -> None:
        self.drops["no_route"] = self.drops.get("no_route", 0) + 1
        if self.core.observer is not None:
            self.core.observer(self.core.now, "no_route")


class FabricLink:
    """Both directions between two elements; down while any cause holds it (see sim Link)."""

    __slots__ = ("name", "plane", "up_port", "down_port", "causes", "host")

    def __init__(self, name: str, plane: int, up_port: FabricPort, down_port: FabricPort,
                 host: int | None = None) -> None:
        self.name = name
        self.plane = plane
        self.up_port = up_port
        self.down_port = down_port
        self.causes: set[str] = set()
        self.host = host  # set for host links: whose NIC sees the carrier
        up_port.link = self
        down_port.link = self

    @property
    def is_up(self) -> bool:
        return not self.causes

    def hold_down(self, cause: str) -> int:
        was_up = not self.causes
        self.causes.add(cause)
        if not was_up:
            return 0
        return self.up_port.set_down() + self.down_port.set_down()

    def release(self, cause: str) -> bool:
        if cause not in self.causes:
            return False
        self.causes.discard(cause)
        if self.causes:
            return False
        self.down_port.set_up()
        self.up_port.set_up()
        return True


class FabricCore:
    """The fabric as a discrete-event system in modelled picoseconds, on packet bytes.

    Feed it with :meth:`inject` (a datagram from a host at time ``now``) and advance it with
    :meth:`run_until`; packets that reach a host go to ``deliver``. Nothing here touches a
    socket or a clock, so tests drive it by hand and compare it with the simulator.
    """

    def __init__(self, spec: FabricSpec, *, seed: int = 0, deliver: Deliver | None = None,
                 nic_link: NicLink | None = None, nic_buffer_bytes: int = 16 << 20) -> None:
        self.spec = spec
        self.now = 0
        self.heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self.seq: Callable[[], int] = itertools.count(1).__next__
        self.rng = random.Random(seed)
        self.deliver: Deliver = deliver or (lambda host, buf, t: None)
        self.nic_link = nic_link
        self.observer: Observer | None = None
        self.nic_buffer_bytes = nic_buffer_bytes
        self.tap: Tap | None = None
        self.switches: dict[str, Switch] = {}
        self.links: dict[str, FabricLink] = {}
        self.ports: dict[str, FabricPort] = {}
        #: ``uplinks[host][plane]``: the port a host's packets of that plane enter.
        self.uplinks: list[list[FabricPort]] = [[] for _ in range(spec.hosts)]
        self.fault_log: list[dict[str, Any]] = []
        self.drops: dict[str, int] = {}  # datagrams refused at the door (REJECT_REASONS)
        self.rx_datagrams = 0
        self.delivered_datagrams = 0
        #: Datagrams entering each plane, split DATA / other (for per-plane checks).
        self.ingress_data = [0] * spec.planes
        self.ingress_control = [0] * spec.planes
        self.events_processed = 0
        self._src_bytes = [usid.host_address(h).to_bytes(16, "big") for h in range(spec.hosts)]
        self._build()

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        spec = self.spec
        latency = spec.switch_latency_ps
        for plane in range(spec.planes):
            t0s = [Switch(self, names.t0_name(plane, i), plane, 0, i)
                   for i in range(spec.t0_per_plane)]
            t1s = [Switch(self, names.t1_name(plane, k), plane, 1, k) for k in range(spec.t1)]
            for sw in (*t0s, *t1s):
                self.switches[sw.name] = sw
            downlinks: list[list[FabricPort]] = [[] for _ in t0s]
            uplinks: list[list[FabricPort]] = [[] for _ in t0s]
            t1_down: list[list[FabricPort]] = [[] for _ in t1s]
            for host in range(spec.hosts):
                t0 = t0s[spec.t0_of(host)]
                nic_name = names.nic_port_name(host, plane)
                up = FabricPort(self, f"{nic_name}->{t0.name}", plane, far_switch=t0,
                                far_host=None, far_latency_ps=latency, nic=True)
                down = FabricPort(self, f"{t0.name}->{nic_name}", plane, far_switch=None,
                                  far_host=host, far_latency_ps=0)
                self._add_link(names.host_link_name(host, plane, t0.index), plane, up, down,
                               host=host)
                self.uplinks[host].append(up)
                downlinks[t0.index].append(down)
                t0.ports.append(down)
            for t0 in t0s:
                for t1 in t1s:
                    up = FabricPort(self, f"{t0.name}->{t1.name}", plane, far_switch=t1,
                                    far_host=None, far_latency_ps=latency)
                    down = FabricPort(self, f"{t1.name}->{t0.name}", plane, far_switch=t0,
                                      far_host=None, far_latency_ps=latency)
                    self._add_link(names.fabric_link_name(plane, t0.index, t1.index), plane,
                                   up, down)
                    uplinks[t0.index].append(up)
                    t1_down[t1.index].append(down)
                    t0.ports.append(up)
                    t1.ports.append(down)
            for sw in (*t0s, *t1s):
                table = tables.switch_table(spec, plane, sw.tier, sw.index)
                targets = {names.T1: uplinks[sw.index] if sw.tier == 0 else [],
                           names.T0: t1_down[sw.index] if sw.tier == 1 else [],
                           names.NIC_PORT: downlinks[sw.index] if sw.tier == 0 else []}
                for rule in table.rules:
                    for value in range(rule.first, rule.last + 1):
                        if rule.action == tables.UN:
                            continue
                        target = rule.next_base + (value - rule.first)
                        if rule.next_kind == names.NIC_PORT:
                            target = spec.port_of(target)
                        port = targets[rule.next_kind][target]  # type: ignore[index]
                        if rule.action == tables.FORWARD:
                            sw.forward[value] = port
                        else:
                            sw.ua[value] = port

    def _add_link(self, name: str, plane: int, up: FabricPort, down: FabricPort,
                  host: int | None = None) -> None:
        self.links[name] = FabricLink(name, plane, up, down, host)
        self.ports[up.name] = up
        self.ports[down.name] = down

    # ------------------------------------------------------------------ traffic
    def inject(self, data: bytes | bytearray, src: int | None) -> bool:
        """A datagram from host ``src`` (None: an unknown sender) at ``self.now``.

        Only cheap structural checks, as a switch would do: an IPv6-in-IPv6 envelope of
        consistent length, a destination in one of our planes' blocks, and an inner source
        that is the sending host. Everything else is dropped and counted; returns True when
        the packet entered the fabric."""
        self.rx_datagrams += 1
        if src is None:
            self._ingress_drop("unknown_source")
            return False
        n = len(data)
        if n > MAX_DATAGRAM or not wire.outer_ok(data):
            self._ingress_drop("malformed")
            return False
        if data[24:27] != _BLOCK_PREFIX or data[27] >= self.spec.planes:
            self._ingress_drop("no_plane")
            return False
        if data[48:64] != self._src_bytes[src]:
            self._ingress_drop("spoofed")
            return False
        plane = data[27]
        if data[_OFF_BTH] in _DATA_OPS:
            self.ingress_data[plane] += 1
        else:
            self.ingress_control[plane] += 1
        buf = data if isinstance(data, bytearray) else bytearray(data)
        self.uplinks[src][plane].send(buf)
        return True

    def _ingress_drop(self, reason: str) -> None:
        # Not reported to the observer: these never were the transports' packets.
        self.drops[reason] = self.drops.get(reason, 0) + 1

    def run_until(self, now: int) -> int:
        """Process every event due at or before ``now``; returns how many ran."""
        heap = self.heap
        done = 0
        while heap and heap[0][0] <= now:
            t, _, fn, arg = heappop(heap)
            self.now = t
            fn(arg)
            done += 1
        if now > self.now:
            self.now = now
        self.events_processed += done
        return done

    def next_time(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at modelled time ``time_ps`` (in order with packet events)."""
        heappush(self.heap, (max(time_ps, self.now), self.seq(), fn, arg))

    def set_tap(self, tap: Tap | None, *, everywhere: bool = False) -> None:
        """Capture packets as they start crossing links: the hosts' uplinks and downlinks
        (what enters and leaves the fabric), or every link (``everywhere``: every hop)."""
        self.tap = tap
        for port in self.ports.values():
            edge = port.nic or port.far_host is not None
            port.tapped = tap is not None and (everywhere or edge)
            port._update_special()

    # ------------------------------------------------------------------ lookup
    def element(self, name: str) -> Switch | FabricLink | FabricPort:
        """A switch, link (either end first, selectors welcome) or output port by name; a NIC
        port name (``h17.p3``) means its host link."""
        found = self.switches.get(name) or self.links.get(name) or self.ports.get(name)
        if found is not None:
            return found
        element = names.resolve(self.spec, name)
        if element.kind in (names.T0, names.T1):
            return self.switches[element.name]
        if element.kind == names.LINK:
            return self.links[element.name]
        if element.kind == names.NIC_PORT:
            return self.links[names.uplink_name(self.spec, element.host, element.plane)]  # type: ignore[arg-type]
        raise names.UnknownElementError(name, f"a {element.kind} is not a fault target here")

    def _link(self, target: str) -> FabricLink:
        found = self.element(target)
        if isinstance(found, FabricPort) and found.link is not None:
            return found.link
        if not isinstance(found, FabricLink):
            raise TypeError(f"{target!r} is not a link")
        return found

    def _switch(self, target: str) -> Switch:
        found = self.element(target)
        if not isinstance(found, Switch):
            raise TypeError(f"{target!r} is not a switch")
        return found

    def _ports(self, target: str, direction: str | None) -> tuple[str, list[FabricPort]]:
        found = self.element(target)
        if isinstance(found, FabricPort):
            return found.name, [found]
        link = self._link(target)
        if direction in (None, "both"):
            return link.name, [link.up_port, link.down_port]
        if direction == "up":
            return link.name, [link.up_port]
        if direction == "down":
            return link.name, [link.down_port]
        raise ValueError(f"direction must be 'up', 'down' or 'both', got {direction!r}")

    # ------------------------------------------------------------------ faults
    def _record(self, action: str, target: str, **effect: Any) -> dict[str, Any]:
        record = {"time_ps": self.now, "action": action, "target": target, **effect}
        self.fault_log.append(record)
        return record

    def _carrier(self, link: FabricLink, was_up: bool) -> None:
        if link.host is not None and link.is_up != was_up:
            self._signal(link)

    def _signal(self, link: FabricLink) -> None:
        if self.nic_link is not None and link.host is not None:
            self.nic_link(link.host, link.plane, link.is_up, link.up_port.bps)

    def _hold(self, link: FabricLink, cause: str) -> int:
        was_up = link.is_up
        lost = link.hold_down(cause)
        self._carrier(link, was_up)
        return lost

    def _release(self, link: FabricLink, cause: str) -> bool:
        was_up = link.is_up
        revived = link.release(cause)
        self._carrier(link, was_up)
        return revived

    def link_down(self, target: str) -> dict[str, Any]:
        link = self._link(target)
        return self._record("link_down", link.name, lost_queued=self._hold(link, CAUSE_LINK))

    def link_up(self, target: str) -> dict[str, Any]:
        link = self._link(target)
        self._release(link, CAUSE_LINK)
        return self._record("link_up", link.name, up=link.is_up, held_by=sorted(link.causes))

    def switch_down(self, target: str) -> dict[str, Any]:
        sw = self._switch(target)
        sw.up = False
        lost = 0
        for port in sw.ports:
            assert port.link is not None
            lost += self._hold(port.link, sw.name)
        return self._record("switch_down", sw.name, lost_queued=lost)

    def switch_up(self, target: str) -> dict[str, Any]:
        sw = self._switch(target)
        sw.up = True
        revived = 0
        for port in sw.ports:
            assert port.link is not None
            revived += self._release(port.link, sw.name)
        return self._record("switch_up", sw.name, links_up=revived)

    def nic_port_down(self, target: str) -> dict[str, Any]:
        link = self._link(target)
        return self._record("nic_port_down", link.name, lost_queued=self._hold(link, CAUSE_NIC))

    def nic_port_up(self, target: str) -> dict[str, Any]:
        link = self._link(target)
        self._release(link, CAUSE_NIC)
        return self._record("nic_port_up", link.name, up=link.is_up)

    def set_loss(self, target: str, p: float, direction: str | None = None) -> dict[str, Any]:
        name, ports = self._ports(target, direction)
        for port in ports:
            port.set_loss(p)
        return self._record("set_loss", name, p=p)

    def degrade(self, target: str, fraction: float,
                direction: str | None = None) -> dict[str, Any]:
        name, ports = self._ports(target, direction)
        for port in ports:
            port.set_rate_fraction(fraction)
            if port.nic and port.link is not None:
                self._signal(port.link)  # the NIC now runs its port at that rate
        return self._record("degrade", name, fraction=fraction)

    #: Lab schedule actions (``mrc.labs.schema.FaultAction.action``) -> primitive and its
    #: parameters. ``drain_*`` is an operator action on transports, not on the fabric.
    LAB_ACTIONS = ("link_down", "link_up", "switch_down", "switch_up", "port_down", "port_up",
                   "loss_start", "loss_end", "degrade_start", "degrade_end")

    def apply(self, action: str, target: str, params: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        """Run one fault by its primitive or lab-schedule name, now."""
        params = dict(params or {})
        if action in ("port_down", "nic_port_down"):
            return self.nic_port_down(target)
        if action in ("port_up", "nic_port_up"):
            return self.nic_port_up(target)
        if action == "loss_start":
            return self.set_loss(target, float(params["probability"]),
                                 params.get("direction"))
        if action == "loss_end":
            return self.set_loss(target, 0.0, params.get("direction"))
        if action == "degrade_start":
            return self.degrade(target, float(params["rate_fraction"]), params.get("direction"))
        if action == "degrade_end":
            return self.degrade(target, 1.0, params.get("direction"))
        fn = {"link_down": self.link_down, "link_up": self.link_up,
              "switch_down": self.switch_down, "switch_up": self.switch_up}.get(action)
        if fn is None:
            raise ValueError(f"the fabric does not implement fault {action!r}")
        return fn(target)

    def schedule(self, time_ps: int, action: str, target: str,
                 params: dict[str, Any] | None = None) -> None:
        """Apply a fault at modelled time ``time_ps``, in order with the packets."""
        self.element(target)  # refuse unknown targets now, not mid-run
        self.at(time_ps, self._fire, (action, target, params))

    def _fire(self, job: tuple[str, str, dict[str, Any] | None]) -> None:
        self.apply(*job)

    # ------------------------------------------------------------------ statistics
    def port_stats(self) -> list[dict[str, Any]]:
        return [port.stats() for port in self.ports.values()]

    def totals(self) -> dict[str, int]:
        """Fabric-wide counters (ingress, every port, every switch)."""
        out: dict[str, int] = {"rx_datagrams": self.rx_datagrams,
                               "delivered_datagrams": self.delivered_datagrams,
                               "tx_packets": 0, "tx_bytes": 0, "trims": 0, "ecn_marks": 0,
                               "events": self.events_processed}
        drops = dict.fromkeys(DROP_REASONS, 0)
        for port in self.ports.values():
            out["tx_packets"] += port.tx_packets
            out["tx_bytes"] += port.tx_bytes
            out["trims"] += port.trims
            out["ecn_marks"] += port.ecn_marks
            for reason, count in port.drops.items():
                drops[reason] += count
        for sw in self.switches.values():
            for reason, count in sw.drops.items():
                drops[reason] += count
        for reason, count in drops.items():
            out[f"drop_{reason}"] = count
        out["drops"] = sum(drops.values())
        for reason in REJECT_REASONS:
            out[f"rejected_{reason}"] = self.drops.get(reason, 0)
        out["rejected"] = sum(self.drops.values())
        return out


def udp_kernel_drops(sock: socket.socket | None) -> int | None:
    """Datagrams the kernel dropped on ``sock`` (full receive buffer): losses outside the
    model, so runs report them. Linux only (``/proc/net/udp*``); None elsewhere."""
    if sock is None or sock.fileno() < 0:
        return None
    try:
        import os

        inode = str(os.fstat(sock.fileno()).st_ino)
        for table in ("/proc/net/udp", "/proc/net/udp6"):
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 12 and cols[9] == inode:
                        return int(cols[-1])
    except (OSError, ValueError):
        return None
    return None


def check_bind_address(host: str, allow_non_loopback: bool) -> None:
    """Refuse to listen beyond this machine unless the user said so explicitly."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_non_loopback:
        raise PermissionError(
            f"refusing to bind {host!r}: the live runtime uses loopback only unless "
            "allow_non_loopback (--allow-non-loopback) is given")


class FabricServer(asyncio.DatagramProtocol):
    """The fabric on a UDP socket, in wall-clock time scaled by ``clock``.

    Each datagram is stamped with the clock, every fabric event due by then runs, and one
    asyncio timer is kept armed for the next event. Datagrams from an address that is not a
    registered host, or that do not look like our packets, are counted and dropped.
    """

    def __init__(self, core: FabricCore, clock: Clock, *, host: str = "127.0.0.1",
                 port: int = 0, allow_non_loopback: bool = False,
                 rcvbuf_bytes: int = 4 << 20) -> None:
        check_bind_address(host, allow_non_loopback)
        self.core = core
        self.clock = clock
        self.bind = (host, port)
        self.rcvbuf_bytes = rcvbuf_bytes
        self.transport: asyncio.DatagramTransport | None = None
        self._sock: socket.socket | None = None
        self.address: tuple[str, int] | None = None
        self.hosts: dict[tuple[str, int], int] = {}
        self.host_addr: list[tuple[str, int] | None] = [None] * core.spec.hosts
        self.send_errors = 0
        self.kernel_drops: int | None = None
        self.lag_max_ps = 0
        self.lag_sum_ps = 0
        self.lag_samples = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        core.deliver = self._deliver

    async def start(self) -> tuple[str, int]:
        """Bind the socket; returns the address hosts send to."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        sock = socket.socket(socket.AF_INET6 if ":" in self.bind[0] else socket.AF_INET,
                             socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.rcvbuf_bytes)
            sock.bind(self.bind)
            sock.setblocking(False)
            transport, _ = await loop.create_datagram_endpoint(lambda: self, sock=sock)
        except BaseException:
            sock.close()
            raise
        self.transport = transport  # type: ignore[assignment]
        self._sock = sock
        self.address = sock.getsockname()[:2]
        return self.address

    def register_host(self, index: int, address: tuple[str, int]) -> None:
        """Datagrams from ``address`` are host ``index``'s; its packets are sent there."""
        address = (address[0], address[1])
        self.hosts[address] = index
        self.host_addr[index] = address

    # ------------------------------------------------------------------ asyncio callbacks
    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:  # type: ignore[override]
        self._ingest(data, addr)
        sock = self._sock
        if sock is not None:  # read what else waits now: a loop turn per datagram costs most
            for _ in range(RX_BATCH):
                try:
                    data, addr = sock.recvfrom(MAX_DATAGRAM)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.send_errors += 1  # an ICMP error queued on the socket
                    continue
                self._ingest(data, addr)
        self._arm()

    def _ingest(self, data: bytes, addr: tuple[str, int]) -> None:
        core = self.core
        now = self.clock.now_ps()
        if core.heap and core.heap[0][0] <= now:
            self._run(now)
        if now > core.now:
            core.now = now
        core.inject(data, self.hosts.get(addr[:2]))

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable from a host that already closed: count, never crash.
        self.send_errors += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()

    # ------------------------------------------------------------------ engine
    def _run(self, now: int) -> None:
        heap = self.core.heap
        lag = now - heap[0][0]
        if lag > self.lag_max_ps:
            self.lag_max_ps = lag
        self.lag_sum_ps += lag
        self.lag_samples += 1
        self._running = True
        try:
            self.core.run_until(now)
        finally:
            self._running = False

    def run_due(self, now: int) -> None:
        """Run the events due by modelled time ``now``, unless they are running already.

        Hosts in the same process call this before they act at ``now``: a fault or a link
        change scheduled before ``now`` then reaches their NICs first, however late the
        loop is with the fabric's own timer (a busy loop must not let a host send on a
        port that is already dead in modelled time)."""
        heap = self.core.heap
        if heap and heap[0][0] <= now and not self._running and self.transport is not None:
            self._run(now)
            self._arm()

    def _on_timer(self) -> None:
        due = self._timer_at
        self._timer = None
        self._timer_at = None
        now = self.clock.now_ps()
        if due is not None and now < due:
            now = due  # asyncio may fire a hair early; the event is due by definition
        if self.core.heap and self.core.heap[0][0] <= now:
            self._run(now)
        self._arm()

    def _arm(self) -> None:
        heap = self.core.heap
        if not heap or self.transport is None or self._loop is None:
            return
        t = heap[0][0]
        if self._timer_at is not None and self._timer_at <= t:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = t
        self._timer = self._loop.call_at(self.clock.wall_at(t), self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def _deliver(self, host: int, buf: bytearray, time_ps: int) -> None:
        addr = self.host_addr[host]
        transport = self.transport
        if addr is None or transport is None or transport.is_closing():
            self.core._ingress_drop("no_host")
            return
        try:
            transport.sendto(buf, addr)
        except OSError:
            self.send_errors += 1

    def call_at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at modelled time ``time_ps``, in order with the packets (the live
        runtime's one modelled-time scheduler)."""
        self.core.at(time_ps, fn, arg)
        self._arm()

    def schedule_fault(self, time_ps: int, action: str, target: str,
                       params: dict[str, Any] | None = None) -> None:
        """Apply a fault at modelled time ``time_ps`` (the clock turns it into wall time)."""
        self.core.schedule(time_ps, action, target, params)
        self._arm()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.core.totals())
        out["send_errors"] = self.send_errors
        out["kernel_drops"] = (udp_kernel_drops(self._sock) if self._sock is not None
                               else self.kernel_drops)
        out["lag_max_us"] = self.lag_max_ps / 1e6
        out["lag_mean_us"] = (self.lag_sum_ps / self.lag_samples / 1e6
                              if self.lag_samples else 0.0)
        return out

    async def close(self) -> None:
        """Stop the timer and close the socket (idempotent)."""
        self._cancel_timer()
        if self._sock is not None:
            self.kernel_drops = udp_kernel_drops(self._sock)
        transport = self.transport
        self.transport = None
        self._sock = None
        if transport is not None:
            transport.close()
            await asyncio.sleep(0)  # let connection_lost run
