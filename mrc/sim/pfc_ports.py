"""A switch's port on a PFC fabric: ``PfcPort``, the output port with its three queues (the
NIC's is :mod:`mrc.sim.pfc_nic`). The mechanism, its model and its timing are described in
:mod:`mrc.sim.pfc`, which holds what both ports share (PAUSE frames, ingress accounting,
being paused, the watchdog).
"""

# mypy: disable-error-code="misc"
# (the pause state is set through the PauseState mixin, whose fields are declared here)
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mrc.packet import ECN_CE, ECN_NOT_ECT, PAUSE, Packet
from mrc.sim.fifo import Fifo
from mrc.sim.host import Host
from mrc.sim.pfc import PauseFrame, PauseState, PfcIngress
from mrc.sim.ports import LOST_EPOCH, OutPort
from mrc.units import PS_PER_US

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

if cython.compiled:  # the C function, not its Python wrapper
    from cython.cimports.mrc.packet import data_class  # type: ignore[import-not-found]
else:
    from mrc.packet import data_class

if TYPE_CHECKING:
    from mrc.sim.network import Network
    from mrc.sim.switch import Switch

# typed copies (compiled, C integers)
_ECN_CE = cython.declare(cython.longlong, ECN_CE)
_ECN_NOT_ECT = cython.declare(cython.longlong, ECN_NOT_ECT)
_PAUSE = cython.declare(cython.longlong, PAUSE)
_LOST_EPOCH = cython.declare(cython.longlong, LOST_EPOCH)


@cython.cclass
class PfcPort(OutPort, PauseState):
    """A switch output port on a PFC fabric: header, lossless and best-effort queues (see the
    module doc). The lossless queue holds ``(packet, ingress)`` pairs: whose bytes to release
    when the packet leaves."""

    # What every packet-hop reads first (as in OutPort: the C struct's order), then the rest
    # of PauseState's state and of PfcPort.
    ingress: PfcIngress
    pfc_prio: cython.longlong
    #: the host at the far end, if one is: ``arrive`` hands it packets with a C call when
    #: compiled (``_deliver``, its bound ``receive``, is a Python call)
    _host: Host | None
    _lqb: cython.longlong
    paused: cython.bint
    _turn: cython.bint  # the lossless queue's turn when both data queues have packets
    rx_stalled: cython.bint  # host-facing ports: the host stopped draining (a fault)
    storm: cython.bint
    lq: Fifo  # (packet, ingress) pairs
    _clock_at: cython.longlong  # time of the pending transmit clock (-1: none)
    _kmin: cython.longlong
    reverse: Any  # OutPort
    quantum_ps: cython.longlong
    pause_since: cython.longlong
    pause_gen: cython.longlong
    pause_until: cython.longlong
    pause_received: cython.longlong
    pause_sent: cython.longlong
    paused_ps: cython.longlong
    watchdog_ps: cython.longlong
    restore_ps: cython.longlong
    storms: cython.longlong
    last_pause_rx: cython.longlong
    _expire_cb: Callable[[int], None]
    _pause_cb: Callable[[PauseFrame], None]
    peak_lqbytes: cython.longlong
    _clock_cb: Callable[[Any], None]
    held: deque[Packet]  # what a stalled host holds in its receive buffer
    _kmax: cython.longlong
    _pslope: cython.double
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, net: Network, name: str, src: Host | Switch, dst: Host | Switch,
                 plane: int, *, far_latency_ps: int) -> None:
        super().__init__(net, name, src, dst, plane, far_latency_ps=far_latency_ps)
        self._init_pause(net.spec)
        self.lq = Fifo()
        self._lqb = 0
        self.peak_lqbytes = 0
        self._turn = False
        self._clock_at = -1
        self._clock_cb = self._clock
        self._pause_cb = self._pause_arrive
        self.rx_stalled = False
        self.held = deque()
        self._host = dst if isinstance(dst, Host) else None
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
    @cython.ccall
    @cython.annotation_typing(True)
    def send(self, pkt: Packet) -> None:
        """A packet injected at this port (tests, tools): no ingress to account it to."""
        self.send_from(pkt, None)

    @cython.ccall
    @cython.annotation_typing(True)
    def send_from(self, pkt: Packet, src: PfcIngress | None) -> None:
        """Admit ``pkt`` that came in through ``src``: transmit now if idle (and its class
        may go), else queue it by class (see the module doc)."""
        if not self.up:
            self._drop(pkt, "down")
            return
        now: cython.longlong = self.sim.now
        kind: cython.longlong = pkt.kind
        lossless: cython.bint = data_class(kind, pkt.flags) and pkt.prio == self.pfc_prio  # RC ACKs too
        if self.busy_until <= now:
            if self._hqb or self._qb or self._lqb:
                self._drain(now)
            if self.busy_until <= now and not (lossless and (self.paused or self.storm)):
                self.busy_until = self._transmit(pkt, now)
                return
        size: cython.longlong = pkt.size
        lqb: cython.longlong
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
        elif data_class(kind, pkt.flags) and not pkt.trimmed:
            self._admit(pkt, now)
        else:
            self._enqueue_header(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def _drain(self, now: cython.longlong) -> None:
        """``OutPort._drain`` with three queues: header first (a PAUSE frame leaves on its own
        arrival callback), then the data queues in turn, the lossless one only when not
        paused. A lossless departure releases its ingress bytes; the transmit clock makes
        sure that happens at the departure's own time."""
        t: cython.longlong = self.busy_until
        paused: cython.bint = self.paused
        turn: cython.bint = self._turn
        size: cython.longlong
        lqb: cython.longlong
        pkt: Packet
        src: PfcIngress
        # The queues are reached through ``self`` where one is popped, not loaded up front:
        # an MRC fabric's header and lossless queues are mostly empty, and each load would
        # touch a queue object (a cache miss at 1024 hosts) for nothing.
        while t <= now:  # (the byte counters say which queues hold packets: no deque test)
            if self._hqb:
                pkt = self.hq.popleft()
                self._hqb -= pkt.size
                if pkt.kind == _PAUSE:
                    t = self._transmit_frame(pkt, t)
                    continue
            elif self._lqb and not paused and (turn or not self._qb):
                pkt, src = self.lq.popleft()
                size = pkt.size
                lqb = self._lqb = self._lqb - size
                turn = False
                if lqb > self._kmin and pkt.ecn != _ECN_NOT_ECT and pkt.ecn != _ECN_CE and (
                        lqb >= self._kmax
                        or self._rng.random() < (lqb - self._kmin) * self._pslope):
                    self._mark(pkt, t)
                if src is not None:
                    src.release(size)
            elif self._qb:
                pkt = self.q.popleft()
                self._qb -= pkt.size
                turn = True
            else:
                break
            t = self._transmit(pkt, t)
        self.busy_until = t
        self._turn = turn

    @cython.ccall
    @cython.annotation_typing(True)
    def _arm_clock(self) -> None:
        t: cython.longlong = self.busy_until
        self._clock_at = t
        self.sim.schedule(t, self._clock_cb, None)

    @cython.ccall
    @cython.annotation_typing(True)
    def _clock(self, _: Any) -> None:
        """The transmit clock: start what is due now, and tick again at the next departure
        while lossless packets wait and may go."""
        now: cython.longlong = self.sim.now
        if self._clock_at != now:
            return  # superseded
        self._clock_at = -1
        if self.busy_until <= now and (self._hqb or self._qb or self._lqb):
            self._drain(now)
        if self.lq and not self.paused and self.busy_until > now:
            self._arm_clock()

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(False, check=True)
    def _arrival(self, pkt: Packet) -> cython.bint:
        """``OutPort._arrival`` with the lossless queue among the departures due."""
        if pkt.hop_epoch != self.epoch:
            self._lost(pkt)
            return False
        now: cython.longlong = self.sim.now
        if self.busy_until <= now and (self._hqb or self._qb or self._lqb):
            self._drain(now)
        self.delivered += 1
        if self._tap is not None:
            self._tap(now, self.name, pkt)
        return True

    @cython.ccall
    @cython.annotation_typing(True)
    def arrive(self, pkt: Packet) -> None:
        """``OutPort.arrive`` (a host at the far end), with the stalled-host case."""
        if not self._arrival(pkt):
            return
        if self.rx_stalled:
            self._stalled_rx(pkt)
            return
        if self._host is not None:
            self._host.receive(pkt)
        else:
            self._deliver(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def _arrive_switch(self, pkt: Packet) -> None:
        """``OutPort._arrive_switch``, telling the egress port which
        ingress the packet came through (``send_from``) for the lossless accounting."""
        port: PfcPort
        if self._arrival(pkt):
            port = self._far.forward(pkt)  # type: ignore[union-attr]
            if port is not None:
                port.send_from(pkt, self.ingress)  # type: ignore[union-attr]

    @cython.ccall
    @cython.annotation_typing(True)
    def _lost(self, pkt: Packet) -> None:
        now: cython.longlong = self.sim.now
        if pkt.hop_epoch == _LOST_EPOCH:
            self._drop(pkt, "loss")
            if self.busy_until <= now and (self._hqb or self._qb or self._lqb):
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
        if self.busy_until <= now and (self._hqb or self._qb or self._lqb):
            self._drain(now)
        if self.busy_until <= now:
            self.busy_until = self._transmit_frame(frame, now)
            return
        self.hq.appendleft(frame)
        self._hqb += frame.size
        if self._clock_at != self.busy_until:
            self._arm_clock()  # the frame starts when the one in flight ends: exactly then

    def _pause_begin(self, now: int) -> None:
        if self.busy_until <= now and (self._hqb or self._qb or self._lqb):
            self._drain(now)  # departures that began before the PAUSE arrived
        self.paused = True

    def _pause_end(self, now: int) -> None:
        if self.busy_until <= now and (self._hqb or self._qb or self._lqb):
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
        if (data_class(pkt.kind, pkt.flags) and pkt.prio == self.pfc_prio
                and self.ingress.charge(pkt.size)):
            self.held.append(pkt)
            return
        self._drop(pkt, "rx_stalled")

    # ------------------------------------------------------------------ slow path
    @cython.ccall
    @cython.annotation_typing(True)
    def sync(self) -> None:
        now = self.sim.now
        if self.busy_until <= now and (self._hqb or self._qb or self._lqb):
            self._drain(now)

    @cython.ccall
    @cython.annotation_typing(True)
    def backlog(self) -> tuple:  # tuple[int, int, int, int]
        """``(data bytes, data packets, header bytes, header packets)`` waiting now (both
        data queues), replaying the scheduler on copies: reading never perturbs a run."""
        now = self.sim.now
        hq = list(self.hq)
        q = list(self.q)
        lq = []
        for entry in self.lq:
            lq.append(entry[0])
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
        data_bytes = header_bytes = 0
        for pkt in data:  # (loops, not generators: the compiled build has no closures here)
            data_bytes += pkt.size
        for pkt in header:
            header_bytes += pkt.size
        return data_bytes, len(data), header_bytes, len(header)

    @cython.ccall
    @cython.annotation_typing(True)
    @cython.exceptval(-1, check=True)
    def set_down(self) -> cython.longlong:
        self.sync()
        lost = self._flush_lossless("link_down")
        self._stop_pause()
        self.ingress.reset()
        frames = [p for p in self.hq if p.kind == PAUSE]
        for frame in frames:  # MAC control frames die with the link, uncounted
            self.hq.remove(frame)
            self._hqb -= frame.size
        lost += OutPort.set_down(self)  # (explicit: the compiled build has no super() here)
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
