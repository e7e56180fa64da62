"""A host on the kernel fabric: the live runtime's host, with its NIC ports made real.

The live host (:class:`mrc.live.host.LiveHost`) already drives the unchanged sans-IO QPs with
asyncio, paces each NIC port at its modelled rate and encodes every packet with
``mrc.wire``; it only lacks real ports. Here each of its ports is a veth of the host's
namespace, whose peer is a T0 of the kernel fabric, and one ``AF_PACKET`` datagram socket,
opened inside the namespace, carries them all:

* send: the encoded packet (outer IPv6 with the uSID destination, inner IPv6, UDP 4791, RoCE
  headers) goes out of the port of its plane (the plane is the low byte of the uSID block,
  byte 27 of the packet) to the T0's MAC; the kernel writes the Ethernet header. A raw IPv6
  socket would route by destination instead, and the host has no routes: the plane is the
  port, as on a real multi-port NIC.
* receive: the IPv6 frames waiting on the socket are read as one burst; those addressed to one
  of its ports (``PACKET_HOST``; its own sends are ignored with ``PACKET_IGNORE_OUTGOING``)
  go to :meth:`LiveHost.receive_burst` as datagrams from the fabric, which decodes them
  (checksums, ICRC), delivers each to its QP and fills the ports they kicked. Hosts have IPv6
  off on their ports, so their kernel answers nothing.

Why one process for all hosts, one socket each (and not a process per namespace): a socket
keeps the namespace it was made in, so ``setns`` around ``socket()`` is all it takes, and one
asyncio loop then serves every host on one clock with no inter-process hops; the packets
still cross the kernel fabric for real. The cost is one CPU for all hosts, which the scale
factor accounts for.

Everything else is the live host's: the NIC driver (``mrc.nic.driver``) under its QPs,
the paced ports, the encoding. This module only supplies the socket side the live host leaves
to a subclass (its docstring lists it): ``start``/``close`` open and close the packet socket
(``_loop``, ``_sock``), ``_transmit`` sends, ``receive_burst`` takes what was read, and
``socket_drops`` reads the packet socket's drop counter.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from typing import Any

from mrc.kernel import netns
from mrc.live.clock import Clock
from mrc.live.host import LiveHost
from mrc.live.udp import RX_BATCH
from topology.spec import FabricSpec

ETH_P_IPV6 = 0x86DD
PACKET_HOST = 0
_SOL_PACKET = 263
_PACKET_STATISTICS = 6
_PACKET_IGNORE_OUTGOING = 23
_PLANE_BYTE = 27  # outer destination: fcbb:00PP:...; its fourth byte is the plane
_MAX_FRAME = 65_535
#: The live host's name for the fabric's address (frames are checked by port here).
FABRIC = ("kernel-fabric", 0)


@dataclass(frozen=True, slots=True)
class Wire:
    """A NIC port's veth in the host's namespace and the MAC of the T0 port at its far end."""

    plane: int
    ifname: str
    peer_mac: bytes


class KernelHost(LiveHost):
    """Host ``index`` with its NIC ports on the veths of namespace ``ns``."""

    def __init__(self, index: int, spec: FabricSpec, clock: Clock, *, ns: str,
                 wires: list[Wire], **options: Any) -> None:
        super().__init__(index, spec, clock, gso=False, **options)
        self.ns = ns
        self.wires = {w.plane: w for w in wires}
        self._plane_of = {w.ifname: w.plane for w in wires}
        self.counters.update(rx_wrong_port=0, rx_not_ours=0)
        self._socket_drops = 0

    async def start(self, fabric_addr: tuple[str, int] = FABRIC) -> tuple[str, int]:
        """Open the packet socket inside the host's namespace and start reading it."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.fabric_addr = FABRIC
        with netns.enter(self.ns):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IPV6))
        try:
            sock.setsockopt(_SOL_PACKET, _PACKET_IGNORE_OUTGOING, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.buffer_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.buffer_bytes)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self.address = (self.ns, 0)
        loop.add_reader(sock.fileno(), self._readable)
        return self.address

    def socket_drops(self) -> int:
        """Frames the kernel dropped on the host's socket so far (full receive buffer): losses
        the model did not make, reported with every run (the kernel's counter resets on each
        read, so they are summed here)."""
        self._socket_drops += packet_drops(self._sock) or 0
        return self._socket_drops

    async def close(self) -> None:
        """Stop reading, then the live host's close (ports, timers, the socket)."""
        sock = self._sock
        if sock is not None and self._loop is not None and not self.closed:
            self._loop.remove_reader(sock.fileno())
        await super().close()

    def _readable(self) -> None:
        """Frames waiting on the socket, read as one burst (bounded, so timers still run):
        those that arrived on one of our ports are datagrams from the fabric."""
        sock = self._sock
        if sock is None:
            return
        plane_of = self._plane_of
        counters = self.counters
        datagrams = []
        for _ in range(RX_BATCH + 1):
            try:
                data, addr = sock.recvfrom(_MAX_FRAME)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                continue
            counters["rx_datagrams"] += 1
            plane = plane_of.get(addr[0])
            if plane is None or addr[2] != PACKET_HOST:
                counters["rx_not_ours"] += 1
                continue
            if len(data) > _PLANE_BYTE and data[_PLANE_BYTE] != plane:
                counters["rx_wrong_port"] += 1  # delivered, but note the misroute
            datagrams.append(data)
        if datagrams:
            self.receive_burst(datagrams)

    def _transmit(self, data: bytes) -> None:
        """One encoded packet out of the port of its plane."""
        sock = self._sock
        wire = self.wires.get(data[_PLANE_BYTE]) if len(data) > _PLANE_BYTE else None
        if sock is None or wire is None:
            self.counters["tx_errors"] += 1
            return
        try:
            sock.sendto(data, (wire.ifname, ETH_P_IPV6, 0, 0, wire.peer_mac))
        except OSError:  # queue full (tbf drop: ENOBUFS) or the port is down
            self.counters["tx_errors"] += 1
            return
        self.counters["tx_datagrams"] += 1
        self.counters["tx_bytes"] += len(data)


def packet_drops(sock: socket.socket | None) -> int | None:
    """Frames the kernel dropped on a packet socket (full receive buffer), since the last
    call (``PACKET_STATISTICS`` resets on read)."""
    if sock is None or sock.fileno() < 0:
        return None
    try:
        raw = sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8)
    except OSError:
        return None
    return struct.unpack("=II", raw)[1]


def wires_of(fabric: Any, host: int) -> list[Wire]:
    """The wires of ``host`` in a :class:`~mrc.kernel.fabric.KernelFabric`."""
    out = []
    for plane in range(fabric.spec.planes):
        link = fabric.link_of_host(host, plane)
        out.append(Wire(plane, link.lower.ifname, bytes.fromhex(link.upper.mac.replace(":", ""))))
    return out
