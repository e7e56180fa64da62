"""The live host: unchanged sans-IO queue pairs driven by asyncio, one UDP socket per host.

It does what the simulator's NIC model does (``mrc.sim.nic.Nic``), with real time and real
bytes: each NIC port (one per plane) *pulls* the next packet of its plane from the QPs that
use it, round robin, whenever it is idle, and stays busy for the packet's serialization time at
the port's rate (modelled time; the :class:`~mrc.live.clock.Clock` makes it wall time); control
packets (ACK, NACK, PROBE, PROBE_REPLY) go out at once and occupy the port too. After every
call into a QP the host drains its control packets, re-arms its timer with a real asyncio timer
and forwards its events. Every packet is encoded with ``mrc.wire.encode`` and sent as one UDP
datagram to the fabric; what comes back is decoded with ``mrc.wire.decode``.

Cost rules (this runs a few times per datagram), as in the simulator's NIC: a call into a QP
wakes only the ports that QP sends on (a receive-only responder wakes none), in an order that
rotates, and after a poll the QP's timer is re-read only when its ``poll_timer_floor_ps`` does
not already lie beyond the timer armed for it.

Modelled time first: every entry point (a datagram, a timer, a post) starts by handing its
``now`` to the ``sync`` hook, with which the stack runs the fabric's events due by then. A
fault or link change that is due therefore reaches the NIC before the host acts, however late
a busy loop runs the fabric's own timer.

Why ports catch up in bursts: asyncio timers fire to the millisecond, later than a port's next
free instant. A port that woke late sends what it would have sent meanwhile (bounded by
``burst_ps``), and the fabric's NIC-link model re-serializes the burst, so the average rate is
the line rate and no packet enters the fabric before its modelled time.

Batching, for the per-datagram cost: the DATA packets one port kick pulls leave in one
``sendmsg`` with Linux UDP GSO (``UDP_SEGMENT``), encoded together by ``wire.encode_many``
(one numpy sum for their payload checksums): the kernel cuts the buffer into the very same
datagrams, in order, at a fraction of the per-datagram syscall cost. Any other send first
flushes what is held, so the order on the wire is unchanged; where GSO is unavailable (not
Linux, or a route whose MTU is below the segment) every datagram goes out on its own. What
waits on the socket is read as one burst (the reads back to back), decoded with
``wire.decode_many`` (one numpy sum for all the UDP checksums) and handled datagram by
datagram in arrival order, all at the instant it was read: one sync, the ACKs it provokes
held for one GSO send, and each QP it reached kicked once after it.

Safety: only datagrams from the fabric's address are read; bytes that do not decode, packets
for another host or an unknown QP, and packets a QP refuses are counted and dropped. Nothing a
datagram contains can stop the host.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import asyncio_dgram

from mrc import wire
from mrc.live import gso
from mrc.live.clock import Clock
from mrc.live.fabric import MAX_DATAGRAM, check_bind_address, udp_kernel_drops
from mrc.packet import DATA, FLAG_RETX, PROBE, Packet
from mrc.transport.base import QueuePair, TransportEvent, drain_events, poll_round_robin
from mrc.units import PS_PER_S
from topology.spec import ETHERNET_OVERHEAD_BYTES, FabricSpec

_PS_BITS = 8 * PS_PER_S
_ETH = ETHERNET_OVERHEAD_BYTES
_TS_MASK = (1 << 32) - 1
#: Datagrams read per wake-up beyond the first (then the loop gets its turn).
RX_BATCH = 64

EventSink = Callable[[TransportEvent, QueuePair], None]
#: ``placed(now_ps, plane, nbytes)``: unique payload bytes placed by a QP of this host.
PlacedSink = Callable[[int, int, int], None]
#: ``counted(name, now_ps)``: "retransmissions" or "probes" (the recorder's counters).
CountSink = Callable[[str, int], None]


class _Port:
    """One NIC port (plane): when it is free again, whether its link is up, its wake timer."""

    __slots__ = ("plane", "bps", "free_at", "up", "busy", "wake", "tx_data", "tx_control",
                 "dropped_down")

    def __init__(self, plane: int, bps: int) -> None:
        self.plane = plane
        self.bps = bps
        self.free_at = 0
        self.up = True
        self.busy = False  # a wake timer is armed for free_at
        self.wake: asyncio.TimerHandle | None = None
        self.tx_data = 0
        self.tx_control = 0
        self.dropped_down = 0

    def serialization_ps(self, size: int) -> int:
        return -((size + _ETH) * -_PS_BITS // self.bps)


class LiveHost:
    """Host ``index``: its QPs, its NIC ports and its asyncio-dgram socket."""

    def __init__(self, index: int, spec: FabricSpec, clock: Clock, *,
                 bind_host: str = "127.0.0.1", allow_non_loopback: bool = False,
                 on_event: EventSink | None = None, on_placed: PlacedSink | None = None,
                 on_count: CountSink | None = None, burst_ps: int | None = None,
                 lead_ps: int | None = None, sync: Callable[[int], None] | None = None,
                 buffer_bytes: int = 4 << 20, trace: int = 0, gso: bool = True) -> None:
        check_bind_address(bind_host, allow_non_loopback)
        self.index = index
        self.spec = spec
        self.clock = clock
        self.bind_host = bind_host
        self.on_event = on_event
        self.on_placed = on_placed
        self.on_count = on_count
        #: ``sync(now)``: called when the host wakes up at modelled time ``now``, before it
        #: does anything (the stack runs the fabric's due events: faults reach the NIC first).
        self.sync = sync
        # Default catch-up: 2 ms of wall clock (two asyncio timer ticks) of modelled time.
        self.burst_ps = clock.model_ps(0.002) if burst_ps is None else burst_ps
        # A port may hand over a packet this much (200 us of wall clock) before its slot: the
        # fabric's NIC-link model serializes it at its modelled time anyway, and one wake then
        # serves several packets when they are shorter than a timer tick.
        self.lead_ps = clock.model_ps(0.0002) if lead_ps is None else lead_ps
        self.buffer_bytes = buffer_bytes
        #: Send a kick's DATA datagrams with one GSO ``sendmsg`` (if the socket supports it).
        self.gso = gso
        #: Datagrams of one size waiting for _flush, in order: encoded, or DATA packets to
        #: encode then (``_held_packets``).
        self._held: list[bytes | Packet] = []
        self._held_size = 0
        self._held_max = 1
        self._held_packets = False
        #: While a received burst is taken in, the control packets it provokes are held too:
        #: the burst's ACKs of one size leave in one GSO send after it.
        self._holding_control = False
        self.qps: dict[int, QueuePair] = {}
        self.ports = [_Port(p, spec.link_bps) for p in range(spec.planes)]
        self._senders: list[list[QueuePair]] = [[] for _ in range(spec.planes)]
        self._rr = [0] * spec.planes
        #: The ports each QP sends on (by QPN), rotated per kick, and the soonest deadline
        #: one of its polls can create (``poll_timer_floor_ps``; 0: unknown).
        self._qp_ports: dict[int, list[_Port]] = {}
        self._floor: dict[int, int] = {}
        self._kick_from = 0
        self._timers: dict[int, tuple[int, asyncio.TimerHandle]] = {}
        self._last_now = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock: socket.socket | None = None
        self._stream: Any = None
        self._rx_task: asyncio.Task[None] | None = None
        self.fabric_addr: tuple[str, int] | None = None
        self.address: tuple[str, int] | None = None
        self.closed = False
        #: ``(time_ps, plane, kind, qpn, ev, flags)`` of the last ``trace`` packets sent (tests;
        #: ``qpn`` is the destination QP, as on the wire).
        self.trace: deque[tuple[int, int, int, int, int, int]] | None = (
            deque(maxlen=trace) if trace else None)
        self.counters: dict[str, int] = dict.fromkeys(
            ("tx_datagrams", "tx_bytes", "rx_datagrams", "rx_bytes", "rx_malformed",
             "rx_unknown_source", "rx_misdelivered", "rx_unknown_qpn", "rx_rejected",
             "tx_errors", "tx_nic_down", "tx_lost_ps"), 0)
        self.first_rejection: str | None = None
        #: Datagrams the kernel dropped on this host's socket (read when it closes).
        self.kernel_drops: int | None = None

    # ----------------------------------------------------------------- lifecycle
    async def start(self, fabric_addr: tuple[str, int]) -> tuple[str, int]:
        """Bind the host's socket on the loopback (or the allowed address); returns it."""
        self._loop = asyncio.get_running_loop()
        self.fabric_addr = (fabric_addr[0], fabric_addr[1])
        family = socket.AF_INET6 if ":" in self.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.buffer_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.buffer_bytes)
            sock.bind((self.bind_host, 0))
            sock.setblocking(False)
            self._stream = await asyncio_dgram.from_socket(sock)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self.address = sock.getsockname()[:2]
        if self.gso and not gso.supported(sock):  # not Linux (>= 4.18): one per send
            self.gso = False
        self._rx_task = asyncio.get_running_loop().create_task(
            self._rx_loop(), name=f"mrc-live-h{self.index}-rx")
        return self.address

    async def close(self) -> None:
        """Cancel every timer and the receive task, close the socket (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._held.clear()
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for port in self.ports:
            if port.wake is not None:
                port.wake.cancel()
                port.wake = None
        task = self._rx_task
        self._rx_task = None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, asyncio_dgram.TransportClosed):
                pass
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._sock is not None:
            self.kernel_drops = udp_kernel_drops(self._sock)
            self._sock.close()
            self._sock = None
        await asyncio.sleep(0)

    def now(self) -> int:
        """Modelled time for the QPs: the clock, never going backwards."""
        t = self.clock.now_ps()
        if t < self._last_now:
            return self._last_now
        self._last_now = t
        return t

    def _wake_up(self) -> int:
        """``now``, after the ``sync`` hook saw it (every entry point starts here)."""
        now = self.now()
        if self.sync is not None:
            self.sync(now)
        return now

    # ----------------------------------------------------------------- setup
    def add(self, qp: QueuePair, planes: list[int] | range | tuple[int, ...]) -> None:
        """Register ``qp``; it may send on ``planes`` (all of them for MRC, one for RC, none
        for an endpoint that only answers: its control packets need no port to pull)."""
        if qp.qpn in self.qps:
            raise ValueError(f"QPN {qp.qpn} already used on host {self.index}")
        self.qps[qp.qpn] = qp
        mine = sorted(set(planes))
        for plane in mine:
            self._senders[plane].append(qp)
        self._qp_ports[qp.qpn] = [self.ports[plane] for plane in mine]
        self._floor[qp.qpn] = int(getattr(qp, "poll_timer_floor_ps", 0) or 0)

    def remove(self, qp: QueuePair) -> None:
        """Destroy ``qp`` here: it stops sending at once, its timer is cancelled and later
        packets for it count as ``rx_unknown_qpn`` (what a NIC does with a torn-down QP)."""
        if self.qps.get(qp.qpn) is not qp:
            return
        del self.qps[qp.qpn]
        for senders in self._senders:
            if qp in senders:
                senders.remove(qp)
        self._qp_ports.pop(qp.qpn, None)
        self._floor.pop(qp.qpn, None)
        armed = self._timers.pop(qp.qpn, None)
        if armed is not None:
            armed[1].cancel()

    def set_link(self, plane: int, up: bool, bps: int | None = None) -> None:
        """The NIC sees its port's link change (loss of signal, or a renegotiated rate)."""
        port = self.ports[plane]
        if bps is not None:
            port.bps = bps
        if port.up == up:
            return
        port.up = up
        if not up:
            if port.wake is not None:
                port.wake.cancel()
                port.wake = None
            port.busy = False
            # as in the simulator's NIC: MRC QPs hear of the loss of signal at once
            now = self.now()
            for qp in list(self._senders[plane]):
                port_down = getattr(qp, "port_down", None)
                if port_down is not None:
                    port_down(now, plane)
                    self._service(qp, now)
                    self._kick_qp(qp, now)
        else:
            now = self.now()
            port.free_at = now
            self._kick(port, now)

    # ----------------------------------------------------------------- application side
    def post(self, qp: QueuePair, msg_id: int, length: int, payload: bytes | None = None) -> None:
        """Post an RDMA WRITE on ``qp`` now and wake the ports."""
        now = self._wake_up()
        qp.post_write(now, msg_id, length, payload=payload)
        self._service(qp, now)
        self._kick_qp(qp, now)

    def poke(self, qp: QueuePair) -> None:
        """Service ``qp`` after an API call that changed it (EVs denied or allowed, a post
        made directly on the QP)."""
        now = self._wake_up()
        self._service(qp, now)
        self._kick_qp(qp, now)

    # ----------------------------------------------------------------- ports
    def kick_all(self) -> None:
        now = self._wake_up()
        for port in self.ports:
            if not port.busy and port.up:
                self._kick(port, now)

    def _kick_qp(self, qp: QueuePair, now: int) -> None:
        """Wake the idle ports ``qp`` sends on (only its answer to a pull can have changed),
        starting one port further on each call: when a window opens for a few packets, a
        fixed order would hand all of them to the first plane."""
        ports = self._qp_ports.get(qp.qpn)
        if not ports:
            return
        n = len(ports)
        if n == 1:
            port = ports[0]
            if not port.busy and port.up:
                self._kick(port, now)
            return
        start = self._kick_from % n
        self._kick_from = start + 1
        for i in range(start, start + n):
            port = ports[i - n] if i >= n else ports[i]
            if not port.busy and port.up:
                self._kick(port, now)

    def _kick(self, port: _Port, now: int) -> None:
        """Fill an idle (or late) port: pull packets until it is busy past now (+ lead)."""
        if not port.up or self.closed:
            return
        horizon = now + self.lead_ps
        t = port.free_at
        if t > horizon:  # still serializing (data, or control sent meanwhile): come back then
            self._arm(port, t)
            return
        if not port.busy:
            if t < now:
                t = now  # idle: start now
        elif t < now - self.burst_ps:
            # woke very late: catch up, but no unbounded burst; the sending time skipped is
            # modelled capacity the wall clock took away (the labs layer judges the pace by it)
            self.counters["tx_lost_ps"] += now - self.burst_ps - t
            t = now - self.burst_ps
        port.busy = False
        plane = port.plane
        port.free_at = t
        try:
            while port.free_at <= horizon:  # control sent meanwhile also advances free_at
                pkt = self._pull(now, plane)
                if pkt is None:
                    break
                port.free_at += port.serialization_ps(self._send(pkt, port, now, True))
        finally:
            if self._held:
                self._flush()
        if port.free_at > horizon:
            self._arm(port, port.free_at)

    def _arm(self, port: _Port, t: int) -> None:
        """Wake the port when it is free at ``t`` (a wake that comes early re-arms itself)."""
        port.busy = True
        if port.wake is None and self._loop is not None:
            port.wake = self._loop.call_at(self.clock.wall_at(t - self.lead_ps), self._wake,
                                           port)

    def _wake(self, port: _Port) -> None:
        port.wake = None
        self._kick(port, self._wake_up())

    def _pull(self, now: int, plane: int) -> Packet | None:
        found = poll_round_robin(self._senders[plane], self._rr, now, plane)
        if found is None:
            return None
        qp, pkt = found
        if pkt.flags & FLAG_RETX and self.on_count is not None:
            self.on_count("retransmissions", now)
        control = qp.take_control()
        if control:
            for c in control:
                self._send_control(c, now)
        floor = self._floor[qp.qpn]
        armed = self._timers.get(qp.qpn) if floor else None
        if armed is None or armed[0] > now + floor:  # else no new deadline can come first
            self._arm_qp(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)
        return pkt

    def _send(self, pkt: Packet, port: _Port, now: int, hold: bool = False) -> int:
        """Encode and send one packet; returns its IPv6 size (for the port's pacing).

        ``hold``: its datagram may wait for the caller's ``_flush`` (the DATA a kick pulls,
        the control a received burst provokes), in a burst of datagrams of its size; any
        other send flushes the burst first. Held DATA is encoded at the flush, all of it in
        one ``wire.encode_many``."""
        if pkt.ts > _TS_MASK:  # the wire's timestamp is 32 bits of picoseconds: send it wrapped
            pkt.ts &= _TS_MASK  # (the QP keeps its own send time, never this packet)
        kind = pkt.kind
        if kind == DATA:
            port.tx_data += 1
        else:
            port.tx_control += 1
        if self.trace is not None:
            self.trace.append((now, port.plane, kind, pkt.qpn, pkt.ev, pkt.flags))
        hold = hold and self.gso
        deferred = hold and kind == DATA and not pkt.trimmed
        data = b""
        if deferred:
            size = pkt.size  # what encoding a DATA packet gives
        else:
            data = wire.encode(pkt)
            size = len(data)
        held = self._held
        if held and not (hold and size == self._held_size and len(held) < self._held_max
                         and deferred == self._held_packets):
            self._flush()
            held = self._held  # a new list: the flushed one is gone
        if not hold:
            self._transmit(data)
        else:
            if not held:
                self._held_size = size
                self._held_max = gso.max_run(size)
                self._held_packets = deferred
            held.append(pkt if deferred else data)
        return size

    def _flush(self) -> None:
        """Send the held datagrams: one ``sendmsg`` whose ``UDP_SEGMENT`` makes the kernel cut
        the buffer back into them, or one by one if there is one or the kernel refuses."""
        held = self._held
        self._held = []
        size = self._held_size
        if self._held_packets:
            datagrams = wire.encode_many(cast(list[Packet], held))
            uniform = all(len(data) == size for data in datagrams)  # as pkt.size said
        else:
            datagrams = cast(list[bytes], held)
            uniform = True
        sock = self._sock
        if len(datagrams) > 1 and uniform and sock is not None and self.fabric_addr is not None:
            try:
                sent = gso.send_run(sock, datagrams, size, self.fabric_addr)
            except gso.Refused:
                self.gso = False  # e.g. a route whose MTU is below the segment size
                sent = False
            if sent:
                counters = self.counters
                counters["tx_datagrams"] += len(datagrams)
                counters["tx_bytes"] += size * len(datagrams)
                return
        for data in datagrams:  # one by one: what fits in the socket buffer still goes out
            self._transmit(data)

    def _transmit(self, data: bytes) -> None:
        """One datagram to the fabric."""
        sock = self._sock
        if sock is None or self.fabric_addr is None:
            self.counters["tx_errors"] += 1
            return
        try:
            sock.sendto(data, self.fabric_addr)
        except OSError:  # socket buffer full (the NIC drops) or the fabric went away
            self.counters["tx_errors"] += 1
            return
        self.counters["tx_datagrams"] += 1
        self.counters["tx_bytes"] += len(data)

    def _send_control(self, pkt: Packet, now: int) -> None:
        """Control leaves at once (the NIC's priority queue) and occupies its port."""
        if pkt.kind == PROBE and self.on_count is not None:
            self.on_count("probes", now)
        plane = pkt.plane if 0 <= pkt.plane < len(self.ports) else 0
        port = self.ports[plane]
        if not port.up:
            port.dropped_down += 1
            self.counters["tx_nic_down"] += 1
            return
        size = self._send(pkt, port, now, self._holding_control)
        port.free_at = max(port.free_at, now) + port.serialization_ps(size)

    # ----------------------------------------------------------------- QPs
    def _service(self, qp: QueuePair, now: int) -> None:
        """Send ``qp``'s control packets, arm its timer and forward its events."""
        control = qp.take_control()
        if control:
            for pkt in control:
                self._send_control(pkt, now)
        self._arm_qp(qp, now)
        if qp.events:
            drain_events(qp, self.on_event)

    def _arm_qp(self, qp: QueuePair, now: int) -> None:
        """One asyncio timer per QP, moved only when its deadline comes earlier (a timer that
        fires early finds the later deadline and re-arms)."""
        deadline = qp.next_timer()
        if deadline is not None and self._loop is not None and not self.closed:
            armed = self._timers.get(qp.qpn)
            if armed is None or deadline < armed[0]:
                if armed is not None:
                    armed[1].cancel()
                handle = self._loop.call_at(self.clock.wall_at(deadline), self._on_timer, qp)
                self._timers[qp.qpn] = (deadline, handle)

    def _on_timer(self, qp: QueuePair) -> None:
        armed = self._timers.pop(qp.qpn, None)
        if self.qps.get(qp.qpn) is not qp:
            return  # removed meanwhile
        now = self.now()
        if armed is not None and now < armed[0]:
            now = self._last_now = armed[0]  # asyncio fired a hair early: it is due
        if self.sync is not None:
            self.sync(now)
        deadline = qp.next_timer()
        if deadline is not None and deadline <= now:
            qp.handle_timer(now)
            self._service(qp, now)
            self._kick_qp(qp, now)
        elif deadline is not None:
            self._service(qp, now)

    # ----------------------------------------------------------------- receive
    async def _rx_loop(self) -> None:
        stream = self._stream
        queue = getattr(stream, "_recvq", None)
        while True:
            try:
                data, addr = await stream.recv()
            except asyncio_dgram.TransportClosed:
                return
            except OSError:  # ICMP errors surface here on some platforms; keep reading
                continue
            if queue is None or queue.empty():  # never overtake a datagram already queued
                self._drain([(data, addr)])
            else:
                self.receive(data, addr)

    def _drain(self, burst: list[tuple[bytes, Any]]) -> None:
        """Read what else is waiting on the socket now and take the whole burst in: one loop
        iteration per datagram is what costs most in asyncio, the reads run faster back to
        back than each between two packets' worth of Python, and ``wire.decode_many`` checks
        the burst's UDP checksums in one numpy sum. Bounded, so timers still run; the
        datagrams are handled in the order they came, all at the modelled time the burst was
        read (the fabric's due events run once, before it), then each QP they reached is
        kicked once: the ports fill in one pass and their DATA leaves in one GSO send."""
        sock = self._sock
        if sock is not None:
            for _ in range(RX_BATCH):
                try:
                    burst.append(sock.recvfrom(MAX_DATAGRAM))
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:  # e.g. an ICMP error queued on the socket
                    continue
        counters = self.counters
        counters["rx_datagrams"] += len(burst)
        fabric = self.fabric_addr
        datagrams = []
        for data, addr in burst:
            if addr != fabric and (addr is None or addr[:2] != fabric):
                counters["rx_unknown_source"] += 1
            else:
                datagrams.append(data)
        if not datagrams:
            return
        now = self._wake_up()
        touched: dict[int, QueuePair] = {}
        self._holding_control = True
        try:
            for data, pkt in zip(datagrams, wire.decode_many(datagrams), strict=True):
                if isinstance(pkt, Packet):
                    qp = self._take(pkt, len(data), now)
                    if qp is not None:
                        touched[qp.qpn] = qp
                else:
                    counters["rx_malformed"] += 1
        finally:
            self._holding_control = False
            if self._held:
                self._flush()
        if touched:
            now = self._wake_up()
            for qp in touched.values():
                self._kick_qp(qp, now)

    def receive(self, data: bytes, addr: tuple[str, int] | None) -> None:
        """One datagram from the socket: checked, decoded, handed to its QP."""
        counters = self.counters
        counters["rx_datagrams"] += 1
        if addr != self.fabric_addr and (addr is None or addr[:2] != self.fabric_addr):
            counters["rx_unknown_source"] += 1
            return
        try:
            pkt = wire.decode(data)
        except wire.DecodeError:
            counters["rx_malformed"] += 1
            return
        now = self._wake_up()
        qp = self._take(pkt, len(data), now)
        if qp is not None:
            self._kick_qp(qp, now)

    def _take(self, pkt: Packet, nbytes: int, now: int) -> QueuePair | None:
        """A decoded packet of ``nbytes`` from the fabric at ``now``: to its QP, which is
        then served (control, timer, events); returns that QP for the caller to kick."""
        counters = self.counters
        counters["rx_bytes"] += nbytes
        # Unwrap the 32-bit timestamp: every ts is a send time on this same clock, at most
        # 2^32 ps (4.3 ms modelled) old while it still matters, so now minus its age is exact.
        pkt.ts = now - ((now - pkt.ts) & _TS_MASK)
        if pkt.dst != self.index:
            counters["rx_misdelivered"] += 1
            return None
        qp = self.qps.get(pkt.qpn)
        if qp is None:
            counters["rx_unknown_qpn"] += 1
            return None
        before = qp.bytes_placed
        try:
            qp.receive(now, pkt)
        except Exception as exc:  # noqa: BLE001 - a datagram must never stop the host
            counters["rx_rejected"] += 1
            if self.first_rejection is None:
                self.first_rejection = f"{type(exc).__name__}: {exc}"
        placed = qp.bytes_placed - before
        if placed and self.on_placed is not None:
            self.on_placed(now, pkt.plane, placed)
        self._service(qp, now)
        return qp

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": f"h{self.index}", **self.counters}
        out["kernel_drops"] = (udp_kernel_drops(self._sock) if self._sock is not None
                               else self.kernel_drops)
        for port in self.ports:
            out[f"tx_data_p{port.plane}"] = port.tx_data
            out[f"tx_control_p{port.plane}"] = port.tx_control
        return out
