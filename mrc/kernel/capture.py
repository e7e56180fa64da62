"""``--pcap`` on the kernel fabric: the kernel's own capture (packet sockets, what tcpdump
uses) on chosen links, written as the same pcap the other runtimes write.

One ``AF_PACKET`` datagram socket per chosen link, bound to the link's lower end (the host's
port for a host link, the T0's port for a T0-T1 link) and opened in that end's namespace, sees
every IPv6 packet crossing the link in both directions, Ethernet header removed: the records
are the IPv6 packets themselves (``LINKTYPE_RAW``), so tshark dissects them as IPv6 -> IPv6
-> UDP 4791 -> BTH. Timestamps are the kernel's (``SO_TIMESTAMPNS``) converted to modelled
time on the run's clock, so a capture lines up with the run's tables.

Default links: every host link of the hosts the workload uses (each packet is then recorded
as it leaves its sender and as it reaches its receiver, before and after the fabric).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mrc.kernel import netns
from mrc.kernel.host import ETH_P_IPV6
from mrc.pcap import PcapWriter
from mrc.units import PS_PER_S
from topology import names

if TYPE_CHECKING:
    from mrc.kernel.fabric import KernelFabric, Link
    from mrc.live.clock import Clock

_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("=qq")
_CMSG_SPACE = 64


class Capture:
    """Packet sockets on some links of a kernel fabric, writing one pcap file."""

    def __init__(self, fabric: KernelFabric, path: str | Path, links: Sequence[Link]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = PcapWriter(self.path)
        self.socks: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock: Clock | None = None
        self._offset = 0.0  # realtime - monotonic
        try:
            for link in links:
                port = link.lower
                with netns.enter(fabric.ns(port.element)):
                    sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM,
                                         socket.htons(ETH_P_IPV6))
                self.socks.append(sock)
                sock.bind((port.ifname, ETH_P_IPV6))
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                sock.setblocking(False)
        except BaseException:
            self.close()
            raise

    @property
    def count(self) -> int:
        return self.writer.count

    @classmethod
    @contextlib.contextmanager
    def maybe(cls, fabric: KernelFabric, path: str | Path | None,
              wanted: Sequence[str] | None, hosts: Sequence[int]) -> Iterator[Capture | None]:
        """A capture on ``wanted`` (links, NIC ports or selectors; default: every host link
        of ``hosts``) when ``path`` is given, closed at the end of the block."""
        if path is None:
            yield None
            return
        cap = cls(fabric, path, select_links(fabric, wanted, hosts))
        try:
            yield cap
        finally:
            cap.close()

    def attach(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        """Start reading on ``loop``; timestamps become modelled time on ``clock``."""
        self._loop = loop
        self._clock = clock
        self._offset = time.time() - time.monotonic()
        for sock in self.socks:
            loop.add_reader(sock.fileno(), self._readable, sock)

    def detach(self) -> None:
        """Read what is left and stop reading (before the loop closes)."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        for sock in self.socks:
            self._readable(sock)
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(sock.fileno())

    def _readable(self, sock: socket.socket) -> None:
        clock = self._clock
        assert clock is not None
        for _ in range(256):
            try:
                data, ancdata, _flags, _addr = sock.recvmsg(65_535, _CMSG_SPACE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            wall = None
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    wall = sec + nsec * 1e-9 - self._offset  # on the monotonic clock
            if wall is None:
                wall = time.monotonic()
            t = (wall - clock.origin) * PS_PER_S / clock.dilation
            self.writer.write(max(0, int(t)), data)

    def close(self) -> None:
        self.detach()
        for sock in self.socks:
            sock.close()
        self.socks.clear()
        self.writer.close()


def select_links(fabric: KernelFabric, wanted: Sequence[str] | None,
                 hosts: Sequence[int]) -> list[Link]:
    """The links named by ``wanted`` (link names, NIC ports, selectors like ``h3.p2.uplink``),
    or every host link of ``hosts``."""
    spec = fabric.spec
    if not wanted:
        return [fabric.link_of_host(h, p) for h in hosts for p in range(spec.planes)]
    out = []
    for text in wanted:
        element = names.resolve(spec, text)
        if element.kind == names.NIC_PORT:
            out.append(fabric.link_of_host(element.host, element.plane))  # type: ignore[arg-type]
        elif element.kind == names.LINK:
            out.append(fabric.links[element.name])
        else:
            raise names.UnknownElementError(text, f"is a {element.kind}; capture on links or "
                                            "NIC ports")
    return list(dict.fromkeys(out))

