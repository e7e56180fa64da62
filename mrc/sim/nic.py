"""The simulator's driver around sans-IO queue pairs: one ``Nic`` per host.

It is the only place where transports meet the simulated network. It implements the
network's ``HostAgent`` hooks: an idle NIC port *pulls* the next data packet of its plane
from the QPs that use it (round robin), and arriving packets are handed to the QP their BTH
names. After every call into a QP it drains the QP's control packets onto the ports,
(re)schedules the QP's timer and forwards its events.

Idle ports are woken in a rotating order (``_kick``): when a window-limited MRC QP frees
room for a few packets, the port asked first takes them, so a fixed order would hand a
congested sender's whole window to plane 0 and leave the last planes idle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mrc.packet import FLAG_RETX, PROBE, Packet
from mrc.sim.engine import Simulator
from mrc.sim.recorder import Recorder
from mrc.transport.base import QueuePair, TransportEvent

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
        self._senders: list[list[QueuePair]] = [[] for _ in range(planes)]
        self._rr = [0] * planes
        self._timer_at: dict[int, int] = {}
        self._kick_from = 0
        self.unknown_qpn = 0
        host.attach(self)

    # ----------------------------------------------------------------- setup
    def add(self, qp: QueuePair, planes: list[int] | range) -> None:
        """Register ``qp``; it may send on ``planes`` (all of them for MRC, one for RC)."""
        if qp.qpn in self.qps:
            raise ValueError(f"QPN {qp.qpn} already used on this host")
        self.qps[qp.qpn] = qp
        for plane in planes:
            self._senders[plane].append(qp)

    def remove(self, qp: QueuePair) -> None:
        """Destroy ``qp`` here: it stops sending at once and later packets for it are
        counted as ``unknown_qpn`` (what a NIC does with a torn-down QP)."""
        self.qps.pop(qp.qpn, None)
        for senders in self._senders:
            if qp in senders:
                senders.remove(qp)
        self._timer_at.pop(qp.qpn, None)

    # ----------------------------------------------------------------- HostAgent hooks
    def pull(self, now: int, plane: int) -> Packet | None:
        senders = self._senders[plane]
        n = len(senders)
        if not n:
            return None
        start = self._rr[plane]
        for i in range(n):
            qp = senders[(start + i) % n]
            pkt = qp.poll(now, plane)
            if pkt is not None:
                self._rr[plane] = (start + i + 1) % n
                if pkt.flags & FLAG_RETX:
                    self.recorder.count("retransmissions", now)
                # control packets wait for an event of their own: we are inside the port
                self._service(qp, now, defer_control=True)
                return pkt
        return None

    def on_receive(self, now: int, pkt: Packet) -> None:
        qp = self.qps.get(pkt.qpn)
        if qp is None:
            self.unknown_qpn += 1
            return
        before = qp.bytes_placed
        qp.receive(now, pkt)
        placed = qp.bytes_placed - before
        if placed:
            self.recorder.placed(now, pkt.plane, placed)
        self._service(qp, now)
        self._kick()

    # ----------------------------------------------------------------- application side
    def post(self, qp: QueuePair, msg_id: int, length: int, payload: bytes | None = None) -> None:
        """Post an RDMA WRITE on ``qp`` now and wake the ports."""
        now = self.sim.now
        qp.post_write(now, msg_id, length, payload=payload)
        self._service(qp, now)
        self._kick()

    def poke(self, qp: QueuePair) -> None:
        """Service ``qp`` after an API call that changed it (e.g. EVs denied or allowed)."""
        self._service(qp, self.sim.now)
        self._kick()

    # ----------------------------------------------------------------- internals
    def _kick(self) -> None:
        """Wake every idle port, starting one plane further on each call (fair share of a
        window that just opened)."""
        ports = self.host.ports
        n = len(ports)
        start = self._kick_from
        self._kick_from = start + 1 if start + 1 < n else 0
        for i in range(start, n):
            ports[i].kick()
        for i in range(start):
            ports[i].kick()

    def _service(self, qp: QueuePair, now: int, defer_control: bool = False) -> None:
        if defer_control:
            control = qp.take_control()
            if control:
                self.sim.at(now, self._send_later, control)
        else:
            for pkt in qp.take_control():
                self._send_control(now, pkt)
        deadline = qp.next_timer()
        if deadline is not None:
            scheduled = self._timer_at.get(qp.qpn)
            if scheduled is None or deadline < scheduled:
                self._timer_at[qp.qpn] = max(deadline, now)
                self.sim.at(max(deadline, now), self._on_timer, qp)
        events = qp.events
        while events:
            event = events.popleft()
            if self.on_event is not None:
                self.on_event(event, qp)

    def _send_control(self, now: int, pkt: Packet) -> None:
        if pkt.kind == PROBE:
            self.recorder.count("probes", now)
        self.host.send_control(pkt)

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
            self._kick()
        elif deadline is not None and qp.qpn not in self._timer_at:
            self._timer_at[qp.qpn] = deadline
            self.sim.at(deadline, self._on_timer, qp)
