"""What a NIC does for its queue pairs, in one place: the simulator's NIC and the live host
both drive their sans-IO QPs through :class:`NicDriver`.

It registers a host's QPs on its NIC ports (one per plane). An idle port *pulls* the next
data packet of its plane from the QPs that send on it (round robin); arriving packets are
handed to the QP their BTH names. After every call into a QP the driver sends the QP's
control packets, (re)arms the QP's timer and forwards its events. It hears the ports' link
state (loss of signal) and, while a port has no link, what a QP puts on it is lost on the spot.

Idle ports are woken in a rotating order (``_kick``): when a window-limited MRC QP frees
room for a few packets, the port asked first takes them, so a fixed order would hand a
congested sender's whole window to plane 0 and leave the last planes idle.

Cost rules (this runs a few times per packet): a QP only wakes the ports of the planes it
sends on (a port is idle only when every QP of its plane said "nothing" at its last pull,
and a QP's answer changes only inside a call that kicks its planes), so a receive-only QP
(MRC's responder side, RC responders) wakes nothing; and after a ``poll`` the QP's timer is
re-read only when the transport's ``poll_timer_floor_ps`` (the soonest deadline a poll can
create, relative to now) does not already lie beyond the timer the driver has armed.

Timers: one wake-up per QP, moved only when its deadline comes earlier. Nothing is ever
cancelled: a wake-up whose deadline has moved later re-arms itself, and one overtaken by an
earlier wake-up finds nothing due. So a runtime needs no more than this of its clock:

* a :class:`Scheduler`: ``now`` (the time of the call the runtime is in) and ``at(time_ps,
  fn, arg)``: the simulator's engine, or the live host's asyncio timers on the dilated clock;
* one :class:`PortSink` per plane: ``kick()`` (pull now if idle and up), ``send(pkt)`` (a
  control packet, out at once on the priority queue), ``drop_unsent(pkt)`` (lost on a port
  without link): the simulator's ``NicPort``, or the live host's paced socket port.

Two policies differ, and are said so: the simulator's ports pull from inside their own
transmit, so control a QP hands over during a poll waits for an event of its own
(``defer_polled_control``); and only the live host refuses a packet a QP raises on
(``strict=False``: a datagram must never stop the host; in the simulator that is a bug).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from mrc.packet import CNP, FLAG_RETX, PROBE, Packet
from mrc.sim.engine import Simulator
from mrc.sim.ports import OutPort
from mrc.sim.recorder import Recorder
from mrc.transport.base import QueuePair, TransportEvent

EventSink = Callable[[TransportEvent, QueuePair], None]
#: ``placed(now_ps, plane, nbytes)``: unique payload bytes placed by a QP of this host.
PlacedSink = Callable[[int, int, int], None]
#: ``counted(name, now_ps)``: "retransmissions" or "probes" (the recorder's counters).
CountSink = Callable[[str, int], None]
#: Counters the driver keeps (a runtime may keep more in the same dict).
COUNTERS = ("rx_unknown_qpn", "rx_rejected")


def poll_round_robin(senders: list[QueuePair], rr: list[int], now: int, plane: int
                     ) -> tuple[QueuePair, Packet] | None:
    """How a driver fills an idle port of ``plane``: ask the QPs that send on it in turn,
    starting after the last one served (``rr[plane]``), and return the first (QP, packet).
    The NIC driver's rule, shared by the simulator's NIC and the live host alike."""
    n = len(senders)
    if n == 1:
        qp = senders[0]
        pkt = qp.poll(now, plane)
        return None if pkt is None else (qp, pkt)
    start = rr[plane]
    for i in range(n):
        qp = senders[(start + i) % n]
        pkt = qp.poll(now, plane)
        if pkt is not None:
            rr[plane] = (start + i + 1) % n
            return qp, pkt
    return None


def drain_events(qp: QueuePair, on_event: Callable[[TransportEvent, QueuePair], None] | None
                 ) -> None:
    """Hand ``qp``'s pending events, in order, to the driver's sink (after every call into
    a QP)."""
    events = qp.events
    while events:
        event = events.popleft()
        if on_event is not None:
            on_event(event, qp)


class Scheduler(Protocol):
    """The clock a driver runs on."""

    @property
    def now(self) -> int: ...

    def at(self, time_ps: int, fn: Callable[[Any], None], arg: Any = None) -> None: ...


class PortSink(Protocol):
    """One NIC port, as the driver uses it."""

    plane: int

    def kick(self) -> None: ...

    def send(self, pkt: Packet) -> None: ...

    def drop_unsent(self, pkt: Packet) -> None: ...


def _ignore(*_: Any) -> None:
    pass


def _kick_port(port: PortSink) -> None:
    """``port.kick()``: a C call when compiled for the simulator's ports (``OutPort``, whose
    ``kick`` a NIC port overrides), where calling a method of an untyped object costs the
    method's lookup and Python's call protocol; other ports (the live host's) as they are."""
    if isinstance(port, OutPort):
        sim_port = port
        sim_port.kick()
    else:
        port.kick()


def _rotated(ports: Sequence[PortSink], start: int, n: int) -> list[PortSink]:
    """``ports`` by plane, from plane ``start`` on (a helper: the compiled build allows no
    closure inside the driver's methods)."""
    return sorted(ports, key=lambda p: (p.plane - start) % n)


class NicDriver:
    """Binds the QPs of one host to its NIC ports ``ports`` (by plane), on ``sched``."""

    def __init__(self, sched: Scheduler, ports: Sequence[PortSink], *,
                 on_event: EventSink | None = None, on_placed: PlacedSink | None = None,
                 on_count: CountSink | None = None, defer_polled_control: bool = False,
                 strict: bool = True, counters: Iterable[str] = COUNTERS) -> None:
        self.sched = sched
        #: ``sched`` when it is the simulator's engine: the driver calls it directly (a C call
        #: when compiled) instead of through the Scheduler protocol.
        self._sim: Simulator | None = sched if isinstance(sched, Simulator) else None
        self.ports = ports
        #: ``ports`` as a list (indexed in C when compiled)
        self._ports: list[PortSink] = list(ports)
        self.on_event = on_event
        #: Where goodput goes straight to (the simulator's NIC sets it; a C call when
        #: compiled, with no boxed arguments); None: to ``on_placed``.
        self.recorder: Recorder | None = None
        self._placed: PlacedSink = on_placed or _ignore
        self._count: CountSink = on_count or _ignore
        self._defer = defer_polled_control
        self.strict = strict
        self.qps: dict[int, QueuePair] = {}
        planes = len(ports)
        self._senders: list[list[QueuePair]] = [[] for _ in range(planes)]
        self._rr = [0] * planes
        # Per QP, on the QP itself (``QpBase.nic_ports``, ``nic_floor``, ``nic_timer``): the
        # ports it sends on, the soonest deadline a poll can create (``poll_timer_floor_ps``)
        # and the time of the wake-up armed for it.
        self._kick_from = 0
        #: planes whose NIC port has lost its link
        self._down: set[int] = set()
        self.counters: dict[str, int] = dict.fromkeys(counters, 0)
        #: Why the first packet a QP refused was refused (``strict=False`` only).
        self.first_rejection: str | None = None
        #: QPN -> the recorder of its transport, when several transports share the fabric
        #: (mixed runs: ``mrc.sim.mixed``); empty otherwise, and the sinks count everything.
        self.recorders: dict[int, Any] = {}
        # The wake-up callbacks, bound once (a bound method made per scheduling would be
        # allocated and freed every time).
        self._on_timer_cb = self._on_timer
        self._send_later_cb = self._send_later
        # The last two QPs packets were received for, most recent first: ``on_receive`` looks
        # a QPN up in ``qps`` (boxing and hashing it) only when it is neither, and a host's
        # arrivals mostly alternate between two QPs (data for the one that receives, ACKs
        # for the one that sends). Both are registered (``remove`` forgets them), which
        # ``_on_timer`` uses.
        self._rx_qpn = self._rx_qpn2 = -1
        self._rx_qp: QueuePair | None = None
        self._rx_qp2: QueuePair | None = None

    # ----------------------------------------------------------------- setup
    def add(self, qp: QueuePair, planes: Iterable[int]) -> None:
        """Register ``qp``; it may send on ``planes`` (all of them for MRC, one for RC, none
        for an endpoint that only answers: its control packets need no port to pull)."""
        if qp.qpn in self.qps:
            raise ValueError(f"QPN {qp.qpn} already used on this host")
        self.qps[qp.qpn] = qp
        mine = sorted(set(planes))
        for plane in mine:
            self._senders[plane].append(qp)
        qp.nic_ports = [self.ports[plane] for plane in mine]
        qp.nic_floor = int(getattr(qp, "poll_timer_floor_ps", 0) or 0)
        qp.nic_timer = -1

    def remove(self, qp: QueuePair) -> None:
        """Destroy ``qp`` here: it stops sending at once, its wake-up does nothing and later
        packets for it count as ``rx_unknown_qpn`` (what a NIC does with a torn-down QP)."""
        if self.qps.get(qp.qpn) is not qp:
            return
        del self.qps[qp.qpn]
        if self._rx_qp is qp or self._rx_qp2 is qp:
            self._rx_qpn = self._rx_qpn2 = -1
            self._rx_qp = self._rx_qp2 = None
        for senders in self._senders:
            if qp in senders:
                senders.remove(qp)
        qp.nic_ports = []
        qp.nic_floor = 0
        qp.nic_timer = -1

    # ----------------------------------------------------------------- the ports' side
    def pull(self, now: int, plane: int) -> Packet | None:
        """The port of ``plane`` is idle: the next data packet of its QPs, or None."""
        return self.pull_port(now, plane, getattr(self.ports[plane], "paused_priority", -1))

    def pull_port(self, now: int, plane: int, paused: int) -> Packet | None:
        """``pull`` for a port that says which priority PFC has paused on it (``paused``, -1:
        none), as the simulator's NIC ports do: no attribute looked up by name per packet."""
        senders = self._senders[plane]
        if paused < 0 and len(senders) == 1:  # one QP sends on this plane: ask it, no tuple
            qp = senders[0]
            pkt = qp.poll(now, plane)
            if pkt is None:
                return None
        else:
            if paused >= 0:  # PFC paused this port's lossless priority: its QPs wait
                senders = [qp for qp in senders if getattr(qp, "priority", 0) != paused]
            found = poll_round_robin(senders, self._rr, now, plane)
            if found is None:
                return None
            qp, pkt = found
        if pkt.flags & FLAG_RETX:
            self._counter(qp.qpn)("retransmissions", now)
        control = qp.take_control()
        if control:
            self._send_polled(control, now)
        floor = qp.nic_floor
        if floor:
            scheduled = qp.nic_timer
            if 0 <= scheduled <= now + floor:
                if qp.events:
                    drain_events(qp, self.on_event)
                return pkt  # a poll cannot have created a deadline before the armed timer
        self._arm(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)
        return pkt

    def on_receive(self, now: int, pkt: Packet) -> None:
        """A packet for this host: to the QP its BTH names, which is then served."""
        qpn = pkt.qpn
        qp = self._rx_qp if qpn == self._rx_qpn else None
        if qp is None:
            qp = self._rx_qp2 if qpn == self._rx_qpn2 else self.qps.get(qpn)
            if qp is None:
                self.counters["rx_unknown_qpn"] += 1
                return
            self._rx_qpn2 = self._rx_qpn
            self._rx_qp2 = self._rx_qp
            self._rx_qpn = qpn
            self._rx_qp = qp
        before = qp.bytes_placed
        if self.strict:  # (no exception handler to set up per packet)
            qp.receive(now, pkt)
        else:
            try:
                qp.receive(now, pkt)
            except Exception as exc:
                self.counters["rx_rejected"] += 1
                if self.first_rejection is None:
                    self.first_rejection = f"{type(exc).__name__}: {exc}"
        placed = qp.bytes_placed - before
        if placed:
            rec = self.recorders.get(pkt.qpn) if self.recorders else None
            if rec is not None:
                rec.placed(now, pkt.plane, placed)
            elif self.recorder is not None:
                self.recorder.placed(now, pkt.plane, placed)
            else:
                self._placed(now, pkt.plane, placed)
        self._service(qp, now)
        self._kick(qp, now)

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
            self._kick(qp, now)

    # ----------------------------------------------------------------- application side
    def post(self, qp: QueuePair, msg_id: int, length: int, payload: bytes | None = None) -> None:
        """Post an RDMA WRITE on ``qp`` now and wake the ports."""
        now = self.sched.now
        qp.post_write(now, msg_id, length, payload=payload)
        self._service(qp, now)
        self._kick(qp, now)

    def poke(self, qp: QueuePair) -> None:
        """Service ``qp`` after an API call that changed it (EVs denied or allowed, a post
        made directly on the QP)."""
        now = self.sched.now
        self._service(qp, now)
        self._kick(qp, now)

    # ----------------------------------------------------------------- internals
    def _kick(self, qp: QueuePair, now: int) -> None:
        """Wake the idle ports of ``qp``'s planes, starting one plane further on each call
        (fair share of a window that just opened)."""
        ports = self._ports
        n = len(ports)
        start = self._kick_from
        self._kick_from = start + 1 if start + 1 < n else 0
        mine = qp.nic_ports
        if len(mine) == n:
            for i in range(start, n):
                _kick_port(ports[i])
            for i in range(start):
                _kick_port(ports[i])
        elif len(mine) == 1:
            _kick_port(mine[0])
        elif mine:
            for port in _rotated(mine, start, n):
                _kick_port(port)
        if self._down:
            for port in mine:
                if port.plane in self._down:
                    self._send_into_dead_port(qp, port, now)

    def _send_into_dead_port(self, qp: QueuePair, port: Any, now: int) -> None:
        """What a QP transmits on a port without link is lost on the spot. Asking only when
        the QP's state changed (post, ACK, timer) bounds this by its window, with no event
        per packet time for the whole outage."""
        plane = port.plane
        for _ in range(1 << 16):
            pkt = qp.poll(now, plane)
            if pkt is None:
                break
            port.drop_unsent(pkt)
        control = qp.take_control()
        if control:
            self._send_polled(control, now)
        self._arm(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)

    def _service(self, qp: QueuePair, now: int) -> None:
        """Send ``qp``'s control packets, arm its timer and forward its events."""
        control = qp.take_control()
        if control:
            self._send_control(control, now)
        self._arm(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)

    def _arm(self, qp: QueuePair, now: int) -> None:
        """Schedule a wake-up for ``qp``'s earliest deadline unless one is armed before it."""
        next_timer = qp.next_timer()
        if next_timer is not None:
            deadline = next_timer  # (a C integer when compiled: compared unboxed)
            scheduled = qp.nic_timer
            if scheduled < 0 or deadline < scheduled:
                at = deadline if deadline > now else now
                qp.nic_timer = at
                self._at(at, self._on_timer_cb, qp)

    def _at(self, time_ps: int, fn: Callable[[Any], None], arg: Any) -> None:
        """``fn(arg)`` at ``time_ps`` on the driver's clock (the engine's: a C call)."""
        if self._sim is not None:
            self._sim.at(time_ps, fn, arg)
        else:
            self.sched.at(time_ps, fn, arg)

    def _send_polled(self, control: list[Packet], now: int) -> None:
        """Control a QP handed over while it was polled: now, or in an event of its own."""
        if self._defer:
            self._at(now, self._send_later_cb, control)
            return
        self._send_control(control, now)

    def _send_control(self, control: list[Packet], now: int) -> None:
        """Control leaves at once, each packet on its port's priority queue."""
        ports = self._ports
        for pkt in control:
            if pkt.kind == PROBE:
                self._counter(pkt.qpn)("probes", now)
            elif pkt.kind == CNP:
                self._counter(pkt.qpn)("cnps", now)
            port = ports[pkt.plane]
            if isinstance(port, OutPort):
                sim_port = port  # (typed: a C call when compiled)
                sim_port.send(pkt)
            else:
                port.send(pkt)

    def _counter(self, qpn: int) -> CountSink:
        if self.recorders:
            rec = self.recorders.get(qpn)
            if rec is not None:
                return rec.count  # type: ignore[no-any-return]
        return self._count

    def _send_later(self, control: list[Packet]) -> None:
        self._send_control(control, self.sched.now)

    def _on_timer(self, qp: QueuePair) -> None:
        if qp is not self._rx_qp and qp is not self._rx_qp2 and self.qps.get(qp.qpn) is not qp:
            return  # destroyed
        now = self._sim.now if self._sim is not None else self.sched.now
        armed = qp.nic_timer
        if 0 <= armed <= now:  # this wake-up (or one at its time) is it
            qp.nic_timer = -1
        next_timer = qp.next_timer()
        if next_timer is None:
            return
        deadline = next_timer  # (a C integer when compiled)
        if deadline <= now:
            qp.handle_timer(now)
            self._service(qp, now)
            self._kick(qp, now)
        elif qp.nic_timer < 0:
            qp.nic_timer = deadline
            self._at(deadline, self._on_timer_cb, qp)
