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
  (``NicPort.paused_priority``; other QPs keep the port).
* **Where:** this module holds what every PFC port shares (PAUSE frames, ingress accounting,
  being paused, the watchdog; ``wire_pfc``); :mod:`mrc.sim.pfc_ports` the switch's port,
  :mod:`mrc.sim.pfc_nic` the NIC's. A NIC's receive side drains at once, so it never pauses
  its T0, unless a fault stalls it (:meth:`mrc.sim.pfc_ports.PfcPort.set_rx_stall`: a stuck
  host): then lossless packets pile up in its receive buffer, it sends XOFF and keeps
  refreshing it for as long as it is stuck, and every other packet it receives is dropped.
* **Watchdog** (SONiC's, ``pfc_watchdog_us``; off by default): a switch port whose lossless
  egress stays paused that long is declared stormed: its lossless queue is dropped
  (``pfc_watchdog``), new lossless packets for it are dropped, and PAUSE frames it receives
  are ignored until none has come for ``pfc_watchdog_restore_us``.

The live runtime's fabric builds these ports too, but a packet read from a datagram carries no
priority yet (``Packet.prio`` is 0: the DSCP is not mapped back), so in live runs every class is
best effort and PFC stays idle there.

Counters per port (:meth:`PauseState.pfc_counters`): PAUSE frames sent on it and received for
it, time its lossless egress spent paused, watchdog storms. ``Network.pause_hook`` hears each
pause and resume (the paused-ports series of the labs).
"""

# mypy: disable-error-code="misc"
# (PauseState is a mixin with empty __slots__: the state it sets is declared as slots by
# the two ports that use it, which mypy cannot see through the mixin.)
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mrc.packet import PAUSE, Packet
from mrc.sim.engine import Simulator
from mrc.sim.ports import LOST_EPOCH, OutPort
from mrc.units import PS_PER_US
from topology.spec import ETHERNET_OVERHEAD_BYTES

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if TYPE_CHECKING:
    from mrc.sim.network import Network
    from mrc.sim.switch import Switch

_ETH = ETHERNET_OVERHEAD_BYTES


@cython.cclass
class PauseFrame(Packet):
    """A PFC frame for one priority: ``quanta`` x 512 bit times of pause, 0 = resume (XON)."""

    quanta: cython.longlong
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, prio: int, quanta: int) -> None:
        super().__init__(PAUSE, -1, -1, 0, prio=prio)
        self.quanta = quanta

    def __repr__(self) -> str:
        return f"<PAUSE prio={self.prio} quanta={self.quanta}>"


@cython.cclass
class PfcIngress:
    """The lossless-class ingress accounting of one link direction, kept at its far end.

    ``port`` is the port whose traffic is counted (X); ``reverse`` the port that carries
    PAUSE frames back to X's sender. ``charge`` on admission to an egress queue, ``release``
    when the packet starts leaving (see the module doc for the thresholds).
    """

    port: Any  # OutPort
    reverse: Any  # OutPort
    sim: Simulator
    prio: cython.longlong
    bytes: cython.longlong
    peak: cython.longlong
    xoff: cython.longlong
    xon: cython.longlong
    limit: cython.longlong
    quanta: cython.longlong
    refresh_ps: cython.longlong
    xoff_state: cython.bint
    _gen: cython.longlong
    xoff_frames: cython.longlong
    xon_frames: cython.longlong
    overflows: cython.longlong
    _refresh_cb: Callable[[int], None]
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

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

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def charge(self, size: cython.longlong) -> cython.bint:
        """Admit ``size`` lossless bytes; False when even the headroom is full."""
        b: cython.longlong = self.bytes + size
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
            sim: Simulator = self.sim
            sim.schedule(sim.now + self.refresh_ps, self._refresh_cb, self._gen)
        return True

    @cython.ccall
    @cython.annotation_typing(True)
    def release(self, size: cython.longlong) -> None:
        """``size`` bytes left the far element's buffer (their departure started now)."""
        b: cython.longlong = self.bytes - size
        self.bytes = b
        if self.xoff_state and b <= self.xon:
            self.xoff_state = False
            self._gen += 1
            self._send(0)

    @cython.ccall
    @cython.annotation_typing(True)
    def reset(self) -> None:
        """The link went down: forget the XOFF in force (a new one is sent if needed)."""
        self.xoff_state = False
        self._gen += 1

    @cython.ccall
    @cython.annotation_typing(True)
    def _send(self, quanta: cython.longlong) -> None:
        if quanta:
            self.xoff_frames += 1
        else:
            self.xon_frames += 1
        self.reverse.send_pause(PauseFrame(self.prio, quanta))  # type: ignore[attr-defined]

    @cython.ccall
    @cython.annotation_typing(True)
    def _refresh(self, gen: cython.longlong) -> None:
        """Still above XON half a pause time after the last XOFF: say it again."""
        if gen != self._gen or not self.xoff_state:
            return
        self._send(self.quanta)
        sim: Simulator = self.sim
        sim.schedule(sim.now + self.refresh_ps, self._refresh_cb, gen)


class PauseState:
    """What PfcPort and PfcNicPort (:mod:`mrc.sim.pfc_ports`, :mod:`mrc.sim.pfc_nic`) share:
    being paused by the far end, and the watchdog.

    A mixin without slots of its own (both ports declare the state), the second base of
    each port (``class PfcPort(OutPort, PauseState)``: a compiled class has one C base, which
    comes first; a slot-less Python mixin may follow it). The hooks ``_pause_begin`` /
    ``_pause_end`` say what stopping and resuming means for each port.
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
        _pause_cb: Callable[[PauseFrame], None]
        _far: Switch | None
        _tap: Any
        loss_p: float
        delay_ps: int

        def _pause_begin(self, now: int) -> None: ...
        def _pause_end(self, now: int) -> None: ...
        def _flush_lossless(self, reason: str) -> int: ...
        def _lost(self, pkt: Packet) -> None: ...
        def _drain(self, now: int) -> None: ...
        def _lose(self) -> bool: ...
        def serialization_ps(self, size: int) -> int: ...

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
    def _transmit_frame(self, frame: Packet, start: int) -> int:
        """A PAUSE frame goes on the wire at ``start``: serialized and lost as a packet is
        (``OutPort._transmit``), but MAC control, so not counted, and taken at the far MAC,
        with no switch latency (``_pause_arrive``). Returns when the wire is free."""
        end = start + self.serialization_ps(frame.size)
        frame.hop_epoch = LOST_EPOCH if self.loss_p and self._lose() else self.epoch
        self.sim.schedule(end + self.delay_ps, self._pause_cb, frame)
        return end

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
        self.sim.schedule(until, self._expire_cb, self.pause_gen)

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

    def pfc_counters(self) -> tuple[int, int, int, int]:
        """(PAUSE frames sent on this port, PAUSE frames received for it, ps its lossless
        egress was paused (up to now), watchdog storms)."""
        paused = self.paused_ps + (self.sim.now - self.pause_since if self.paused else 0)
        return self.pause_sent, self.pause_received, paused, self.storms


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
