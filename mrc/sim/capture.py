"""A run's packet capture on the simulated network (``--pcap`` with ``--runtime sim``).

The network's tap sees every packet that crosses a link, as the far end takes it (before the
far switch rewrites it). :func:`capture_ports` says which ports a capture point covers, the
same way for the simulator and the live fabric (both run this network model): ``delivered``
the links into hosts (each datagram once, as its host receives it), ``sent`` the hosts' NIC
ports (once, as it leaves), ``every_hop`` all of them. The simulator's packets are encoded by
``mrc.wire`` when captured, so a simulated capture opens in tshark like a live one.
"""

from __future__ import annotations

from mrc.packet import ACK, DATA, NACK, PROBE, Packet
from mrc.pcap import Capture, CaptureOptions
from mrc.sim.host import Host, NicPort
from mrc.sim.network import Network
from mrc.wire import encode


def capture_ports(net: Network, point: str) -> frozenset[str] | None:
    """The names of the ports ``point`` captures at (None: every port)."""
    if point == "every_hop":
        return None
    if point == "sent":
        return frozenset(name for name, port in net.ports.items() if isinstance(port, NicPort))
    if point == "delivered":
        return frozenset(name for name, port in net.ports.items() if isinstance(port.dst, Host))
    raise ValueError(f"unknown capture point {point!r}")


def attach(net: Network, options: CaptureOptions) -> Capture:
    """Capture the packets ``options`` select on ``net`` (until the capture is closed)."""
    capture = Capture(options)
    ports = capture_ports(net, options.point)

    def tap(now: int, port: str, pkt: Packet) -> None:
        if (ports is None or port in ports) and capture.wants(_kind(pkt)):
            capture.writer.write(now, encode(pkt), port)

    net.tap = tap
    return capture


def _kind(pkt: Packet) -> str:
    if pkt.trimmed:
        return "trimmed"
    kind = pkt.kind
    if kind == DATA:
        return "data"
    if kind == ACK:
        return "ack"
    if kind == NACK:
        return "nack"
    return "probe" if kind == PROBE else "probe_reply"
