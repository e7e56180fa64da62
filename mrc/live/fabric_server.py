"""The live fabric on a UDP socket: :class:`FabricServer` runs a
:class:`~mrc.live.fabric.FabricCore` against the dilated wall clock.

Each datagram is stamped with the :class:`~mrc.live.clock.Clock`, every fabric event due by
then runs (the engine's ``run_until``), what reaches a host is sent to its socket, and one
asyncio timer is kept armed for the next event (the fabric's engine is run by a
:class:`~mrc.live.wall_engine.WallEngine`). Lateness of the wall clock never changes
modelled timestamps; it is measured and reported (``lag_*``).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from mrc.live import gso
from mrc.live.clock import Clock
from mrc.live.fabric import FabricCore
from mrc.live.udp import (
    RX_BATCH,
    check_bind_address,
    read_more,
    release_reads,
    take_reads,
    udp_kernel_drops,
)
from mrc.live.wall_engine import WallEngine


class FabricServer(asyncio.DatagramProtocol):
    """The fabric on a UDP socket, in wall-clock time scaled by ``clock``.

    Each datagram is stamped with the clock, every fabric event due by then runs, and one
    asyncio timer is kept armed for the next event. Datagrams from an address that is not a
    registered host, or that do not look like our packets, are counted and dropped.
    """

    def __init__(self, core: FabricCore, clock: Clock, *, host: str = "127.0.0.1",
                 port: int = 0, allow_non_loopback: bool = False,
                 rcvbuf_bytes: int = 4 << 20, gro: bool = True) -> None:
        check_bind_address(host, allow_non_loopback)
        self.core = core
        self.clock = clock
        self.bind = (host, port)
        self.rcvbuf_bytes = rcvbuf_bytes
        self.transport: asyncio.DatagramTransport | None = None
        self._sock: socket.socket | None = None
        self.address: tuple[str, int] | None = None
        self.hosts: dict[tuple[str, int], int] = {}
        self.host_addr: list[tuple[str, int] | None] = [None] * core.spec.hosts
        self.send_errors = 0
        self.kernel_drops: int | None = None
        #: The fabric's engine against the clock (runs once the socket is bound).
        self.engine = WallEngine(core.sim, clock, after_run=self._after_run)
        #: Deliveries of the events being run, sent together when the run ends (one GSO send
        #: per run of equal-size datagrams to a host; each host's order is kept).
        self._outbox: list[tuple[tuple[str, int], bytearray]] = []
        self.gso = False
        #: Ask for UDP GRO at ``start`` (``udp.take_reads``), and the descriptor the socket is
        #: read through once the kernel granted it (None: asyncio's reads; see ``gro``).
        self._want_gro = gro
        self._reader: socket.socket | None = None
        core.deliver = self._deliver

    @property
    def gro(self) -> bool:
        """Whether the socket reads a GSO run in one read (``udp.take_reads``)."""
        return self._reader is not None

    async def start(self) -> tuple[str, int]:
        """Bind the socket; returns the address hosts send to."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET6 if ":" in self.bind[0] else socket.AF_INET,
                             socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.rcvbuf_bytes)
            sock.bind(self.bind)
            sock.setblocking(False)
            transport, _ = await loop.create_datagram_endpoint(lambda: self, sock=sock)
        except BaseException:
            sock.close()
            raise
        self.transport = transport  # type: ignore[assignment]
        self._sock = sock
        if self._want_gro:
            self._reader = take_reads(sock, loop, self._read_run, transport)
        self.address = sock.getsockname()[:2]
        self.gso = gso.supported(sock)
        self.engine.attach(loop)
        return self.address

    def register_host(self, index: int, address: tuple[str, int]) -> None:
        """Datagrams from ``address`` are host ``index``'s; its packets are sent there."""
        address = (address[0], address[1])
        self.hosts[address] = index
        self.host_addr[index] = address

    # ------------------------------------------------------------------ asyncio callbacks
    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:  # type: ignore[override]
        burst = [(data, addr)]
        sock = self._sock
        if sock is not None:  # read what else waits now: a loop turn per datagram costs most
            self.send_errors += read_more(sock, burst)  # (ICMP errors queued on the socket)
        self._ingest(burst)
        self.engine.arm()

    def _read_run(self, reader: socket.socket) -> None:
        """The socket has datagrams (UDP GRO on: asyncio's reads are stopped)."""
        burst: list[tuple[bytes, tuple[str, int]]] = []
        self.send_errors += read_more(reader, burst, True, RX_BATCH + 1)
        if burst:
            self._ingest(burst)
            self.engine.arm()

    def _ingest(self, burst: list[tuple[bytes, tuple[str, int]]]) -> None:
        """A burst read at one instant enters at one modelled time, in the order it came,
        after the events due by then."""
        core = self.core
        now = self.clock.now_ps()
        if self.engine.due(now):
            self.engine.run(now)
        if now > core.now:
            core.now = now
        hosts = self.hosts
        for data, addr in burst:
            core.inject(data, hosts.get(addr[:2]))

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable from a host that already closed: count, never crash.
        self.send_errors += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.engine.detach()

    # ------------------------------------------------------------------ sending
    def _after_run(self) -> None:
        """The engine ran a batch of events: send what it delivered."""
        if self._outbox:
            self._flush()

    def _deliver(self, host: int, buf: bytearray, time_ps: int) -> None:
        addr = self.host_addr[host]
        transport = self.transport
        if addr is None or transport is None or transport.is_closing():
            self.core._ingress_drop("no_host")
            return
        if self.engine.running:
            self._outbox.append((addr, buf))
            return
        try:
            transport.sendto(buf, addr)
        except OSError:
            self.send_errors += 1

    def _flush(self) -> None:
        """Send what the last run delivered: per host, in order, equal-size runs in one GSO
        send each (datagrams the transport still buffers go first, so nothing overtakes)."""
        outbox = self._outbox
        self._outbox = []
        transport = self.transport
        if transport is None or transport.is_closing():
            for _ in outbox:
                self.core._ingress_drop("no_host")
            return
        per_host: dict[tuple[str, int], list[bytearray]] = {}
        for addr, buf in outbox:
            per_host.setdefault(addr, []).append(buf)
        sock = self._sock
        buffered = getattr(transport, "get_write_buffer_size", None)  # selector transports
        for addr, datagrams in per_host.items():
            for run in (gso.runs(datagrams) if self.gso else [datagrams]):
                if (len(run) > 1 and self.gso and sock is not None
                        and buffered is not None and not buffered()):
                    try:
                        if gso.send_run(sock, run, len(run[0]), addr):
                            continue
                    except gso.Refused:
                        self.gso = False
                for data in run:
                    try:
                        transport.sendto(data, addr)
                    except OSError:
                        self.send_errors += 1

    def schedule_fault(self, time_ps: int, action: str, target: str,
                       params: dict[str, Any] | None = None) -> None:
        """Apply a fault at modelled time ``time_ps`` (the clock turns it into wall time)."""
        self.core.schedule(time_ps, action, target, params)
        self.engine.arm()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.core.totals())
        out["send_errors"] = self.send_errors
        out["kernel_drops"] = (udp_kernel_drops(self._sock) if self._sock is not None
                               else self.kernel_drops)
        out.update(self.engine.lag())
        return out

    async def close(self) -> None:
        """Stop the timer and close the socket (idempotent)."""
        self.engine.detach()
        if self._sock is not None:
            self.kernel_drops = udp_kernel_drops(self._sock)
        transport = self.transport
        self.transport = None
        self._sock = None
        if self._reader is not None:
            release_reads(asyncio.get_running_loop(), self._reader)
            self._reader = None
        if transport is not None:
            transport.close()
            await asyncio.sleep(0)  # let connection_lost run
