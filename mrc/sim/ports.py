"""Output ports: one direction of a link, its queues and its wire.

A port serializes each packet at its rate, exactly; the packet then propagates for the link
delay and spends the far switch's latency (see :mod:`mrc.sim.network` for the model). A packet
crossing a hop costs exactly one heap event, its arrival, congested or not:

* A port remembers ``busy_until``. A packet reaching an idle port starts serializing at once and
  its arrival at the far end is scheduled directly (``OutPort._transmit``: the one transmit
  step, every port's).
* Packets that wait need no "transmit done" event either. Departures are computed lazily: the
  port catches up (``_drain``) whenever something touches it -- a new packet to admit, or the
  arrival of one of its own packets at the far end. That is exact: between two catch-ups nothing
  was enqueued, so the order and start time of every departure is already fixed, and a started
  packet's arrival (one propagation after its end) always comes before the next departure's
  arrival is due. Only NIC ports (:mod:`mrc.sim.host`) keep a transmit-done event, because
  they ask the host's agent for the next packet at the moment the wire frees up.
* Forwarding runs inline in the arrival callback (``_arrive_switch`` inlines
  ``Switch.receive``).
* Packets carry ``hop_epoch`` = the epoch of the port that sent them; taking a port down bumps
  its epoch, so packets on the wire die when they "arrive" without anyone searching the heap.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Final

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.packet import ECN_CE, ECN_NOT_ECT, Packet

if cython.compiled:  # the C function, not its Python wrapper
    from cython.cimports.mrc.packet import data_class  # type: ignore[import-not-found]
else:
    from mrc.packet import data_class
from mrc.sim.element import DROP_REASONS, Fabric, Node, Tap
from mrc.sim.engine import Handler, Simulator
from mrc.sim.fifo import Fifo
from mrc.sim.link import Link
from mrc.sim.switch import Switch
from mrc.units import PS_PER_S
from topology.spec import ETHERNET_OVERHEAD_BYTES

#: Bits per byte times picoseconds per second: serialization = bytes * this / bps (ceiling).
_PS_BITS = cython.declare(cython.longlong, 8 * PS_PER_S)
_ETH = cython.declare(cython.longlong, ETHERNET_OVERHEAD_BYTES)
# typed copies (compiled, C integers)
_ECN_CE = cython.declare(cython.longlong, ECN_CE)
_ECN_NOT_ECT = cython.declare(cython.longlong, ECN_NOT_ECT)
#: ``hop_epoch`` of a packet that random loss took: no port ever has this epoch.
LOST_EPOCH: Final = -1


@cython.cclass
class OutPort(Handler):
    """One direction of a link: the sender's output queue plus the wire to the far end.

    Two queues: a FIFO data queue limited to ``buffer_bytes`` and a strict-priority header
    queue (``header_queue_bytes``) for trimmed DATA and for every other packet, except RoCE RC's
    ACKs and NAKs, which queue as data (``mrc.packet.data_class``). A DATA packet
    that does not fit the data queue within ``trim_threshold_bytes`` is trimmed to
    ``trim_size_bytes`` and sent on the header queue instead (or dropped if trimming is off).
    An ECN-capable DATA packet admitted while the data queue already holds more than
    ``ecn_threshold_bytes`` is marked CE. Queue occupancy counts packets waiting, not the one
    being serialized. ``tx_*`` count
    packets put on the wire (IPv6 bytes); ``delivered`` those that reached the far end.

    Departures are computed lazily (see the module doc): the queues may still hold packets
    whose transmission has virtually begun. Read occupancy through ``qbytes``/``hqbytes``/
    :meth:`backlog`, which account for that without changing anything.
    """

    # In the order of the C struct: first what every packet-hop reads or writes (send, the
    # drain, the arrival), so a port gone cold since its last packet costs two or three
    # cache lines per hop rather than six; configuration and rare counters after.
    sim: Simulator
    up: cython.bint
    _pending: cython.bint  # NIC ports: a transmit-done event is in the heap
    busy_until: cython.longlong
    epoch: cython.longlong
    _ppb: cython.longlong
    _flight: cython.longlong
    _qb: cython.longlong  # bytes in ``q`` (including packets that virtually left)
    _hqb: cython.longlong
    _arrive: Callable[[Packet], None]
    loss_p: cython.double
    tx_packets: cython.longlong
    tx_bytes: cython.longlong
    delivered: cython.longlong
    hq: Fifo
    _tap: Tap | None
    _far: Switch | None
    peak_hqbytes: cython.longlong
    header_limit: cython.longlong
    q: Fifo  # (a Fifo, not a deque: C calls when compiled)
    _admit_limit: cython.longlong
    ecn_threshold: cython.longlong
    peak_qbytes: cython.longlong
    _deliver: Callable[[Packet], None]
    name: Any  # str
    net: Fabric
    link: Link[OutPort] | None
    plane: cython.longlong
    src: Node
    dst: Node
    _rng: random.Random
    nominal_bps: cython.longlong
    bps: cython.longlong
    delay_ps: cython.longlong
    far_latency_ps: cython.longlong
    buffer_bytes: cython.longlong
    trim_threshold: cython.longlong
    trim_size: cython.longlong
    trimming: cython.bint
    trims: cython.longlong
    ecn_marks: cython.longlong
    drops: dict[str, int]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, net: Fabric, name: str, src: Node, dst: Node,
                 plane: int, *, far_latency_ps: int) -> None:
        spec = net.spec
        sim = net.sim
        self.name = name
        self.net = net
        self.link = None
        self.plane = plane
        self.src = src
        self.dst = dst
        self.sim = sim
        self._rng = sim.rng
        # The callback of this port's packets' arrivals at the far end, bound once (a bound
        # method per event would allocate). A switch at the far end forwards from the arrival
        # itself: one call less per hop. Compiled, it is the port itself: a Handler, which
        # the engine calls in C (``fire``); in pure Python the bound method is one call less.
        far = dst if isinstance(dst, Switch) else None
        self._far = far
        if cython.compiled:
            self._arrive = self
        else:
            self._arrive = self._arrive_switch if far is not None else self.arrive
        self._deliver = dst.receive
        self.nominal_bps = spec.link_bps
        self.bps = spec.link_bps
        self._ppb = 0
        self.delay_ps = spec.link_delay_ps
        self.far_latency_ps = far_latency_ps
        self._flight = self.delay_ps + far_latency_ps
        self.up = True
        self.epoch = 0
        self.busy_until = 0
        self._pending = False
        self.q = Fifo()
        self.hq = Fifo()
        self._qb = 0
        self._hqb = 0
        # (the byte counts also say whether a queue holds anything: every packet has bytes,
        # and the hot paths test them rather than the queues, which they need not touch)
        self.buffer_bytes = spec.buffer_bytes
        self.trim_threshold = int(spec.trim_threshold_bytes)  # type: ignore[arg-type]
        self.trimming = spec.trimming
        self._admit_limit = self.trim_threshold if self.trimming else self.buffer_bytes
        self.trim_size = spec.trim_size_bytes
        self.header_limit = spec.header_queue_bytes
        self.ecn_threshold = spec.ecn_threshold_bytes
        self.loss_p = 0.0
        self._tap = net.tap
        self.tx_packets = 0
        self.tx_bytes = 0
        self.delivered = 0
        self.trims = 0
        self.ecn_marks = 0
        self.peak_qbytes = 0
        self.peak_hqbytes = 0
        self.drops = {}
        self._set_bps(spec.link_bps)

    def __repr__(self) -> str:
        state = "up" if self.up else "DOWN"
        return f"<OutPort {self.name} {state} q={self.qbytes}B hq={self.hqbytes}B>"

    # ------------------------------------------------------------------ hot path
    @cython.cfunc
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def _transmit(self, pkt: Packet, start: cython.longlong) -> cython.longlong:
        """The transmit step, the one every port runs (here, ``NicPort`` and the PFC ports):
        ``pkt`` goes on the wire at ``start``, serialized at the port's rate (random loss
        takes it now, to be found at its arrival), is counted, and its arrival at the far
        end is scheduled, the only event its hop needs. Returns when the wire is free."""
        size: cython.longlong = pkt.size
        ppb: cython.longlong = self._ppb
        end: cython.longlong = start + ((size + _ETH) * ppb if ppb else self.serialization_ps(size))
        pkt.hop_epoch = LOST_EPOCH if self.loss_p and self._lose() else self.epoch
        self.tx_packets += 1
        self.tx_bytes += size
        self.sim.schedule(end + self._flight, self._arrive, pkt)
        return end

    @cython.ccall
    @cython.annotation_typing(True)
    def send(self, pkt: Packet) -> None:
        """Admit ``pkt``: transmit now if idle, else queue it (trim, mark or drop)."""
        if not self.up:
            self._drop(pkt, "down")
            return
        now: cython.longlong = self.sim.now
        if self.busy_until <= now:
            if self._hqb or self._qb:
                self._drain(now)  # departures due by now, before this packet is admitted
            if self.busy_until <= now:
                self.busy_until = self._transmit(pkt, now)
                return
        if data_class(pkt.kind, pkt.flags) and not pkt.trimmed:  # RC's ACKs too
            self._admit(pkt, now)
        else:
            self._enqueue_header(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def _admit(self, pkt: Packet, now: cython.longlong) -> None:
        """Buffer admission of a DATA packet that must wait: queue it (ECN-marked past the
        threshold), or past the admission limit trim it to its header (or drop it when
        trimming is off)."""
        size: cython.longlong = pkt.size
        qb: cython.longlong = self._qb
        if qb + size <= self._admit_limit:
            if qb > self.ecn_threshold and pkt.ecn != _ECN_NOT_ECT and pkt.ecn != _ECN_CE:
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

    @cython.ccall
    @cython.annotation_typing(True)
    def _drain(self, now: cython.longlong) -> None:
        """Start every queued packet whose turn came by ``now`` (header queue first), each at
        the moment the previous one finished. Exact because nothing was enqueued since the
        last drain: every send() drains first, and each started packet's arrival (at least a
        propagation later than its end) drains again, before the next start is overdue."""
        hq: Fifo = self.hq
        q: Fifo = self.q
        t: cython.longlong = self.busy_until
        pkt: Packet
        while t <= now:
            if hq:
                pkt = hq.popleft()
                self._hqb -= pkt.size
            elif q:
                pkt = q.popleft()
                self._qb -= pkt.size
            else:
                break
            t = self._transmit(pkt, t)
        self.busy_until = t

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def _arrival(self, pkt: Packet) -> cython.bint:
        """The bookkeeping of every arrival at the far end: False if the link lost the
        packet (counted by ``_lost``); else departures due by now go first, then the
        packet is counted and tapped."""
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return False
        now: cython.longlong = self.sim.now
        if self.busy_until <= now and (self._hqb or self._qb):
            self._drain(now)
        self.delivered += 1
        if self._tap is not None:
            self._tap(now, self.name, pkt)
        return True

    @cython.cfunc
    @cython.annotation_typing(True)
    def fire(self, pkt: object) -> cython.void:
        """The arrival of ``pkt`` at the far end, as the engine calls it (``_arrive``)."""
        if self._far is not None:
            self._arrive_switch(cython.cast(Packet, pkt))
        else:
            self.arrive(cython.cast(Packet, pkt))

    @cython.ccall
    @cython.annotation_typing(True)
    def arrive(self, pkt: Packet) -> None:
        """The packet reached the far end (a host; switches use ``_arrive_switch``)."""
        if self._arrival(pkt):
            self._deliver(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def _arrive_switch(self, pkt: Packet) -> None:
        """``arrive`` at a switch: the arrival's bookkeeping, then ``Switch.forward``."""
        port: OutPort
        if self._arrival(pkt):
            port = self._far.forward(pkt)  # type: ignore[union-attr]
            if port is not None:
                port.send(pkt)

    # ------------------------------------------------------------------ slow path
    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def _lose(self) -> cython.bint:
        return self._rng.random() < self.loss_p

    @cython.ccall
    @cython.annotation_typing(True)
    def _lost(self, pkt: Packet) -> None:
        """A packet that did not make it across: random loss, or the port went down (its
        epoch moved on) while it was on the wire. Still drains: the arrival is also this
        port's wake-up."""
        now = self.sim.now
        if pkt.hop_epoch == LOST_EPOCH:
            self._drop(pkt, "loss")
            if self.busy_until <= now and (self._hqb or self._qb):
                self._drain(now)
        else:
            self._drop(pkt, "link_down")

    @cython.ccall
    @cython.annotation_typing(True)
    def _mark(self, pkt: Packet, now: cython.longlong) -> None:
        pkt.ecn = _ECN_CE
        self.ecn_marks += 1
        if self.net.observer is not None:
            self.net.observer(now, self.name, pkt, "ecn")

    @cython.ccall
    @cython.annotation_typing(True)
    def _trim(self, pkt: Packet, now: cython.longlong) -> None:
        pkt.trimmed = True  # the trim DSCP re-mark is implied by ``trimmed``
        pkt.size = self.trim_size
        self.trims += 1
        if self.net.observer is not None:
            self.net.observer(now, self.name, pkt, "trim")

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def _enqueue_header(self, pkt: Packet) -> cython.bint:
        hqb: cython.longlong = self._hqb + pkt.size
        if hqb > self.header_limit:
            self._drop(pkt, "header_queue")
            return False
        self._hqb = hqb
        if hqb > self.peak_hqbytes:
            self.peak_hqbytes = hqb
        self.hq.append(pkt)
        return True

    @cython.ccall
    @cython.annotation_typing(True)
    def _drop(self, pkt: Packet, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if self.net.observer is not None:
            self.net.observer(self.sim.now, self.name, pkt, reason)

    @cython.ccall
    @cython.annotation_typing(True)
    def sync(self) -> None:
        """Apply departures due by now (before a change of rate, loss or state)."""
        now = self.sim.now
        if self.busy_until <= now and (self._hqb or self._qb):
            self._drain(now)

    @cython.ccall
    @cython.annotation_typing(True)
    def backlog(self) -> tuple:  # tuple[int, int, int, int]
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

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def set_down(self) -> cython.longlong:
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

    @cython.ccall
    @cython.annotation_typing(True)
    def set_up(self) -> None:
        if self.up:
            return
        self.up = True
        self.busy_until = self.sim.now

    @cython.ccall
    @cython.annotation_typing(True)
    def set_rate_fraction(self, fraction: Any) -> None:  # (a float)
        """Serialize later packets at ``fraction`` of the nominal rate (packets already on
        the wire keep the rate they started with)."""
        if not 0 < fraction <= 1:
            raise ValueError(f"rate fraction must be in (0, 1], got {fraction}")
        self.sync()
        self._set_bps(max(1, int(round(self.nominal_bps * fraction))))

    @cython.ccall
    @cython.annotation_typing(True)
    def _set_bps(self, bps: cython.longlong) -> None:
        self.bps = bps
        # Whole picoseconds per byte (80 at 100 Gb/s) turn serialization into one multiply.
        self._ppb = _PS_BITS // bps if _PS_BITS % bps == 0 else 0

    @cython.ccall
    @cython.annotation_typing(True)
    def set_loss(self, p: Any) -> None:  # (a float)
        """Lose each packet that starts crossing from now on with probability ``p``."""
        if not 0 <= p <= 1:
            raise ValueError(f"loss probability must be in [0, 1], got {p}")
        self.sync()
        self.loss_p = float(p)

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def serialization_ps(self, size: cython.longlong) -> cython.longlong:
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
