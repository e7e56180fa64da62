"""The live host: unchanged sans-IO queue pairs driven by asyncio, one UDP socket per host.

What it does for its QPs is the simulator's NIC driver itself
(:class:`~mrc.nic.driver.NicDriver`: registration, round-robin pulls, timers, port state,
events), with real time and real bytes underneath: the driver's scheduler is asyncio timers
on the dilated :class:`~mrc.live.clock.Clock`, and its ports are paced ports
(:mod:`mrc.live.host_nic`). Each NIC
port (one per plane), whenever it is idle, pulls the next packets of its plane through the
driver and stays busy for their serialization time at the port's rate (modelled time; the
clock makes it wall time); control packets (ACK, NACK, PROBE, PROBE_REPLY) go out at once and
occupy the port too. Every packet is encoded with ``mrc.wire.encode`` and sent as one UDP
datagram to the fabric; what comes back is decoded with ``mrc.wire.decode``.

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
(their payload checksums summed together): the kernel cuts the buffer into the very same
datagrams, in order, at a fraction of the per-datagram syscall cost. Any other send first
flushes what is held, so the order on the wire is unchanged; where GSO is unavailable (not
Linux, or a route whose MTU is below the segment) every datagram goes out on its own. What
waits on the socket is read as one burst (the reads back to back), decoded with
``wire.decode_many`` (all the UDP checksums summed together) and handled datagram by
datagram in arrival order, all at the instant it was read: one sync, the ACKs it provokes
held for one GSO send, and each port its QPs kicked filled once after it.

Safety: only datagrams from the fabric's address are read; bytes that do not decode, packets
for another host or an unknown QP, and packets a QP refuses are counted and dropped. Nothing a
datagram contains can stop the host.

A host on other sockets subclasses this one and keeps everything above (the kernel runtime's,
``mrc.kernel.host``, one packet socket on the veths of a network namespace). It opens its
socket in ``start`` (setting ``_loop`` and ``_sock``) and releases it in ``close`` (after its
own part, the base's); every datagram leaves through ``_transmit`` (GSO off); what it reads
goes to :meth:`LiveHost.receive_burst` as datagrams from the fabric; ``socket_drops`` says
what the kernel dropped on its socket.
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
from mrc.live.host_nic import LivePort, LiveTimers
from mrc.live.udp import (
    RX_BATCH,
    check_bind_address,
    read_more,
    release_reads,
    take_reads,
    udp_kernel_drops,
)
from mrc.nic.driver import COUNTERS as DRIVER_COUNTERS
from mrc.nic.driver import EventSink, NicDriver
from mrc.nic.runtime import RecorderSink
from mrc.packet import DATA, Packet
from topology.spec import FabricSpec

_TS_MASK = (1 << 32) - 1
#: The host's counters (``stats``), the driver's among them.
COUNTERS = ("tx_datagrams", "tx_bytes", "rx_datagrams", "rx_bytes", "rx_malformed",
            "rx_unknown_source", "rx_misdelivered", *DRIVER_COUNTERS, "tx_errors",
            "tx_nic_down", "tx_lost_ps", "wakes", "wake_late_ps")


class LiveHost(NicDriver):
    """Host ``index``: its QPs (the shared NIC driver), its paced NIC ports and its
    asyncio-dgram socket."""

    # the driver's ports, as this host builds them (the driver's C field is a list of its
    # PortSink base class, which a list of this subclass is not for mypy)
    ports: list[LivePort]  # type: ignore[assignment]

    def __init__(self, index: int, spec: FabricSpec, clock: Clock, *,
                 bind_host: str = "127.0.0.1", allow_non_loopback: bool = False,
                 on_event: EventSink | None = None, recorder: RecorderSink | None = None,
                 burst_ps: int | None = None, lead_ps: int | None = None,
                 sync: Callable[[int], None] | None = None, buffer_bytes: int = 4 << 20,
                 trace: int = 0, gso: bool = True, gro: bool = True) -> None:
        check_bind_address(bind_host, allow_non_loopback)
        super().__init__(LiveTimers(self), [LivePort(self, p, spec.link_bps)
                                            for p in range(spec.planes)],
                         on_event=on_event, recorder=recorder, strict=False,
                         counters=COUNTERS)
        self.index = index
        self.spec = spec
        self.clock = clock
        self.bind_host = bind_host
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
        #: Ask for UDP GRO at ``start`` (``udp.take_reads``), and the descriptor the socket is
        #: read through once the kernel granted it (None: asyncio's reads; see ``gro``).
        self._want_gro = gro
        self._reader: socket.socket | None = None
        #: Datagrams of one size waiting for _flush, in order: encoded, or DATA packets to
        #: encode then (``_held_packets``).
        self._held: list[bytes | Packet] = []
        self._held_size = 0
        self._held_max = 1
        self._held_packets = False
        #: While a received burst is taken in: the ports to fill after it. The control
        #: packets it provokes are held meanwhile, so its ACKs of one size leave in one GSO
        #: send after it.
        self._burst: list[LivePort] | None = None
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
        #: Datagrams the kernel dropped on this host's socket (read when it closes).
        self.kernel_drops: int | None = None

    @property
    def gro(self) -> bool:
        """Whether the socket reads a GSO run in one read (``udp.take_reads``)."""
        return self._reader is not None

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
        # A GSO run from the fabric in one read (udp.take_reads), else asyncio-dgram's reads.
        transport = getattr(self._stream, "_transport", None)
        if transport is not None and self._want_gro:
            self._reader = take_reads(sock, self._loop, self._read_run, transport)
        if self._reader is None:
            self._rx_task = self._loop.create_task(self._rx_loop(),
                                                   name=f"mrc-live-h{self.index}-rx")
        return self.address

    async def close(self) -> None:
        """Stop the ports and the receive task, close the socket (idempotent). The QPs'
        wake-ups that are still armed find the host closed and do nothing."""
        if self.closed:
            return
        self.closed = True
        self._held.clear()
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
        if self._reader is not None and self._loop is not None:
            release_reads(self._loop, self._reader)
            self._reader = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._sock is not None:
            self.kernel_drops = self.socket_drops()
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

    def set_link(self, plane: int, up: bool, bps: int | None = None) -> None:
        """The NIC sees its port's link change (loss of signal, or a renegotiated rate)."""
        port = self.ports[plane]
        if bps is not None:
            port.bps = bps
        if port.up == up:
            return
        port.up = up
        now = self.now()
        if up:
            port.free_at = now
        else:
            if port.wake is not None:
                port.wake.cancel()
                port.wake = None
            port.busy = False
        self.on_port_state(now, plane, up)

    # ----------------------------------------------------------------- pacing
    def _fill(self, port: LivePort, now: int) -> None:
        """Fill an idle (or late) port: pull packets until it is busy past now (+ lead)."""
        if not port.up or self.closed:
            return
        horizon = now + self.lead_ps
        t = port.free_at
        if t > horizon:  # still serializing (data, or control sent meanwhile): come back then
            self._arm_port(port, t)
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
                pkt = self.pull(now, plane)
                if pkt is None:
                    break
                port.free_at += port.serialization_ps(self._send(pkt, port, now, True))
        finally:
            if self._held:
                self._flush()
        if port.free_at > horizon:
            self._arm_port(port, port.free_at)

    def _arm_port(self, port: LivePort, t: int) -> None:
        """Wake the port when it is free at ``t`` (a wake that comes early re-arms itself)."""
        port.busy = True
        if port.wake is None and self._loop is not None:
            port.wake = self._loop.call_at(self.clock.wall_at(t - self.lead_ps), self._wake,
                                           port)

    def _wake(self, port: LivePort) -> None:
        port.wake = None
        self._fill(port, self._wake_up())

    # ----------------------------------------------------------------- send
    def _send(self, pkt: Packet, port: LivePort, now: int, hold: bool = False) -> int:
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

    def _send_now(self, pkt: Packet, port: LivePort) -> None:
        """Control leaves at once (the NIC's priority queue) and occupies its port."""
        if not port.up:
            port.drop_unsent(pkt)
            return
        now = self._last_now
        size = self._send(pkt, port, now, self._burst is not None)
        port.free_at = max(port.free_at, now) + port.serialization_ps(size)

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

    def _read_run(self, reader: socket.socket) -> None:
        """The socket has datagrams (UDP GRO on, asyncio-dgram's reads stopped): read what
        waits now and take it in, as :meth:`_drain` does."""
        burst: list[tuple[bytes, Any]] = []
        read_more(reader, burst, True, RX_BATCH + 1)  # (ICMP errors queued on it are skipped)
        if burst:
            self._take_burst(burst)

    def _drain(self, burst: list[tuple[bytes, Any]]) -> None:
        """Read what else is waiting on the socket now and take the whole burst in: one loop
        iteration per datagram is what costs most in asyncio, and the reads run faster back
        to back than each between two packets' worth of Python. Bounded, so timers still
        run; only the fabric's datagrams are kept (:meth:`receive_burst`)."""
        sock = self._sock
        if sock is not None:
            read_more(sock, burst)  # (an ICMP error queued on the socket is skipped)
        self._take_burst(burst)

    def _take_burst(self, burst: list[tuple[bytes, Any]]) -> None:
        counters = self.counters
        counters["rx_datagrams"] += len(burst)
        fabric = self.fabric_addr
        datagrams = []
        for data, addr in burst:
            if addr != fabric and (addr is None or addr[:2] != fabric):
                counters["rx_unknown_source"] += 1
            else:
                datagrams.append(data)
        if datagrams:
            self.receive_burst(datagrams)

    def receive_burst(self, datagrams: list[bytes]) -> None:
        """Datagrams from the fabric, read together: ``wire.decode_many`` checks their UDP
        checksums together; they are handled in the order they came, all at the
        modelled time the burst was read (the due events run once, before it), then each
        port their QPs kicked is filled once: the ports fill in one pass and their DATA
        leaves in one GSO send."""
        counters = self.counters
        now = self._wake_up()
        burst_ports: list[LivePort] = []
        self._burst = burst_ports
        try:
            for data, pkt in zip(datagrams, wire.decode_many(datagrams), strict=True):
                if isinstance(pkt, Packet):
                    self._take(pkt, len(data), now)
                else:
                    counters["rx_malformed"] += 1
        finally:
            self._burst = None
            if self._held:
                self._flush()
        if burst_ports:
            now = self._wake_up()
            for port in burst_ports:
                if port.up and not port.busy:
                    self._fill(port, now)

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
        self._take(pkt, len(data), self._wake_up())

    def _take(self, pkt: Packet, nbytes: int, now: int) -> None:
        """A decoded packet of ``nbytes`` from the fabric at ``now``: to its QP (the driver's
        ``on_receive``: placed, served, its ports kicked)."""
        self.counters["rx_bytes"] += nbytes
        # Unwrap the 32-bit timestamp: every ts is a send time on this same clock, at most
        # 2^32 ps (4.3 ms modelled) old while it still matters, so now minus its age is exact.
        pkt.ts = now - ((now - pkt.ts) & _TS_MASK)
        if pkt.dst != self.index and wire.unnamed_destination(pkt):
            pkt.dst = self.index  # a RoCE packet on a uSID carrier: the fabric delivered it here
        if pkt.dst != self.index:
            self.counters["rx_misdelivered"] += 1
            return
        self.on_receive(now, pkt)

    def socket_drops(self) -> int | None:
        """Datagrams the kernel dropped on this host's open socket (full receive buffer):
        losses the model did not make, reported with every run (None where unknown)."""
        return udp_kernel_drops(self._sock)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": f"h{self.index}", **self.counters}
        out["kernel_drops"] = (self.socket_drops() if self._sock is not None
                               else self.kernel_drops)
        for port in self.ports:
            out[f"tx_data_p{port.plane}"] = port.tx_data
            out[f"tx_control_p{port.plane}"] = port.tx_control
        return out
