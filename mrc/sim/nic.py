"""The simulator's driver around sans-IO queue pairs: one ``Nic`` per host.

It is the only place where transports meet the simulated network. It implements the
network's ``HostAgent`` hooks: an idle NIC port *pulls* the next data packet of its plane
from the QPs that use it (round robin), and arriving packets are handed to the QP their BTH
names. After every call into a QP it drains the QP's control packets onto the ports,
(re)schedules the QP's timer and forwards its events.

Idle ports are woken in a rotating order (``_kick``): when a window-limited MRC QP frees
room for a few packets, the port asked first takes them, so a fixed order would hand a
congested sender's whole window to plane 0 and leave the last planes idle.

Cost rules (this runs a few times per packet): a QP only wakes the ports of the planes it
sends on (a port is idle only when every QP of its plane said "nothing" at its last pull,
and a QP's answer changes only inside a call that kicks its planes), so a receive-only QP
(MRC's responder side, RC responders) wakes nothing; and after a ``poll`` the QP's timer is
re-read only when the transport's ``poll_timer_floor_ps`` (the soonest deadline a poll can
create, relative to now) does not already lie beyond the timer the NIC has armed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mrc.packet import CNP, FLAG_RETX, PROBE, Packet
from mrc.sim.engine import Simulator
from mrc.sim.recorder import Recorder
from mrc.transport.base import QueuePair, TransportEvent, drain_events, poll_round_robin

EventSink = Callable[[TransportEvent, QueuePair], None]


class Nic:
    """Binds the QPs of one host to its NIC ports."""

    def __init__(self, sim: Simulator, host: Any, recorder: Recorder,
                 on_event: EventSink | None = None) -> None:
        self.sim = sim
        self.host = host
        self.recorder = recorder
        self.on_event = on_event
        self.qps: dict[int, QueuePair] = {}
        planes = len(host.ports)
        self._ports = host.ports
        self._senders: list[list[QueuePair]] = [[] for _ in range(planes)]
        #: planes each QP sends on (by QPN), and the soonest deadline a poll can create
        self._planes: dict[int, tuple[int, ...]] = {}
        self._floor: dict[int, int] = {}
        self._rr = [0] * planes
        self._timer_at: dict[int, int] = {}
        self._kick_from = 0
        #: planes whose NIC port has lost its link
        self._down: set[int] = set()
        self.unknown_qpn = 0
        #: QPN -> the recorder of its transport, when several share the fabric (mixed runs;
        #: empty otherwise, and ``recorder`` counts everything)
        self.recorders: dict[int, Recorder] = {}
        host.attach(self)

    # ----------------------------------------------------------------- setup
    def add(self, qp: QueuePair, planes: list[int] | range | tuple[int, ...]) -> None:
        """Register ``qp``; it may send on ``planes`` (all of them for MRC, one for RC, none
        for an endpoint that only answers)."""
        if qp.qpn in self.qps:
            raise ValueError(f"QPN {qp.qpn} already used on this host")
        self.qps[qp.qpn] = qp
        for plane in planes:
            self._senders[plane].append(qp)
        self._planes[qp.qpn] = tuple(sorted(set(planes)))
        self._floor[qp.qpn] = int(getattr(qp, "poll_timer_floor_ps", 0) or 0)

    def remove(self, qp: QueuePair) -> None:
        """Destroy ``qp`` here: it stops sending at once and later packets for it are
        counted as ``unknown_qpn`` (what a NIC does with a torn-down QP)."""
        self.qps.pop(qp.qpn, None)
        for senders in self._senders:
            if qp in senders:
                senders.remove(qp)
        self._timer_at.pop(qp.qpn, None)
        self._planes.pop(qp.qpn, None)
        self._floor.pop(qp.qpn, None)

    # ----------------------------------------------------------------- HostAgent hooks
    def pull(self, now: int, plane: int) -> Packet | None:
        senders = self._senders[plane]
        paused = self._ports[plane].paused_priority
        if paused >= 0:  # PFC paused this port's lossless priority: its QPs wait
            senders = [qp for qp in senders if getattr(qp, "priority", 0) != paused]
        found = poll_round_robin(senders, self._rr, now, plane)
        if found is None:
            return None
        qp, pkt = found
        if pkt.flags & FLAG_RETX:
            self._rec(qp.qpn).count("retransmissions", now)
        # control packets wait for an event of their own: we are inside the port
        control = qp.take_control()
        if control:
            self.sim.at(now, self._send_later, control)
        floor = self._floor[qp.qpn]
        if floor:
            scheduled = self._timer_at.get(qp.qpn)
            if scheduled is not None and scheduled <= now + floor:
                if qp.events:
                    drain_events(qp, self.on_event)
                return pkt  # a poll cannot have created a deadline before the armed timer
        self._arm(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)
        return pkt

    def on_receive(self, now: int, pkt: Packet) -> None:
        qp = self.qps.get(pkt.qpn)
        if qp is None:
            self.unknown_qpn += 1
            return
        before = qp.bytes_placed
        qp.receive(now, pkt)
        placed = qp.bytes_placed - before
        if placed:
            rec = self.recorders.get(pkt.qpn, self.recorder) if self.recorders \
                else self.recorder
            rec.placed(now, pkt.plane, placed)
        self._service(qp, now)
        self._kick(qp)

    def on_port_state(self, now: int, plane: int, up: bool) -> None:
        """The NIC port of ``plane`` lost or regained its link (the NIC sees loss of signal).

        MRC QPs are told at once (``port_down`` marks that plane's EVs ASSUMED_BAD; probes
        bring them back once the link returns). RC QPs are not: as on a real HCA they keep
        transmitting into the dead port, time out, retry and finally error.
        """
        if up:
            self._down.discard(plane)
        else:
            self._down.add(plane)
        for qp in list(self._senders[plane]):
            port_down = getattr(qp, "port_down", None)
            if not up and port_down is not None:
                port_down(now, plane)
            self._service(qp, now)
            self._kick(qp)

    # ----------------------------------------------------------------- application side
    def post(self, qp: QueuePair, msg_id: int, length: int, payload: bytes | None = None) -> None:
        """Post an RDMA WRITE on ``qp`` now and wake the ports."""
        now = self.sim.now
        qp.post_write(now, msg_id, length, payload=payload)
        self._service(qp, now)
        self._kick(qp)

    def poke(self, qp: QueuePair) -> None:
        """Service ``qp`` after an API call that changed it (e.g. EVs denied or allowed)."""
        self._service(qp, self.sim.now)
        self._kick(qp)

    # ----------------------------------------------------------------- internals
    def _kick(self, qp: QueuePair) -> None:
        """Wake the idle ports of ``qp``'s planes, starting one plane further on each call
        (fair share of a window that just opened)."""
        ports = self._ports
        n = len(ports)
        start = self._kick_from
        self._kick_from = start + 1 if start + 1 < n else 0
        planes = self._planes.get(qp.qpn, ())
        if len(planes) == n:
            for i in range(start, n):
                ports[i].kick()
            for i in range(start):
                ports[i].kick()
        elif len(planes) == 1:
            ports[planes[0]].kick()
        elif planes:
            for i in sorted(planes, key=lambda p: (p - start) % n):
                ports[i].kick()
        if self._down:
            for plane in planes:
                if plane in self._down:
                    self._send_into_dead_port(qp, plane)

    def _send_into_dead_port(self, qp: QueuePair, plane: int) -> None:
        """What a QP transmits on a port without link is lost on the spot. Asking only when
        the QP's state changed (post, ACK, timer) bounds this by its window, with no event
        per packet time for the whole outage."""
        now = self.sim.now
        port = self._ports[plane]
        for _ in range(1 << 16):
            pkt = qp.poll(now, plane)
            if pkt is None:
                break
            port.drop_unsent(pkt)
        control = qp.take_control()
        if control:
            self.sim.at(now, self._send_later, control)
        self._arm(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)

    def _service(self, qp: QueuePair, now: int) -> None:
        """Send ``qp``'s control packets, arm its timer and forward its events."""
        control = qp.take_control()
        if control:
            ports = self._ports
            for pkt in control:
                if pkt.kind == PROBE:
                    self._rec(pkt.qpn).count("probes", now)
                elif pkt.kind == CNP:
                    self._rec(pkt.qpn).count("cnps", now)
                ports[pkt.plane].send(pkt)
        self._arm(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)

    def _arm(self, qp: QueuePair, now: int) -> None:
        """Schedule a wake-up for ``qp``'s earliest deadline unless one is armed before it."""
        deadline = qp.next_timer()
        if deadline is not None:
            scheduled = self._timer_at.get(qp.qpn)
            if scheduled is None or deadline < scheduled:
                at = deadline if deadline > now else now
                self._timer_at[qp.qpn] = at
                self.sim.at(at, self._on_timer, qp)

    def _rec(self, qpn: int) -> Recorder:
        return self.recorders.get(qpn, self.recorder) if self.recorders else self.recorder

    def _send_control(self, now: int, pkt: Packet) -> None:
        if pkt.kind == PROBE:
            self._rec(pkt.qpn).count("probes", now)
        elif pkt.kind == CNP:
            self._rec(pkt.qpn).count("cnps", now)
        self._ports[pkt.plane].send(pkt)

    def _send_later(self, control: list[Packet]) -> None:
        now = self.sim.now
        for pkt in control:
            self._send_control(now, pkt)

    def _on_timer(self, qp: QueuePair) -> None:
        if self.qps.get(qp.qpn) is not qp:
            return  # destroyed
        now = self.sim.now
        if self._timer_at.get(qp.qpn) == now:
            del self._timer_at[qp.qpn]
        deadline = qp.next_timer()
        if deadline is not None and deadline <= now:
            qp.handle_timer(now)
            self._service(qp, now)
            self._kick(qp)
        elif deadline is not None and qp.qpn not in self._timer_at:
            self._timer_at[qp.qpn] = deadline
            self.sim.at(deadline, self._on_timer, qp)
