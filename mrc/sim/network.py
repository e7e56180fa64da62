"""Simulated fabric elements: output ports, links, switches and hosts.

The model is store-and-forward. A packet handed to an :class:`OutPort` is serialized at the
port's rate (``(size + Ethernet overhead) * 8 / rate``, exact integer picoseconds), then
propagates for the link delay, then spends the far switch's latency before that switch forwards
it. Queueing happens only at output ports.

Why the code looks the way it does: a Python event costs far more than the arithmetic around it,
so a packet crossing a hop costs exactly one heap event, its arrival, congested or not.

* A port remembers ``busy_until``. A packet reaching an idle port starts serializing at once and
  its arrival at the far end is scheduled directly.
* Packets that wait need no "transmit done" event either. Departures are computed lazily: the
  port catches up (``_drain``) whenever something touches it -- a new packet to admit, or the
  arrival of one of its own packets at the far end. That is exact: between two catch-ups nothing
  was enqueued, so the order and start time of every departure is already fixed, and a started
  packet's arrival (one propagation after its end) always comes before the next departure's
  arrival is due. Only NIC ports keep a transmit-done event, because they ask the host's agent
  for the next packet at the moment the wire frees up.
* Forwarding runs inline in the arrival callback.
* Packets carry ``hop_epoch`` = the epoch of the port that sent them; taking a port down bumps
  its epoch, so packets on the wire die when they "arrive" without anyone searching the heap.

Switches forward only by shift-and-forward on the outer destination (``pkt.da``), exactly as the
uSID plan in :mod:`topology.usid` says; there is no routing shortcut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from heapq import heappush
from typing import TYPE_CHECKING, Protocol

from mrc.packet import DATA, ECN_CE, ECN_NOT_ECT, Packet
from mrc.units import PS_PER_S
from topology import names, tables, usid
from topology.spec import ETHERNET_OVERHEAD_BYTES
from topology.tables import Rule

if TYPE_CHECKING:
    from mrc.sim.engine import Simulator
    from topology.spec import FabricSpec

#: Bits per byte times picoseconds per second: serialization = bytes * this / bps (ceiling).
_PS_BITS = 8 * PS_PER_S
_ETH = ETHERNET_OVERHEAD_BYTES
_BLOCK_MASK = usid.BLOCK_MASK
_CARRIER_MASK = usid.CARRIER_MASK
#: ``hop_epoch`` of a packet that random loss took: no port ever has this epoch.
_LOST = -1

#: Why a packet was dropped. ``buffer``: the data queue was full and trimming is off;
#: ``header_queue``: even the priority queue was full; ``down``: handed to a port that is down;
#: ``link_down``: queued at or on the wire of a port when it went down; ``loss``: random loss;
#: ``no_route``: a switch found no entry for the active uSID; ``misdelivered``: a host received
#: a packet whose carrier was not consumed or whose inner destination is another host.
DROP_REASONS = ("buffer", "header_queue", "down", "link_down", "loss", "no_route",
                "misdelivered")

#: ``tap(now, port_name, pkt)``: sees every packet that crossed a link, as the far element
#: takes it (``now`` = that moment, so calls come in global time order; the packet is as it was
#: on that wire: outer address, ECN and trim state not yet rewritten by the far switch).
Tap = Callable[[int, str, Packet], None]
#: ``observer(now, where, pkt, event)``: ``event`` is ``"trim"``, ``"ecn"`` or a drop reason;
#: ``where`` is a port, switch or host name.
Observer = Callable[[int, str, Packet, str], None]


class HostAgent(Protocol):
    """What a host's NIC drives: the NIC glue of a transport, or a benchmark traffic source."""

    def pull(self, now: int, plane: int) -> Packet | None:
        """The port of ``plane`` is idle and has no control packet waiting: the next packet
        to put on that wire, or None (then call ``Host.kick`` when there is one)."""
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
        return out


class OutPort:
    """One direction of a link: the sender's output queue plus the wire to the far end.

    Two queues: a FIFO data queue limited to ``buffer_bytes`` and a strict-priority header
    queue (``header_queue_bytes``) for trimmed DATA and for every non-DATA packet. A DATA packet
    that does not fit the data queue within ``trim_threshold_bytes`` is trimmed to
    ``trim_size_bytes`` and sent on the header queue instead (or dropped if trimming is off).
    An ECN-capable DATA packet admitted while the data queue already holds more than
    ``ecn_threshold_bytes`` is marked CE. Queue occupancy counts packets waiting, not the one
    being serialized. ``tx_*`` count
    packets put on the wire (IPv6 bytes); ``delivered`` those that reached the far end.

    Departures are computed lazily (see the module doc): the deques may still hold packets
    whose transmission has virtually begun. Read occupancy through ``qbytes``/``hqbytes``/
    :meth:`backlog`, which account for that without changing anything.
    """

    __slots__ = (
        "name", "net", "link", "plane", "src", "dst", "sim", "_heap", "_seq", "_rng",
        "_arrive", "_deliver", "_far", "_far_block", "_far_usid", "_far_next", "_far_ua",
        "nominal_bps", "bps", "_ppb", "delay_ps", "far_latency_ps", "_flight",
        "up", "epoch", "busy_until", "_pending", "q", "hq", "_qb", "_hqb",
        "buffer_bytes", "trim_threshold", "_admit_limit", "trim_size", "header_limit",
        "ecn_threshold", "trimming", "loss_p", "_tap",
        "tx_packets", "tx_bytes", "delivered", "trims", "ecn_marks", "peak_qbytes",
        "peak_hqbytes", "drops",
    )

    def __init__(self, net: Network, name: str, src: Host | Switch, dst: Host | Switch,
                 plane: int, *, far_latency_ps: int) -> None:
        spec = net.spec
        sim = net.sim
        self.name = name
        self.net = net
        self.link: Link | None = None
        self.plane = plane
        self.src = src
        self.dst = dst
        self.sim = sim
        self._heap = sim.heap
        self._seq = sim.next_seq
        self._rng = sim.rng
        # Bind the arrival callback once (a bound method per event would allocate). A switch
        # at the far end gets its forwarding inlined into the arrival: one call less per hop.
        far = dst if isinstance(dst, Switch) else None
        self._far = far
        self._arrive = self._arrive_switch if far is not None else self.arrive
        self._deliver: Callable[[Packet], None] = dst.receive
        # The far switch's constants and (shared, filled later) tables, one attribute away.
        self._far_block = far._block if far is not None else -1
        self._far_usid = far.usid if far is not None else -1
        self._far_next: dict[int, OutPort] = far._next if far is not None else {}
        self._far_ua: dict[int, OutPort] = far._ua if far is not None else {}
        self.nominal_bps = spec.link_bps
        self.bps = spec.link_bps
        self._ppb = 0
        self.delay_ps = spec.link_delay_ps
        self.far_latency_ps = far_latency_ps
        self._flight = self.delay_ps + far_latency_ps
        self.up = True
        self.epoch = 0
        self.busy_until = 0
        self._pending = False  # NIC ports: a transmit-done event is in the heap
        self.q: deque[Packet] = deque()
        self.hq: deque[Packet] = deque()
        self._qb = 0  # bytes in ``q`` (including packets that virtually left)
        self._hqb = 0
        self.buffer_bytes = spec.buffer_bytes
        self.trim_threshold = int(spec.trim_threshold_bytes)  # type: ignore[arg-type]
        self.trimming = spec.trimming
        self._admit_limit = self.trim_threshold if self.trimming else self.buffer_bytes
        self.trim_size = spec.trim_size_bytes
        self.header_limit = spec.header_queue_bytes
        self.ecn_threshold = spec.ecn_threshold_bytes
        self.loss_p = 0.0
        self._tap: Tap | None = net.tap
        self.tx_packets = 0
        self.tx_bytes = 0
        self.delivered = 0
        self.trims = 0
        self.ecn_marks = 0
        self.peak_qbytes = 0
        self.peak_hqbytes = 0
        self.drops: dict[str, int] = {}
        self._set_bps(spec.link_bps)

    def __repr__(self) -> str:
        state = "up" if self.up else "DOWN"
        return f"<OutPort {self.name} {state} q={self.qbytes}B hq={self.hqbytes}B>"

    # ------------------------------------------------------------------ hot path
    # The transmit step is written out in send(), _drain() and NicPort._next() rather than
    # shared through a helper: it runs once per packet-hop and a call costs as much as it does.
    def send(self, pkt: Packet) -> None:
        """Admit ``pkt``: transmit now if idle, else queue it (trim, mark or drop)."""
        if not self.up:
            self._drop(pkt, "down")
            return
        now = self.sim.now
        if self.busy_until <= now:
            if self.hq or self.q:
                self._drain(now)  # departures due by now, before this packet is admitted
            if self.busy_until <= now:
                # Idle: serialize now; its arrival is the only event this hop needs.
                size = pkt.size
                ppb = self._ppb
                end = now + ((size + _ETH) * ppb if ppb else self.serialization_ps(size))
                self.busy_until = end
                pkt.hop_epoch = _LOST if self.loss_p and self._lose() else self.epoch
                self.tx_packets += 1
                self.tx_bytes += size
                heappush(self._heap, (end + self._flight, self._seq(), self._arrive, pkt))
                return
        size = pkt.size
        if pkt.kind == DATA and not pkt.trimmed:
            qb = self._qb
            if qb + size <= self._admit_limit:
                if qb > self.ecn_threshold and pkt.ecn != ECN_NOT_ECT and pkt.ecn != ECN_CE:
                    self._mark(pkt, now)
                qb += size
                self._qb = qb
                if qb > self.peak_qbytes:
                    self.peak_qbytes = qb
                self.q.append(pkt)
            elif self.trimming:
                self._trim(pkt, now)
                self._enqueue_header(pkt)
            else:
                self._drop(pkt, "buffer")
        else:
            self._enqueue_header(pkt)

    def _drain(self, now: int) -> None:
        """Start every queued packet whose turn came by ``now`` (header queue first), each at
        the moment the previous one finished. Exact because nothing was enqueued since the
        last drain: every send() drains first, and each started packet's arrival (at least a
        propagation later than its end) drains again, before the next start is overdue."""
        hq = self.hq
        q = self.q
        t = self.busy_until
        heap = self._heap
        seq = self._seq
        arrive = self._arrive
        flight = self._flight
        ppb = self._ppb
        epoch = self.epoch
        while t <= now:
            if hq:
                pkt = hq.popleft()
                size = pkt.size
                self._hqb -= size
            elif q:
                pkt = q.popleft()
                size = pkt.size
                self._qb -= size
            else:
                break
            t += (size + _ETH) * ppb if ppb else self.serialization_ps(size)
            pkt.hop_epoch = _LOST if self.loss_p and self._lose() else epoch
            self.tx_packets += 1
            self.tx_bytes += size
            heappush(heap, (t + flight, seq(), arrive, pkt))
        self.busy_until = t

    def arrive(self, pkt: Packet) -> None:
        """The packet reached the far end (a host; switches use ``_arrive_switch``)."""
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return
        now = self.sim.now
        if self.busy_until <= now and (self.hq or self.q):
            self._drain(now)
        self.delivered += 1
        if self._tap is not None:
            self._tap(now, self.name, pkt)
        self._deliver(pkt)

    def _arrive_switch(self, pkt: Packet) -> None:
        """``arrive`` + ``Switch.receive`` in one frame (same logic; keep them in step)."""
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return
        now = self.sim.now
        if self.busy_until <= now and (self.hq or self.q):
            self._drain(now)
        self.delivered += 1
        if self._tap is not None:
            self._tap(now, self.name, pkt)
        da = pkt.da
        if da >> 96 != self._far_block:
            self._far._no_route(pkt)  # type: ignore[union-attr]
            return
        active = (da >> 80) & 0xFFFF
        own = self._far_usid
        while active == own:
            da = (da & _BLOCK_MASK) | ((da << 16) & _CARRIER_MASK)
            active = (da >> 80) & 0xFFFF
        port = self._far_next.get(active)
        if port is None:
            port = self._far_ua.get(active)
            if port is None:
                self._far._no_route(pkt)  # type: ignore[union-attr]
                return
            da = (da & _BLOCK_MASK) | ((da << 16) & _CARRIER_MASK)
        pkt.da = da
        port.send(pkt)

    # ------------------------------------------------------------------ slow path
    def _lose(self) -> bool:
        return self._rng.random() < self.loss_p

    def _lost(self, pkt: Packet) -> None:
        """A packet that did not make it across: random loss, or the port went down (its
        epoch moved on) while it was on the wire. Still drains: the arrival is also this
        port's wake-up."""
        now = self.sim.now
        if pkt.hop_epoch == _LOST:
            self._drop(pkt, "loss")
            if self.busy_until <= now and (self.hq or self.q):
                self._drain(now)
        else:
            self._drop(pkt, "link_down")

    def _mark(self, pkt: Packet, now: int) -> None:
        pkt.ecn = ECN_CE
        self.ecn_marks += 1
        if self.net.observer is not None:
            self.net.observer(now, self.name, pkt, "ecn")

    def _trim(self, pkt: Packet, now: int) -> None:
        pkt.trimmed = True  # the trim DSCP re-mark is implied by ``trimmed``
        pkt.size = self.trim_size
        self.trims += 1
        if self.net.observer is not None:
            self.net.observer(now, self.name, pkt, "trim")

    def _enqueue_header(self, pkt: Packet) -> bool:
        hqb = self._hqb + pkt.size
        if hqb > self.header_limit:
            self._drop(pkt, "header_queue")
            return False
        self._hqb = hqb
        if hqb > self.peak_hqbytes:
            self.peak_hqbytes = hqb
        self.hq.append(pkt)
        return True

    def _drop(self, pkt: Packet, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if self.net.observer is not None:
            self.net.observer(self.sim.now, self.name, pkt, reason)

    def sync(self) -> None:
        """Apply departures due by now (before a change of rate, loss or state)."""
        now = self.sim.now
        if self.busy_until <= now and (self.hq or self.q):
            self._drain(now)

    def backlog(self) -> tuple[int, int, int, int]:
        """``(data bytes, data packets, header bytes, header packets)`` waiting right now,
        without changing anything (so reading it never perturbs a run)."""
        now = self.sim.now
        qb, hqb, qn, hqn = self._qb, self._hqb, len(self.q), len(self.hq)
        t = self.busy_until
        if t <= now:
            for pkt in self.hq:
                if t > now:
                    break
                t += self.serialization_ps(pkt.size)
                hqb -= pkt.size
                hqn -= 1
            else:
                for pkt in self.q:
                    if t > now:
                        break
                    t += self.serialization_ps(pkt.size)
                    qb -= pkt.size
                    qn -= 1
        return qb, qn, hqb, hqn

    @property
    def qbytes(self) -> int:
        """Data-queue bytes waiting now."""
        return self.backlog()[0]

    @property
    def hqbytes(self) -> int:
        """Header-queue bytes waiting now."""
        return self.backlog()[2]

    @property
    def tap(self) -> Tap | None:
        return self._tap

    @tap.setter
    def tap(self, fn: Tap | None) -> None:
        self._tap = fn

    def set_down(self) -> int:
        """Lose everything queued and on the wire; refuse new packets. Returns packets lost
        from the queues (packets on the wire are counted as they would have arrived)."""
        self.sync()
        lost = 0
        self.up = False
        self.epoch += 1
        for queue in (self.hq, self.q):
            while queue:
                self._drop(queue.popleft(), "link_down")
                lost += 1
        self._qb = self._hqb = 0
        self.busy_until = self.sim.now
        self._pending = False
        return lost

    def set_up(self) -> None:
        if self.up:
            return
        self.up = True
        self.busy_until = self.sim.now

    def set_rate_fraction(self, fraction: float) -> None:
        """Serialize later packets at ``fraction`` of the nominal rate (packets already on
        the wire keep the rate they started with)."""
        if not 0 < fraction <= 1:
            raise ValueError(f"rate fraction must be in (0, 1], got {fraction}")
        self.sync()
        self._set_bps(max(1, int(round(self.nominal_bps * fraction))))

    def _set_bps(self, bps: int) -> None:
        self.bps = bps
        # Whole picoseconds per byte (80 at 100 Gb/s) turn serialization into one multiply.
        self._ppb = _PS_BITS // bps if _PS_BITS % bps == 0 else 0

    def set_loss(self, p: float) -> None:
        """Lose each packet that starts crossing from now on with probability ``p``."""
        if not 0 <= p <= 1:
            raise ValueError(f"loss probability must be in [0, 1], got {p}")
        self.sync()
        self.loss_p = float(p)

    def serialization_ps(self, size: int) -> int:
        """Wire time of an IPv6 packet of ``size`` bytes at the current rate (Ethernet
        overhead included), rounded up to a whole picosecond."""
        return -((size + _ETH) * -_PS_BITS // self.bps)

    def stats(self) -> dict[str, object]:
        qb, qn, hqb, hqn = self.backlog()
        row: dict[str, object] = {
            "port": self.name, "link": self.link.name if self.link else None,
            "src": self.src.name, "dst": self.dst.name, "plane": self.plane,
            "up": self.up, "rate_bps": self.bps, "loss_p": self.loss_p,
            "tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
            "delivered": self.delivered, "trims": self.trims, "ecn_marks": self.ecn_marks,
            "peak_queue_bytes": self.peak_qbytes, "peak_header_queue_bytes": self.peak_hqbytes,
            "queue_bytes": qb, "header_queue_bytes": hqb,
            "queue_packets": qn, "header_queue_packets": hqn,
        }
        for reason in DROP_REASONS:
            row[f"drop_{reason}"] = self.drops.get(reason, 0)
        row["drops"] = sum(self.drops.values())
        return row


class NicPort(OutPort):
    """A host's port on one plane (host -> T0). Data is pulled from the host's agent each time
    the wire goes idle, so line-rate pacing is the port's job; control packets queue on the
    priority queue (unbounded: the NIC's memory is the transport's to manage) and go first.

    Unlike switch ports it keeps a transmit-done event per packet: the agent must be asked at
    the moment the wire frees up, with its state at that moment."""

    __slots__ = ("host", "_tx_done_cb")

    def __init__(self, net: Network, name: str, host: Host, dst: Switch, plane: int, *,
                 far_latency_ps: int) -> None:
        super().__init__(net, name, host, dst, plane, far_latency_ps=far_latency_ps)
        self.host = host
        self.header_limit = 1 << 62
        self._tx_done_cb = self._tx_done

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

    def kick(self) -> None:
        """Pull now if the port is idle and up."""
        if self.up and not self._pending:
            self._next(self.sim.now)

    def _drain(self, now: int) -> None:
        """Nothing to catch up: transmit-done events start every packet on time."""

    def backlog(self) -> tuple[int, int, int, int]:
        return 0, 0, self._hqb, len(self.hq)

    def _tx_done(self, epoch: int) -> None:
        if epoch == self.epoch:
            self._next(self.busy_until)

    def _next(self, now: int) -> None:
        """Put the next packet on the wire: control first, else whatever the agent gives."""
        self._pending = True  # a nested send() from inside pull() must only queue
        hq = self.hq
        pkt: Packet | None
        if hq:
            pkt = hq.popleft()
            self._hqb -= pkt.size
        else:
            agent = self.host.agent
            pkt = agent.pull(now, self.plane) if agent is not None else None
            if pkt is None:
                if hq:  # the agent queued control while we asked it for data
                    pkt = hq.popleft()
                    self._hqb -= pkt.size
                else:
                    self._pending = False
                    return
        size = pkt.size
        ppb = self._ppb
        end = now + ((size + _ETH) * ppb if ppb else self.serialization_ps(size))
        self.busy_until = end
        epoch = self.epoch
        pkt.hop_epoch = _LOST if self.loss_p and self._lose() else epoch
        self.tx_packets += 1
        self.tx_bytes += size
        heap = self._heap
        seq = self._seq
        heappush(heap, (end + self._flight, seq(), self._arrive, pkt))
        heappush(heap, (end, seq(), self._tx_done_cb, epoch))

    def set_down(self) -> int:
        lost = super().set_down()
        self._notify(False)
        return lost

    def set_up(self) -> None:
        was_up = self.up
        super().set_up()
        if not was_up:
            self._notify(True)
            self.kick()

    def set_rate_fraction(self, fraction: float) -> None:
        super().set_rate_fraction(fraction)
        notify = getattr(self.host.agent, "on_port_rate", None)
        if notify is not None:
            notify(self.sim.now, self.plane, self.bps)

    def drop_unsent(self, pkt: Packet) -> None:
        """Count a packet the host put on this port while its link was down."""
        self._drop(pkt, "down")

    def _notify(self, up: bool) -> None:
        notify = getattr(self.host.agent, "on_port_state", None)
        if notify is not None:
            notify(self.sim.now, self.plane, up)


class Link:
    """Both directions between two elements, named ``lower--upper`` (lower tier first).

    A link is up while nothing holds it down; ``causes`` says who does (``"link"`` for an
    operator/flap fault, ``"nic"`` for a NIC port fault, a switch name for a dead switch), so
    that bringing a switch back does not revive a link that was cut on its own.
    """

    __slots__ = ("name", "plane", "lower", "upper", "up_port", "down_port", "causes")

    def __init__(self, name: str, plane: int, up_port: OutPort, down_port: OutPort) -> None:
        self.name = name
        self.plane = plane
        self.up_port = up_port  # lower -> upper
        self.down_port = down_port  # upper -> lower
        self.lower = up_port.src
        self.upper = up_port.dst
        self.causes: set[str] = set()
        up_port.link = self
        down_port.link = self

    def __repr__(self) -> str:
        state = "up" if self.is_up else f"DOWN({','.join(sorted(self.causes))})"
        return f"<Link {self.name} {state}>"

    @property
    def ports(self) -> tuple[OutPort, OutPort]:
        return (self.up_port, self.down_port)

    @property
    def is_up(self) -> bool:
        return not self.causes

    def hold_down(self, cause: str) -> int:
        """Add a reason for the link to be down; returns packets lost from queues."""
        was_up = not self.causes
        self.causes.add(cause)
        if not was_up:
            return 0
        return self.up_port.set_down() + self.down_port.set_down()

    def release(self, cause: str) -> bool:
        """Remove one reason; returns True when that brought the link back up."""
        if cause not in self.causes:
            return False
        self.causes.discard(cause)
        if self.causes:
            return False
        self.down_port.set_up()
        self.up_port.set_up()  # last, so a NIC port that restarts pulling sees a live path
        return True


class Switch:
    """A T0 or T1 of one plane, forwarding by uSID shift-and-forward from static tables."""

    __slots__ = ("name", "net", "plane", "tier", "index", "usid", "_block", "_next", "_ua",
                 "uplinks", "downlinks", "up", "drops")

    def __init__(self, net: Network, name: str, plane: int, tier: int, index: int) -> None:
        self.name = name
        self.net = net
        self.plane = plane
        self.tier = tier  # 0 = leaf (T0), 1 = spine (T1)
        self.index = index
        self.usid = usid.t0_usid(index) if tier == 0 else usid.t1_usid(index)
        self._block = usid.block(plane)
        #: Lookup of the (possibly shifted) active uSID -> output port, no shift.
        #: T0: T1 uSIDs -> uplinks. T1: T0 uSIDs -> downlinks.
        self._next: dict[int, OutPort] = {}
        #: uA entries (T0 only): local port uSID -> downlink, shifted once more.
        self._ua: dict[int, OutPort] = {}
        self.uplinks: list[OutPort] = []
        self.downlinks: list[OutPort] = []
        self.up = True  # a dead switch also holds all its links down (mrc.sim.faults)
        self.drops: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<Switch {self.name}{'' if self.up else ' DOWN'}>"

    def build_tables(self, rules: Iterable[Rule]) -> None:
        """Expand the plan's static rules (:func:`topology.tables.switch_table`) into direct
        ``uSID -> port`` dicts, once, so forwarding is one dict lookup per hop."""
        self._next.clear()
        self._ua.clear()
        for rule in rules:
            for value in range(rule.first, rule.last + 1):
                if rule.action == tables.UN:
                    if value != self.usid:
                        raise ValueError(f"{self.name}: uN rule for foreign uSID {value:#06x}")
                    continue
                target = rule.next_base + (value - rule.first)
                if rule.next_kind == names.T1 and self.tier == 0:
                    port = self.uplinks[target]
                elif rule.next_kind == names.T0 and self.tier == 1:
                    port = self.downlinks[target]
                elif rule.next_kind == names.NIC_PORT and self.tier == 0:
                    port = self.downlinks[self.net.spec.port_of(target)]
                else:
                    raise ValueError(f"{self.name}: cannot reach {rule.next_kind} {target}")
                if rule.action == tables.FORWARD:
                    self._next[value] = port
                elif rule.action == tables.UA:
                    self._ua[value] = port
                else:
                    raise ValueError(f"{self.name}: unknown action {rule.action!r}")

    def receive(self, pkt: Packet) -> None:
        """Shift-and-forward: own uSID active -> shift (uN); look the active uSID up; a local
        port uSID (uA) shifts once more and leaves on that downlink; anything else is dropped.

        Packets from links arrive through ``OutPort._arrive_switch``, which inlines this; this
        method is the entry point for packets injected directly (tests, tools)."""
        if not self.up:
            self._count_drop(pkt, "down")
            return
        da = pkt.da
        if da >> 96 != self._block:
            self._no_route(pkt)
            return
        active = (da >> 80) & 0xFFFF
        while active == self.usid:  # uN (a carrier may name the same switch twice)
            da = (da & _BLOCK_MASK) | ((da << 16) & _CARRIER_MASK)
            active = (da >> 80) & 0xFFFF
        port = self._next.get(active)
        if port is None:
            port = self._ua.get(active)
            if port is None:
                self._no_route(pkt)
                return
            da = (da & _BLOCK_MASK) | ((da << 16) & _CARRIER_MASK)
        pkt.da = da
        port.send(pkt)

    def route(self, da: int) -> tuple[OutPort | None, int]:
        """The port and rewritten address :meth:`receive` would use (tests, tools)."""
        if da >> 96 != self._block:
            return None, da
        active = (da >> 80) & 0xFFFF
        while active == self.usid:
            da = usid.shift(da)
            active = usid.active(da)
        port = self._next.get(active)
        if port is None:
            port = self._ua.get(active)
            if port is None:
                return None, da
            da = usid.shift(da)
        return port, da

    def _no_route(self, pkt: Packet) -> None:
        self._count_drop(pkt, "no_route")

    def _count_drop(self, pkt: Packet, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if self.net.observer is not None:
            self.net.observer(self.net.sim.now, self.name, pkt, reason)

    @property
    def ports(self) -> list[OutPort]:
        return [*self.downlinks, *self.uplinks]

    def stats(self) -> dict[str, object]:
        row: dict[str, object] = {"switch": self.name, "plane": self.plane,
                                  "tier": f"t{self.tier}", "index": self.index, "up": self.up}
        row["drop_no_route"] = self.drops.get("no_route", 0)
        row["drop_down"] = self.drops.get("down", 0)
        for key in ("tx_packets", "trims", "ecn_marks"):
            row[key] = sum(getattr(p, key) for p in self.ports)
        row["drops"] = (sum(sum(p.drops.values()) for p in self.ports)
                        + sum(self.drops.values()))
        row["peak_queue_bytes"] = max((p.peak_qbytes for p in self.ports), default=0)
        return row


class Host:
    """A host (NIC) with one port per plane. It delivers what arrives to its agent and lets
    the agent fill idle ports (``HostAgent.pull``)."""

    __slots__ = ("name", "net", "index", "ports", "agent", "_on_receive", "rx_packets",
                 "rx_bytes", "drops")

    def __init__(self, net: Network, index: int, name: str) -> None:
        self.name = name
        self.net = net
        self.index = index
        self.ports: list[NicPort] = []  # by plane
        self.agent: HostAgent | None = None
        self._on_receive: Callable[[int, Packet], None] | None = None
        self.rx_packets = 0
        self.rx_bytes = 0
        self.drops: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<Host {self.name}>"

    def attach(self, agent: HostAgent) -> None:
        """Give the NIC to ``agent``; call ``kick_all`` (or let the agent do it) to start."""
        self.agent = agent
        self._on_receive = agent.on_receive

    def send_control(self, pkt: Packet) -> None:
        """Send on port ``pkt.plane``'s priority queue; dropped (and counted) if it is down."""
        self.ports[pkt.plane].send(pkt)

    def kick(self, plane: int) -> None:
        """The agent has something for ``plane``: an idle port pulls now."""
        self.ports[plane].kick()

    def kick_all(self) -> None:
        for port in self.ports:
            port.kick()

    def receive(self, pkt: Packet) -> None:
        if pkt.da & _CARRIER_MASK or pkt.dst != self.index:
            self.drops["misdelivered"] = self.drops.get("misdelivered", 0) + 1
            if self.net.observer is not None:
                self.net.observer(self.net.sim.now, self.name, pkt, "misdelivered")
            return
        self.rx_packets += 1
        self.rx_bytes += pkt.size
        if self._on_receive is not None:
            self._on_receive(self.net.sim.now, pkt)

    def stats(self) -> dict[str, object]:
        return {"host": self.name, "rx_packets": self.rx_packets, "rx_bytes": self.rx_bytes,
                "tx_packets": sum(p.tx_packets for p in self.ports),
                "drop_misdelivered": self.drops.get("misdelivered", 0),
                "ports_up": sum(p.up for p in self.ports)}
