"""PFC (IEEE 802.1Qbb) on the simulated fabric: the lossless class RoCE RC runs on.

What a fabric with ``FabricSpec.pfc`` gets (``mrc.sim.fabric.build_network`` builds these
ports instead of the plain ones; a fabric without PFC runs the plain code, unchanged):

* **Traffic classes.** Every switch port has three queues: the strict-priority header queue
  (control: ACK, NACK, CNP, probes, trimmed headers, and PAUSE frames ahead of all of them),
  the **lossless** queue (untrimmed DATA whose ``prio`` is the fabric's ``pfc_priority``:
  RC's data as deployed) and the **best-effort** queue (every other DATA: MRC's, trimmed or
  dropped at ``buffer_bytes`` as before). The two data queues share the wire by packet round
  robin (DWRR with equal weights, one MTU per turn) when both have packets.
* **Buffer model: static per-queue.** The best-effort queue is limited by ``buffer_bytes``
  as on a lossy fabric. The lossless queue has no limit of its own: it is bounded by
  **ingress accounting**, as a real switch's lossless priority group is. Each port X counts,
  at its far end, the bytes that came in through X and still wait in some egress queue there
  (:class:`PfcIngress`). Above ``pfc_xoff_bytes`` the far end sends an XOFF PAUSE back to X;
  at or below ``pfc_xon_bytes`` an XON (a PAUSE with zero quanta). ``pfc_headroom_bytes``
  (at least :meth:`topology.spec.FabricSpec.pfc_min_headroom_bytes`) holds what still
  arrives after the XOFF; a lossless packet beyond ``xoff + headroom`` is dropped and counted
  as ``lossless_overflow``: a bug of the sizing, which the tests prove never happens. The two
  classes do not borrow each other's space (no shared pool, no dynamic thresholds).
* **PAUSE frames travel the link.** A PAUSE waits for the frame being sent on the reverse
  port (never for queued packets), serializes (84 wire bytes) and propagates; it is taken at
  the MAC, so no switch latency. It pauses the lossless priority of X only: X keeps sending
  control and best-effort packets. The pause lasts ``quanta`` x 512 bit times from its
  arrival, until an XON, or is refreshed: the far end repeats an XOFF every half pause time
  while its ingress stays above XON. A frame in transmission always completes.
* **ECN on the lossless queue** (DCQCN's congestion point): RED as the DCQCN paper sets it,
  ``lossless_ecn_kmin_bytes`` / ``lossless_ecn_kmax_bytes`` / ``lossless_ecn_pmax``: a
  departing packet is marked with a probability rising linearly from 0 at kmin to pmax at
  kmax of the lossless bytes still queued behind it, and always above kmax. Marking at
  departure makes the mark say what the queue is now, not what it was one queueing delay
  ago: with PFC the lossless queue can hold hundreds of microseconds, and marks that old
  make DCQCN cut long after the queue has drained. (The best-effort queue keeps its step
  marking at ``ecn_threshold_bytes`` on admission, unchanged.)
* **Exact timing.** A port whose lossless queue holds packets and is not paused runs on a
  transmit clock (one event per departure), so each lossless departure releases its ingress
  bytes, and any XON follows, at the picosecond it starts; a PAUSE frame queued behind a
  frame in flight starts on the same clock. Ports without lossless work stay lazy (one event
  per packet-hop, see :mod:`mrc.sim.ports`). Head-of-line blocking and pause spreading are
  not programmed anywhere: a paused port's lossless queue holds its ingress bytes, which
  pauses the ports feeding it, whatever their packets' destinations.
* **NICs.** A NIC port obeys PAUSE by not polling the QPs of the paused priority
  (``NicPort.paused_priority``; other QPs keep the port). A NIC's receive side drains at
  once, so it never pauses its T0, unless a fault stalls it (:meth:`PfcPort.set_rx_stall`:
  a stuck host): then lossless packets pile up in its receive buffer, it sends XOFF and keeps
  refreshing it for as long as it is stuck, and every other packet it receives is dropped.
* **Watchdog** (SONiC's, ``pfc_watchdog_us``; off by default): a switch port whose lossless
  egress stays paused that long is declared stormed: its lossless queue is dropped
  (``pfc_watchdog``), new lossless packets for it are dropped, and PAUSE frames it receives
  are ignored until none has come for ``pfc_watchdog_restore_us``.

The live runtime's fabric builds these ports too, but a packet read from a datagram carries no
priority yet (``Packet.prio`` is 0: the DSCP is not mapped back), so in live runs every class is
best effort and PFC stays idle there.

Counters per port (:meth:`PfcPort.pfc_counters`): PAUSE frames sent on it and received for
it, time its lossless egress spent paused, watchdog storms. ``Network.pause_hook`` hears each
pause and resume (the paused-ports series of the labs).
"""

# mypy: disable-error-code="misc"
# (_PauseState is a mixin with empty __slots__: the state it sets is declared as slots by
# the two ports that use it, which mypy cannot see through the mixin.)
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappush
from typing import TYPE_CHECKING, Any

from mrc.packet import DATA, ECN_CE, ECN_NOT_ECT, PAUSE, Packet
from mrc.sim.host import NicPort
from mrc.sim.ports import LOST_EPOCH, OutPort
from mrc.units import PS_PER_US
from topology import usid
from topology.spec import ETHERNET_OVERHEAD_BYTES

if TYPE_CHECKING:
    from mrc.sim.host import Host
    from mrc.sim.network import Network
    from mrc.sim.switch import Switch

_ETH = ETHERNET_OVERHEAD_BYTES
_BLOCK_MASK = usid.BLOCK_MASK
_CARRIER_MASK = usid.CARRIER_MASK


class PauseFrame(Packet):
    """A PFC frame for one priority: ``quanta`` x 512 bit times of pause, 0 = resume (XON)."""

    __slots__ = ("quanta",)

    def __init__(self, prio: int, quanta: int) -> None:
        super().__init__(PAUSE, -1, -1, 0, prio=prio)
        self.quanta = quanta

    def __repr__(self) -> str:
        return f"<PAUSE prio={self.prio} quanta={self.quanta}>"


class PfcIngress:
    """The lossless-class ingress accounting of one link direction, kept at its far end.

    ``port`` is the port whose traffic is counted (X); ``reverse`` the port that carries
    PAUSE frames back to X's sender. ``charge`` on admission to an egress queue, ``release``
    when the packet starts leaving (see the module doc for the thresholds).
    """

    __slots__ = ("port", "reverse", "sim", "prio", "bytes", "peak", "xoff", "xon", "limit",
                 "quanta", "refresh_ps", "xoff_state", "_gen", "xoff_frames", "xon_frames",
                 "overflows", "_refresh_cb")

    def __init__(self, port: OutPort, reverse: OutPort, *, prio: int, xoff: int, xon: int,
                 headroom: int, quanta: int, quantum_ps: int) -> None:
        self.port = port
        self.reverse = reverse
        self.sim = port.sim
        self.prio = prio
        self.bytes = 0
        self.peak = 0
        self.xoff = xoff
        self.xon = xon
        self.limit = xoff + headroom
        self.quanta = quanta
        self.refresh_ps = max(1, quanta * quantum_ps // 2)
        self.xoff_state = False  # an XOFF is in force (sent and not yet followed by XON)
        self._gen = 0
        self.xoff_frames = 0
        self.xon_frames = 0
        self.overflows = 0
        self._refresh_cb = self._refresh

    def charge(self, size: int) -> bool:
        """Admit ``size`` lossless bytes; False when even the headroom is full."""
        b = self.bytes + size
        if b > self.limit:
            self.overflows += 1
            return False
        self.bytes = b
        if b > self.peak:
            self.peak = b
        if b > self.xoff and not self.xoff_state:
            self.xoff_state = True
            self._gen += 1
            self._send(self.quanta)
            sim = self.sim
            heappush(sim.heap, (sim.now + self.refresh_ps, sim.next_seq(), self._refresh_cb,
                                self._gen))
        return True

    def release(self, size: int) -> None:
        """``size`` bytes left the far element's buffer (their departure started now)."""
        b = self.bytes - size
        self.bytes = b
        if self.xoff_state and b <= self.xon:
            self.xoff_state = False
            self._gen += 1
            self._send(0)

    def reset(self) -> None:
        """The link went down: forget the XOFF in force (a new one is sent if needed)."""
        self.xoff_state = False
        self._gen += 1

    def _send(self, quanta: int) -> None:
        if quanta:
            self.xoff_frames += 1
        else:
            self.xon_frames += 1
        self.reverse.send_pause(PauseFrame(self.prio, quanta))  # type: ignore[attr-defined]

    def _refresh(self, gen: int) -> None:
        """Still above XON half a pause time after the last XOFF: say it again."""
        if gen != self._gen or not self.xoff_state:
            return
        self._send(self.quanta)
        sim = self.sim
        heappush(sim.heap, (sim.now + self.refresh_ps, sim.next_seq(), self._refresh_cb, gen))


class _PauseState:
    """What PfcPort and PfcNicPort share: being paused by the far end, and the watchdog.

    A mixin without slots of its own (both ports declare the state); the hooks
    ``_pause_begin`` / ``_pause_end`` say what stopping and resuming means for each port.
    """

    __slots__ = ()

    if TYPE_CHECKING:  # the state, declared as slots by the concrete ports
        sim: Any
        net: Network
        name: str
        up: bool
        epoch: int
        reverse: OutPort
        ingress: PfcIngress
        pfc_prio: int
        quantum_ps: int
        paused: bool
        pause_since: int
        pause_gen: int
        pause_until: int
        pause_received: int
        pause_sent: int
        paused_ps: int
        watchdog_ps: int
        restore_ps: int
        storm: bool
        storms: int
        last_pause_rx: int
        _expire_cb: Callable[[int], None]
        _far: Switch | None
        _far_block: int
        _far_usid: int
        _far_next: dict[int, OutPort]
        _far_ua: dict[int, OutPort]
        _tap: Any

        def _pause_begin(self, now: int) -> None: ...
        def _pause_end(self, now: int) -> None: ...
        def _flush_lossless(self, reason: str) -> int: ...
        def _lost(self, pkt: Packet) -> None: ...
        def _drain(self, now: int) -> None: ...

    def _init_pause(self, spec: Any) -> None:
        self.pfc_prio = spec.pfc_priority
        self.quantum_ps = spec.pause_quantum_ps
        self.paused = False
        self.pause_since = 0
        self.pause_gen = 0
        self.pause_until = 0
        self.pause_received = 0
        self.pause_sent = 0
        self.paused_ps = 0
        self.watchdog_ps = int(round(spec.pfc_watchdog_us * PS_PER_US))
        self.restore_ps = max(1, int(round((spec.pfc_watchdog_restore_us or 0) * PS_PER_US)))
        self.storm = False
        self.storms = 0
        self.last_pause_rx = 0
        self._expire_cb = self._expire

    # ------------------------------------------------------------------ PAUSE frames
    def _pause_arrive(self, frame: PauseFrame) -> None:
        """A PAUSE frame sent on this port reached the far end: it is about the far end's
        sending toward us, i.e. the port in the other direction (``reverse``)."""
        if frame.hop_epoch != self.epoch:
            return  # lost on the wire (link down or random loss): the far end never hears it
        self.sync()  # type: ignore[attr-defined]  # also our own wake-up (mrc.sim.ports)
        self.reverse.on_pause_frame(frame)  # type: ignore[attr-defined]

    def on_pause_frame(self, frame: PauseFrame) -> None:
        """Obey a PAUSE for our lossless priority (or ignore it while stormed)."""
        now = self.sim.now
        self.pause_received += 1
        if self.storm:
            self.last_pause_rx = now
            return
        if frame.prio != self.pfc_prio:
            return
        if frame.quanta == 0:
            if self.paused:
                self._resume(now)
            return
        self.pause_gen += 1
        if not self.paused:
            self._pause_begin(now)
            self.pause_since = now
            hook = self.net.pause_hook
            if hook is not None:
                hook(now, 1)
            if self.watchdog_ps:
                self.sim.at(now + self.watchdog_ps, self._watchdog, now)
        self.pause_until = until = now + frame.quanta * self.quantum_ps
        heappush(self.sim.heap, (until, self.sim.next_seq(), self._expire_cb, self.pause_gen))

    def _expire(self, gen: int) -> None:
        if gen == self.pause_gen and self.paused:
            self._resume(self.sim.now)

    def _resume(self, now: int) -> None:
        self.paused_ps += now - self.pause_since
        self.pause_gen += 1
        hook = self.net.pause_hook
        if hook is not None:
            hook(now, -1)
        self._pause_end(now)

    def _stop_pause(self) -> None:
        """The link went down: whatever pause was in force is gone with it."""
        if self.paused:
            now = self.sim.now
            self.paused_ps += now - self.pause_since
            self.pause_gen += 1
            self.paused = False
            hook = self.net.pause_hook
            if hook is not None:
                hook(now, -1)

    # ------------------------------------------------------------------ watchdog
    def _watchdog(self, since: int) -> None:
        if not self.paused or self.pause_since != since or self.storm:
            return
        now = self.sim.now
        self.storm = True
        self.storms += 1
        self.last_pause_rx = now
        self._flush_lossless("pfc_watchdog")
        self._resume(now)
        self.sim.at(now + self.restore_ps, self._restore, None)

    def _restore(self, _: Any) -> None:
        now = self.sim.now
        due = self.last_pause_rx + self.restore_ps
        if now < due:
            self.sim.at(due, self._restore, None)
            return
        self.storm = False

    # ------------------------------------------------------------------ forwarding
    def _arrive_switch(self, pkt: Packet) -> None:
        """``OutPort._arrive_switch`` for a NIC port (whose departures need no catching up),
        telling the T0's egress port which ingress the packet came through."""
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return
        now = self.sim.now
        self.delivered += 1  # type: ignore[attr-defined]
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
        port.send_from(pkt, self.ingress)  # type: ignore[attr-defined]

    def pfc_counters(self) -> tuple[int, int, int, int]:
        """(PAUSE frames sent on this port, PAUSE frames received for it, ps its lossless
        egress was paused (up to now), watchdog storms)."""
        paused = self.paused_ps + (self.sim.now - self.pause_since if self.paused else 0)
        return self.pause_sent, self.pause_received, paused, self.storms


_PAUSE_SLOTS = ("reverse", "ingress", "pfc_prio", "quantum_ps", "paused", "pause_since",
                "pause_gen", "pause_until", "pause_received", "pause_sent", "paused_ps",
                "watchdog_ps", "restore_ps", "storm", "storms", "last_pause_rx", "_expire_cb",
                "_pause_cb")


class PfcPort(_PauseState, OutPort):
    """A switch output port on a PFC fabric: header, lossless and best-effort queues (see the
    module doc). The lossless queue holds ``(packet, ingress)`` pairs: whose bytes to release
    when the packet leaves."""

    __slots__ = (*_PAUSE_SLOTS, "lq", "_lqb", "peak_lqbytes", "_turn", "_clock_at",
                 "_clock_cb", "rx_stalled", "held", "_kmin", "_kmax", "_pslope")

    def __init__(self, net: Network, name: str, src: Host | Switch, dst: Host | Switch,
                 plane: int, *, far_latency_ps: int) -> None:
        super().__init__(net, name, src, dst, plane, far_latency_ps=far_latency_ps)
        self._init_pause(net.spec)
        self.lq: deque[tuple[Packet, PfcIngress | None]] = deque()
        self._lqb = 0
        self.peak_lqbytes = 0
        self._turn = False  # the lossless queue's turn when both data queues have packets
        self._clock_at = -1  # time of the pending transmit clock (-1: none)
        self._clock_cb = self._clock
        self._pause_cb = self._pause_arrive
        self.rx_stalled = False  # host-facing ports: the host stopped draining (a fault)
        self.held: deque[Packet] = deque()  # what a stalled host holds in its receive buffer
        spec = net.spec
        # WRED-style ECN on the lossless queue (DCQCN's congestion point): no mark up to
        # kmin, probability rising linearly to pmax at kmax, every packet beyond
        self._kmin = spec.lossless_ecn_kmin_bytes
        self._kmax = spec.lossless_ecn_kmax_bytes
        span = self._kmax - self._kmin
        self._pslope = spec.lossless_ecn_pmax / span if span > 0 else 0.0

    def __repr__(self) -> str:
        state = "up" if self.up else "DOWN"
        paused = " PAUSED" if self.paused else ""
        return (f"<PfcPort {self.name} {state}{paused} q={self.qbytes}B "
                f"lq={self._lqb}B hq={self.hqbytes}B>")

    # ------------------------------------------------------------------ hot path
    def send(self, pkt: Packet) -> None:
        """A packet injected at this port (tests, tools): no ingress to account it to."""
        self.send_from(pkt, None)

    def send_from(self, pkt: Packet, src: PfcIngress | None) -> None:
        """Admit ``pkt`` that came in through ``src``: transmit now if idle (and its class
        may go), else queue it by class (see the module doc)."""
        if not self.up:
            self._drop(pkt, "down")
            return
        now = self.sim.now
        kind = pkt.kind
        lossless = kind == DATA and pkt.prio == self.pfc_prio
        if self.busy_until <= now:
            if self.hq or self.q or self.lq:
                self._drain(now)
            if self.busy_until <= now and not (lossless and (self.paused or self.storm)):
                size = pkt.size
                ppb = self._ppb
                end = now + ((size + _ETH) * ppb if ppb else self.serialization_ps(size))
                self.busy_until = end
                pkt.hop_epoch = LOST_EPOCH if self.loss_p and self._lose() else self.epoch
                self.tx_packets += 1
                self.tx_bytes += size
                heappush(self._heap, (end + self._flight, self._seq(), self._arrive, pkt))
                return
        size = pkt.size
        if lossless:
            if self.storm:
                self._drop(pkt, "pfc_watchdog")
                return
            if src is not None and not src.charge(size):
                self._drop(pkt, "lossless_overflow")
                return
            lqb = self._lqb
            lqb += size
            self._lqb = lqb
            if lqb > self.peak_lqbytes:
                self.peak_lqbytes = lqb
            self.lq.append((pkt, src))
            if not self.paused and self._clock_at != self.busy_until:
                self._arm_clock()
        elif kind == DATA and not pkt.trimmed:
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
        """``OutPort._drain`` with three queues: header first (a PAUSE frame leaves on its own
        arrival callback), then the data queues in turn, the lossless one only when not
        paused. A lossless departure releases its ingress bytes; the transmit clock makes
        sure that happens at the departure's own time."""
        hq = self.hq
        q = self.q
        lq = self.lq
        t = self.busy_until
        heap = self._heap
        seq = self._seq
        arrive = self._arrive
        flight = self._flight
        ppb = self._ppb
        epoch = self.epoch
        paused = self.paused
        turn = self._turn
        while t <= now:
            if hq:
                pkt = hq.popleft()
                size = pkt.size
                self._hqb -= size
                if pkt.kind == PAUSE:
                    t += (size + _ETH) * ppb if ppb else self.serialization_ps(size)
                    pkt.hop_epoch = LOST_EPOCH if self.loss_p and self._lose() else epoch
                    heappush(heap, (t + self.delay_ps, seq(), self._pause_cb, pkt))
                    continue
            elif lq and not paused and (turn or not q):
                pkt, src = lq.popleft()
                size = pkt.size
                lqb = self._lqb = self._lqb - size
                turn = False
                if lqb > self._kmin and pkt.ecn != ECN_NOT_ECT and pkt.ecn != ECN_CE and (
                        lqb >= self._kmax
                        or self._rng.random() < (lqb - self._kmin) * self._pslope):
                    self._mark(pkt, t)
                if src is not None:
                    src.release(size)
            elif q:
                pkt = q.popleft()
                size = pkt.size
                self._qb -= size
                turn = True
            else:
                break
            t += (size + _ETH) * ppb if ppb else self.serialization_ps(size)
            pkt.hop_epoch = LOST_EPOCH if self.loss_p and self._lose() else epoch
            self.tx_packets += 1
            self.tx_bytes += size
            heappush(heap, (t + flight, seq(), arrive, pkt))
        self.busy_until = t
        self._turn = turn

    def _arm_clock(self) -> None:
        t = self.busy_until
        self._clock_at = t
        heappush(self._heap, (t, self._seq(), self._clock_cb, None))

    def _clock(self, _: Any) -> None:
        """The transmit clock: start what is due now, and tick again at the next departure
        while lossless packets wait and may go."""
        now = self.sim.now
        if self._clock_at != now:
            return  # superseded
        self._clock_at = -1
        if self.busy_until <= now and (self.hq or self.q or self.lq):
            self._drain(now)
        if self.lq and not self.paused and self.busy_until > now:
            self._arm_clock()

    def arrive(self, pkt: Packet) -> None:
        """``OutPort.arrive`` (a host at the far end), with the stalled-host case."""
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return
        now = self.sim.now
        if self.busy_until <= now and (self.hq or self.q or self.lq):
            self._drain(now)
        self.delivered += 1
        if self._tap is not None:
            self._tap(now, self.name, pkt)
        if self.rx_stalled:
            self._stalled_rx(pkt)
            return
        self._deliver(pkt)

    def _arrive_switch(self, pkt: Packet) -> None:
        """``OutPort._arrive_switch`` (keep them in step), telling the egress port which
        ingress the packet came through (``send_from``) for the lossless accounting."""
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return
        now = self.sim.now
        if self.busy_until <= now and (self.hq or self.q or self.lq):
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
        port.send_from(pkt, self.ingress)  # type: ignore[attr-defined]

    def _lost(self, pkt: Packet) -> None:
        now = self.sim.now
        if pkt.hop_epoch == LOST_EPOCH:
            self._drop(pkt, "loss")
            if self.busy_until <= now and (self.hq or self.q or self.lq):
                self._drain(now)
        else:
            self._drop(pkt, "link_down")

    # ------------------------------------------------------------------ PAUSE
    def send_pause(self, frame: PauseFrame) -> None:
        """Send a PFC frame now: ahead of every queued packet, after the frame in flight."""
        if not self.up:
            return
        now = self.sim.now
        self.pause_sent += 1
        if self.busy_until <= now and (self.hq or self.q or self.lq):
            self._drain(now)
        if self.busy_until <= now:
            size = frame.size
            ppb = self._ppb
            end = now + ((size + _ETH) * ppb if ppb else self.serialization_ps(size))
            self.busy_until = end
            frame.hop_epoch = LOST_EPOCH if self.loss_p and self._lose() else self.epoch
            heappush(self._heap, (end + self.delay_ps, self._seq(), self._pause_cb, frame))
            return
        self.hq.appendleft(frame)
        self._hqb += frame.size
        if self._clock_at != self.busy_until:
            self._arm_clock()  # the frame starts when the one in flight ends: exactly then

    def _pause_begin(self, now: int) -> None:
        if self.busy_until <= now and (self.hq or self.q or self.lq):
            self._drain(now)  # departures that began before the PAUSE arrived
        self.paused = True

    def _pause_end(self, now: int) -> None:
        if self.busy_until <= now and (self.hq or self.q or self.lq):
            self._drain(now)  # best effort that went while paused
        self.paused = False
        if self.busy_until < now:
            self.busy_until = now  # idle until now: the lossless queue starts now
        if self.lq:
            if self.busy_until <= now:
                self._drain(now)
            if self.lq and self.busy_until > now:
                self._arm_clock()

    def _flush_lossless(self, reason: str) -> int:
        """Drop every queued lossless packet (watchdog, link down), releasing its bytes."""
        lq = self.lq
        n = 0
        self.sync()
        while lq:
            pkt, src = lq.popleft()
            if src is not None:
                src.release(pkt.size)
            self._drop(pkt, reason)
            n += 1
        self._lqb = 0
        return n

    # ------------------------------------------------------------------ stalled host
    def set_rx_stall(self, stalled: bool) -> int:
        """The host at the far end stops (True) or resumes (False) draining its receive
        queue. Resuming delivers what it held, in order, now. Returns packets delivered."""
        if stalled:
            self.rx_stalled = True
            return 0
        self.rx_stalled = False
        held = self.held
        n = 0
        while held:
            pkt = held.popleft()
            self.ingress.release(pkt.size)
            self._deliver(pkt)
            n += 1
        return n

    def _stalled_rx(self, pkt: Packet) -> None:
        if pkt.kind == DATA and pkt.prio == self.pfc_prio and self.ingress.charge(pkt.size):
            self.held.append(pkt)
            return
        self._drop(pkt, "rx_stalled")

    # ------------------------------------------------------------------ slow path
    def sync(self) -> None:
        now = self.sim.now
        if self.busy_until <= now and (self.hq or self.q or self.lq):
            self._drain(now)

    def backlog(self) -> tuple[int, int, int, int]:
        """``(data bytes, data packets, header bytes, header packets)`` waiting now (both
        data queues), replaying the scheduler on copies: reading never perturbs a run."""
        now = self.sim.now
        hq = list(self.hq)
        q = list(self.q)
        lq = [p for p, _ in self.lq]
        t = self.busy_until
        turn = self._turn
        i = j = k = 0
        while t <= now:
            if i < len(hq):
                pkt = hq[i]
                i += 1
            elif k < len(lq) and not self.paused and (turn or j >= len(q)):
                pkt = lq[k]
                k += 1
                turn = False
            elif j < len(q):
                pkt = q[j]
                j += 1
                turn = True
            else:
                break
            t += self.serialization_ps(pkt.size)
        data = q[j:] + lq[k:]
        header = hq[i:]
        return (sum(p.size for p in data), len(data), sum(p.size for p in header),
                len(header))

    def set_down(self) -> int:
        self.sync()
        lost = self._flush_lossless("link_down")
        self._stop_pause()
        self.ingress.reset()
        frames = [p for p in self.hq if p.kind == PAUSE]
        for frame in frames:  # MAC control frames die with the link, uncounted
            self.hq.remove(frame)
            self._hqb -= frame.size
        lost += super().set_down()
        self._clock_at = -1
        return lost

    def stats(self) -> dict[str, object]:
        row = super().stats()
        sent, received, paused_ps, storms = self.pfc_counters()
        row.update({"lossless_queue_bytes": self._lqb, "peak_lossless_queue_bytes":
                    self.peak_lqbytes, "pause_sent": sent, "pause_received": received,
                    "paused_us": paused_ps / PS_PER_US, "ingress_peak_bytes":
                    self.ingress.peak, "watchdog_storms": storms})
        return row


class PfcNicPort(_PauseState, NicPort):
    """A NIC port on a PFC fabric: it stops polling the QPs of its paused priority (the NIC
    driver reads ``paused_priority``) and sends the PAUSE frames of its host's receive side
    ahead of everything it has queued. An agent that hands it a packet of the paused priority
    anyway (a plain traffic source) has that packet parked until the pause ends, and is not
    asked for more meanwhile: the wire never carries it while paused."""

    __slots__ = (*_PAUSE_SLOTS, "_parked")

    def __init__(self, net: Network, name: str, host: Host, dst: Switch, plane: int, *,
                 far_latency_ps: int) -> None:
        super().__init__(net, name, host, dst, plane, far_latency_ps=far_latency_ps)
        self._init_pause(net.spec)
        self._pause_cb = self._pause_arrive
        self._parked: Packet | None = None

    def _pause_begin(self, now: int) -> None:
        self.paused = True
        self.paused_priority = self.pfc_prio

    def _pause_end(self, now: int) -> None:
        self.paused = False
        self.paused_priority = -1
        self.kick()

    def _flush_lossless(self, reason: str) -> int:
        return 0  # a NIC holds no lossless queue: its QPs keep their own data

    def send_pause(self, frame: PauseFrame) -> None:
        if not self.up:
            return
        self.pause_sent += 1
        self.hq.appendleft(frame)
        self._hqb += frame.size
        if not self._pending:
            self._next(self.sim.now)

    def _next(self, now: int) -> None:
        """``NicPort._next`` (keep them in step), with PAUSE frames on their own callback."""
        self._pending = True
        hq = self.hq
        pkt: Packet | None
        if hq:
            pkt = hq.popleft()
            self._hqb -= pkt.size
        elif self._parked is not None and not self.paused:
            pkt = self._parked
            self._parked = None
        else:
            agent = self.host.agent
            pkt = None
            if agent is not None and self._parked is None:
                pkt = agent.pull(now, self.plane)
                if pkt is not None and pkt.prio == self.paused_priority and pkt.kind == DATA:
                    self._parked = pkt  # the agent ignored the pause: hold it back
                    pkt = None
            if pkt is None:
                if hq:
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
        pkt.hop_epoch = LOST_EPOCH if self.loss_p and self._lose() else epoch
        heap = self._heap
        seq = self._seq
        if pkt.kind == PAUSE:
            heappush(heap, (end + self.delay_ps, seq(), self._pause_cb, pkt))
        else:
            self.tx_packets += 1
            self.tx_bytes += size
            heappush(heap, (end + self._flight, seq(), self._arrive, pkt))
        heappush(heap, (end, seq(), self._tx_done_cb, epoch))

    def set_down(self) -> int:
        self._stop_pause()
        self.paused_priority = -1
        if self._parked is not None:
            self._drop(self._parked, "down")
            self._parked = None
        self.ingress.reset()
        return super().set_down()

    def stats(self) -> dict[str, object]:
        row = super().stats()
        sent, received, paused_ps, storms = self.pfc_counters()
        row.update({"pause_sent": sent, "pause_received": received,
                    "paused_us": paused_ps / PS_PER_US,
                    "ingress_peak_bytes": self.ingress.peak})
        return row


def wire_pfc(net: Network) -> None:
    """Give every port of a PFC fabric its reverse port and its far end's ingress
    accounting (called by ``build_network`` once all links exist)."""
    spec = net.spec
    xoff, xon = int(spec.pfc_xoff_bytes), int(spec.pfc_xon_bytes)  # type: ignore[arg-type]
    headroom = int(spec.pfc_headroom_bytes)  # type: ignore[arg-type]
    for link in net.links.values():
        a, b = link.up_port, link.down_port
        for port, reverse in ((a, b), (b, a)):
            port.reverse = reverse  # type: ignore[attr-defined]
            port.ingress = PfcIngress(  # type: ignore[attr-defined]
                port, reverse, prio=spec.pfc_priority, xoff=xoff, xon=xon, headroom=headroom,
                quanta=spec.pfc_quanta, quantum_ps=spec.pause_quantum_ps)
