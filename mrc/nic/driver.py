"""What a NIC does for its queue pairs, in one place: the simulator's NIC and the live host
both drive their sans-IO QPs through :class:`NicDriver`.

It registers a host's QPs on its NIC ports (one per plane) and keeps, per QP, a
:class:`QpContext` (a NIC's QP context): the ports the QP sends on, its timer and where its
goodput is recorded; the transport's QP knows nothing of it. An idle port *pulls* the next
data packet of its plane from the QPs that send on it (round robin); arriving packets are
handed to the QP their BTH names. After every call into a QP the driver sends the QP's
control packets, (re)arms the QP's timer and forwards its events. It hears the ports' link
state (loss of signal) and, while a port has no link, what a QP puts on it is lost on the spot.

A pull only hands a packet back to the port: nothing in it calls into a port or an event
handler (which might wake the very port that is pulling). What a poll leaves behind besides
its packet, control packets or events (no transport of this package leaves either today),
is served in an event of its own at the same time.

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
earlier wake-up finds nothing due. So a runtime needs no more than this of its clock
(:class:`~mrc.nic.runtime.Scheduler`: ``now``, ``at``); its ports are
:class:`~mrc.nic.runtime.PortSink` s (``kick``, ``send``, ``drop_unsent``).

Only the live host refuses a packet a QP raises on (``strict=False``: a datagram must never
stop the host; in the simulator that is a bug).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mrc.nic.context import QpContext, poll_round_robin
from mrc.nic.runtime import PortSink, RecorderSink, Scheduler
from mrc.packet import CNP, FLAG_RETX, PROBE, Packet
from mrc.transport.base import QueuePair, TransportEvent
from mrc.transport.qp_base import QpBase

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

# typed copies (compiled, C integers)
_CNP = cython.declare(cython.longlong, CNP)
_FLAG_RETX = cython.declare(cython.longlong, FLAG_RETX)
_PROBE = cython.declare(cython.longlong, PROBE)

EventSink = Callable[[TransportEvent, QueuePair], None]
#: Placement gaps longer than this are kept until a stack sets its own floor: 50 us.
GAP_FLOOR_PS = 50_000_000
#: Counters the driver keeps (a runtime may keep more in the same dict).
COUNTERS = ("rx_unknown_qpn", "rx_rejected")


@cython.ccall
@cython.annotation_typing(True)
def drain_events(qp: QpBase, on_event: EventSink | None) -> None:
    """Hand ``qp``'s pending events, in order, to the driver's sink (after every call into
    a QP)."""
    events = qp.events
    while events:
        event = events.popleft()
        if on_event is not None:  # (a transport's QpBase is a QueuePair)
            on_event(event, qp)  # type: ignore[arg-type]


def _rotated(ports: Sequence[PortSink], start: int, n: int) -> list[PortSink]:
    """``ports`` by plane, from plane ``start`` on (a helper: the compiled build allows no
    closure inside the driver's methods)."""
    return sorted(ports, key=lambda p: (p.plane - start) % n)


@cython.cclass
class NicDriver:
    """Binds the QPs of one host to its NIC ports ``ports`` (by plane), on ``sched``;
    goodput and counters go to ``recorder``, transport events to ``on_event``."""

    # What a packet sent or received reads first (the last two QPs received for, the
    # clock, the recorder, the sending QPs, the timer's callback), in the C struct's first
    # cache lines; the rest after. The last two QPs packets were received for, most recent
    # first: ``on_receive`` looks a QPN up (boxing and hashing it) only when it is neither,
    # and a host's arrivals mostly alternate between two QPs (data for the one that
    # receives, ACKs for the one that sends). Both are registered (``remove`` forgets them).
    _rx_qpn: cython.longlong
    _rx_qpn2: cython.longlong
    _rx_ctx: QpContext | None
    _rx_ctx2: QpContext | None
    sched: Scheduler
    #: where goodput and counters go (a QP registered with a recorder of its own, in a
    #: mixed run, sends its goodput and retransmissions there)
    recorder: RecorderSink
    strict: cython.bint
    _senders: list[list[QpContext]]
    _rr: list[int]
    ports: list[PortSink]
    #: planes whose NIC port has lost its link
    _down: set[int]
    # The wake-up callbacks, bound once (a bound method made per scheduling would be
    # allocated and freed every time).
    _on_timer_cb: Callable[[QpContext], None]
    _kick_from: cython.Py_ssize_t
    _after_poll_cb: Callable[[tuple[QpContext, list[Packet]]], None]
    #: QPN -> context, of every QP ever registered (``registered`` says which still are)
    _contexts: dict[int, QpContext]
    #: placement gaps longer than this are kept per QP (``QpContext.gaps``); the stack sets
    #: its stall threshold here (mrc.stack.stalls)
    gap_floor_ps: cython.longlong
    on_event: EventSink | None
    counters: dict[str, int]
    #: Why the first packet a QP refused was refused (``strict=False`` only).
    first_rejection: Any  # str | None
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(self, sched: Scheduler, ports: Sequence[PortSink], *,
                 on_event: EventSink | None = None, recorder: RecorderSink | None = None,
                 strict: bool = True, counters: Iterable[str] = COUNTERS) -> None:
        self.sched = sched
        self.ports = list(ports)
        self.on_event = on_event
        self.recorder = recorder if recorder is not None else RecorderSink()
        self.strict = strict
        self.gap_floor_ps = GAP_FLOOR_PS
        self._contexts = {}
        planes = len(self.ports)
        self._senders = [[] for _ in range(planes)]
        self._rr = [0] * planes
        self._kick_from = 0
        self._down = set()
        self.counters = dict.fromkeys(counters, 0)
        self.first_rejection = None
        self._on_timer_cb = self._on_timer
        self._after_poll_cb = self._after_poll
        self._rx_qpn = self._rx_qpn2 = -1
        self._rx_ctx = None
        self._rx_ctx2 = None

    # ----------------------------------------------------------------- setup
    def add(self, qp: QueuePair, planes: Iterable[int],
            recorder: RecorderSink | None = None) -> None:
        """Register ``qp``; it may send on ``planes`` (all of them for MRC, one for RC, none
        for an endpoint that only answers: its control packets need no port to pull).
        ``recorder``: where its goodput goes, if not to the driver's."""
        ctx = self._contexts.get(qp.qpn)
        if ctx is not None and ctx.registered:
            raise ValueError(f"QPN {qp.qpn} already used on this host")
        if ctx is None or ctx.qp is not qp:
            ctx = QpContext(qp, self.recorder)
            self._contexts[qp.qpn] = ctx
        if recorder is not None:
            ctx.recorder = recorder
        mine = sorted(set(planes))
        for plane in mine:
            self._senders[plane].append(ctx)
        ctx.ports = [self.ports[plane] for plane in mine]
        ctx.floor = int(getattr(qp, "poll_timer_floor_ps", 0) or 0)
        ctx.timer = -1
        ctx.registered = True

    def remove(self, qp: QueuePair) -> None:
        """Destroy ``qp`` here: it stops sending at once, its wake-up does nothing and later
        packets for it count as ``rx_unknown_qpn`` (what a NIC does with a torn-down QP)."""
        ctx = self.context(qp)
        if ctx is None:
            return
        ctx.registered = False
        if self._rx_ctx is ctx or self._rx_ctx2 is ctx:
            self._rx_qpn = self._rx_qpn2 = -1
            self._rx_ctx = self._rx_ctx2 = None
        for senders in self._senders:
            if ctx in senders:
                senders.remove(ctx)
        ctx.ports = []
        ctx.floor = 0
        ctx.timer = -1

    def context(self, qp: QueuePair) -> QpContext | None:
        """``qp``'s context while it is registered here, else None."""
        ctx = self._contexts.get(qp.qpn)
        return ctx if ctx is not None and ctx.registered and ctx.qp is qp else None

    def holds(self, qp: QueuePair) -> bool:
        """Whether ``qp`` is registered here."""
        return self.context(qp) is not None

    @property
    def qps(self) -> dict[int, QueuePair]:
        """The registered QPs by QPN."""
        # (a transport's QpBase is a QueuePair)
        return {qpn: ctx.qp for qpn, ctx in self._contexts.items()  # type: ignore[misc]
                if ctx.registered}

    # ----------------------------------------------------------------- the ports' side
    @cython.ccall
    @cython.annotation_typing(True)
    def pull(self, now: cython.longlong, plane: cython.longlong,
             paused: cython.longlong = -1) -> Any:  # Packet | None
        """The port of ``plane`` is idle: the next data packet of its QPs, or None.
        ``paused``: the priority PFC has paused on that port (-1: none); its QPs wait."""
        ctx: QpContext
        pkt: Packet | None
        senders: list = self._senders[plane]
        if paused < 0 and len(senders) == 1:  # one QP sends on this plane: ask it, no tuple
            ctx = senders[0]
            pkt = ctx.qp.poll(now, plane)
            if pkt is None:
                return None
        else:
            if paused >= 0:
                senders = [c for c in senders if getattr(c.qp, "priority", 0) != paused]
            found = poll_round_robin(senders, self._rr, now, plane)
            if found is None:
                return None
            ctx, pkt = found
        if pkt.flags & _FLAG_RETX:
            ctx.recorder.count("retransmissions", now)
            ctx.last_retx = now
        qp: QpBase = ctx.qp
        control: list = qp.take_control()
        if control or qp.events:  # (``_defer_leftovers``, written out: once per packet)
            self.sched.at(now, self._after_poll_cb, (ctx, control))
        floor: cython.longlong = ctx.floor
        scheduled: cython.longlong
        if floor:
            scheduled = ctx.timer
            if 0 <= scheduled <= now + floor:
                return pkt  # a poll cannot have created a deadline before the armed timer
        self._arm(ctx, now)
        return pkt

    @cython.ccall
    @cython.annotation_typing(True)
    def on_receive(self, now: cython.longlong, pkt: Packet) -> None:
        """A packet for this host: to the QP its BTH names, which is then served."""
        qpn: cython.longlong = pkt.qpn
        ctx: QpContext | None = self._rx_ctx if qpn == self._rx_qpn else None
        if ctx is None:
            ctx = self._rx_ctx2 if qpn == self._rx_qpn2 else self._contexts.get(qpn)
            if ctx is None or not ctx.registered:
                self.counters["rx_unknown_qpn"] += 1
                return
            self._rx_qpn2 = self._rx_qpn
            self._rx_ctx2 = self._rx_ctx
            self._rx_qpn = qpn
            self._rx_ctx = ctx
        qp: QpBase = ctx.qp
        before: cython.longlong = qp.bytes_placed
        if self.strict:  # (no exception handler to set up per packet)
            qp.receive(now, pkt)
        else:
            try:
                qp.receive(now, pkt)
            except Exception as exc:
                self.counters["rx_rejected"] += 1
                if self.first_rejection is None:
                    self.first_rejection = f"{type(exc).__name__}: {exc}"
        placed: cython.longlong = qp.bytes_placed - before
        if placed:
            ctx.recorder.placed(now, pkt.plane, placed)
            last: cython.longlong = ctx.last_placed
            if last >= 0 and now - last > self.gap_floor_ps and pkt.flags & _FLAG_RETX:
                ctx.gaps.append((last, now))
            ctx.last_placed = now
        self._service(ctx, now)
        self._kick(ctx, now)

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
        for ctx in list(self._senders[plane]):
            port_down = getattr(ctx.qp, "port_down", None)
            if not up and port_down is not None:
                port_down(now, plane)
            self._service(ctx, now)
            self._kick(ctx, now)

    # ----------------------------------------------------------------- application side
    def post(self, qp: QueuePair, msg_id: int, length: int, payload: bytes | None = None) -> None:
        """Post an RDMA WRITE on ``qp`` now and wake the ports."""
        ctx = self._contexts[qp.qpn]
        now = self.sched.now()
        qp.post_write(now, msg_id, length, payload=payload)
        self._service(ctx, now)
        self._kick(ctx, now)

    def poke(self, qp: QueuePair) -> None:
        """Service ``qp`` after an API call that changed it (EVs denied or allowed, a post
        made directly on the QP)."""
        ctx = self._contexts[qp.qpn]
        now = self.sched.now()
        self._service(ctx, now)
        self._kick(ctx, now)

    # ----------------------------------------------------------------- internals
    @cython.ccall
    @cython.annotation_typing(True)
    def _kick(self, ctx: QpContext, now: cython.longlong) -> None:
        """Wake the idle ports of ``ctx``'s planes, starting one plane further on each call
        (fair share of a window that just opened)."""
        port: PortSink
        i: cython.Py_ssize_t
        ports: list = self.ports
        n: cython.Py_ssize_t = len(ports)
        start: cython.Py_ssize_t = self._kick_from
        self._kick_from = start + 1 if start + 1 < n else 0
        mine: list = ctx.ports
        if len(mine) == n:
            for i in range(start, n):
                port = ports[i]
                port.kick()
            for i in range(start):
                port = ports[i]
                port.kick()
        elif len(mine) == 1:
            port = mine[0]
            port.kick()
        elif mine:
            for port in _rotated(mine, start, n):
                port.kick()
        if self._down:
            for port in mine:
                if port.plane in self._down:
                    self._send_into_dead_port(ctx, port, now)

    @cython.ccall
    @cython.annotation_typing(True)
    def _send_into_dead_port(self, ctx: QpContext, port: PortSink,
                             now: cython.longlong) -> None:
        """What a QP transmits on a port without link is lost on the spot. Asking only when
        the QP's state changed (post, ACK, timer) bounds this by its window, with no event
        per packet time for the whole outage."""
        plane = port.plane
        qp: QpBase = ctx.qp
        pkt: Packet | None
        for _ in range(1 << 16):
            pkt = qp.poll(now, plane)
            if pkt is None:
                break
            if pkt.flags & FLAG_RETX:
                ctx.last_retx = now
            port.drop_unsent(pkt)
        self._defer_leftovers(ctx, now)
        self._arm(ctx, now)

    @cython.ccall
    @cython.annotation_typing(True)
    def _defer_leftovers(self, ctx: QpContext, now: cython.longlong) -> None:
        """After polls: what they left behind besides their packets (control packets,
        events) is served in an event of its own at ``now`` (``_after_poll``), so that a
        pull never calls into a port or an event handler."""
        qp: QpBase = ctx.qp
        control: list = qp.take_control()
        if control or qp.events:
            self.sched.at(now, self._after_poll_cb, (ctx, control))

    @cython.ccall
    @cython.annotation_typing(True)
    def _service(self, ctx: QpContext, now: cython.longlong) -> None:
        """Send ``ctx``'s QP's control packets, arm its timer and forward its events."""
        qp: QpBase = ctx.qp
        control: list = qp.take_control()
        if control:
            self._send_control(control, now, ctx)
        self._arm(ctx, now)
        if qp.events:
            drain_events(qp, self.on_event)

    @cython.ccall
    @cython.annotation_typing(True)
    def _arm(self, ctx: QpContext, now: cython.longlong) -> None:
        """Schedule a wake-up for the QP's earliest deadline unless one is armed before it."""
        next_timer = ctx.qp.next_timer()
        if next_timer is not None:
            deadline: cython.longlong = next_timer  # (compared unboxed)
            scheduled: cython.longlong = ctx.timer
            if scheduled < 0 or deadline < scheduled:
                at: cython.longlong = deadline if deadline > now else now
                ctx.timer = at
                self.sched.at(at, self._on_timer_cb, ctx)

    @cython.ccall
    @cython.annotation_typing(True)
    def _send_control(self, control: list, now: cython.longlong,  # list[Packet]
                      ctx: QpContext) -> None:
        """``ctx``'s QP's control leaves at once, each packet on its port's priority queue.
        Its probes and CNPs count on the recorder of the QP they name when that is this one
        (an RC responder's name its own QP), else on the driver's (MRC's name the peer's)."""
        pkt: Packet
        port: PortSink
        recorder: RecorderSink
        ports: list = self.ports
        for pkt in control:
            kind: cython.longlong = pkt.kind
            if kind == _PROBE or kind == _CNP:
                recorder = ctx.recorder if pkt.qpn == ctx.qp.qpn else self.recorder
                recorder.count("probes" if kind == _PROBE else "cnps", now)
            port = ports[pkt.plane]
            port.send(pkt)

    @cython.ccall
    @cython.annotation_typing(True)
    def _after_poll(self, job: tuple) -> None:  # tuple[QpContext, list[Packet]]
        """What a poll left behind besides its packet (see the module doc), at its time."""
        ctx: QpContext
        control: list
        ctx, control = job
        if control:
            self._send_control(control, self.sched.now(), ctx)
        if ctx.qp.events:
            drain_events(ctx.qp, self.on_event)

    @cython.ccall
    @cython.annotation_typing(True)
    def _on_timer(self, ctx: QpContext) -> None:
        if not ctx.registered:
            return  # destroyed
        qp: QpBase = ctx.qp
        now: cython.longlong = self.sched.now()
        armed: cython.longlong = ctx.timer
        if 0 <= armed <= now:  # this wake-up (or one at its time) is it
            ctx.timer = -1
        next_timer = qp.next_timer()
        if next_timer is None:
            return
        deadline: cython.longlong = next_timer
        if deadline <= now:
            qp.handle_timer(now)
            self._service(ctx, now)
            self._kick(ctx, now)
        elif ctx.timer < 0:
            ctx.timer = deadline
            self.sched.at(deadline, self._on_timer_cb, ctx)
