"""The routed address plan: where RoCE RC's plain IPv6 destinations live.

RC runs on the fabric as deployed: a BGP/ECMP Clos that routes on the destination address,
not on a source route. Each T0 advertises one /48 per plane for the hosts under it, and a
host's address on a plane is that prefix plus the host's interface ID::

    fd52:00PP:TTTT:0000 : 0000:0001 : <host>       PP = plane, TTTT = the host's T0

The block is a unique-local one (RFC 4193) of mrc-lab's own choosing, laid out like the uSID
block (``fcbb:00PP``, :mod:`topology.usid`): the plane is the fourth byte of the address in
both, so whatever reads a packet's plane from its destination (the hosts of the live and
kernel runtimes, the wire decoder) reads it the same way. It is disjoint from the uSID block
and from the inner host addresses (``fd00:6d72:6300::/64``). The interface ID is the inner
addresses' (``HOST_IID_MARK`` | index), so it is never all-zero. A switch compares the top 32
bits with its plane's block and reads the destination T0 from the next 16 (one lookup per
hop, as a router's longest-prefix match on a /48 per T0); the T0 of the destination reads the
host from the interface ID.

Only the addressing lives here (topology imports nothing from the simulator); the switches'
ECMP groups and the routing control plane are :mod:`mrc.sim.switch` and
:mod:`mrc.sim.routing`.
"""

from __future__ import annotations

import ipaddress

from topology import names
from topology.spec import FabricSpec
from topology.usid import HOST_IID_MARK, MAX_PLANES

#: The top 32 bits of plane 0's routed addresses (plane p: ``ROUTED_BASE | p``).
ROUTED_BASE = 0xFD520000
#: Prefix length of one T0's hosts on one plane (block 32 bits + T0 16 bits).
T0_PREFIX_LEN = 48
#: The most T0s per plane the plan can name (16 bits).
MAX_T0 = 1 << 16
#: RoCEv2's UDP destination port and the IP protocol number of UDP (the 5-tuple's fixed part).
ROCE_DPORT = 4791
PROTO_UDP = 17
#: Mask of the interface ID's host bits.
_HOST_MASK = HOST_IID_MARK - 1


def block(plane: int) -> int:
    """The top 32 bits of every routed address of ``plane`` (what a switch of that plane
    compares ``da_hi >> 32`` to)."""
    if not 0 <= plane < MAX_PLANES:
        raise ValueError(f"plane {plane} outside 0..{MAX_PLANES - 1}")
    return ROUTED_BASE | plane


def prefix_high(plane: int, t0: int) -> int:
    """The high 64 bits of T0 ``t0``'s prefix on ``plane`` (its /48, zero-filled)."""
    if not 0 <= t0 < MAX_T0:
        raise ValueError(f"T0 {t0} outside 0..{MAX_T0 - 1}")
    return (block(plane) << 32) | (t0 << 16)


def interface_id(host: int) -> int:
    """The low 64 bits of ``host``'s address (on every plane)."""
    if not 0 <= host < HOST_IID_MARK:
        raise ValueError(f"host {host} outside the interface-ID plan")
    return HOST_IID_MARK | host


def host_address(spec: FabricSpec, host: int, plane: int) -> int:
    """``host``'s routed IPv6 address on ``plane`` (under its T0's prefix)."""
    if not 0 <= host < spec.hosts:
        raise ValueError(f"host {host} is not in this fabric (0..{spec.hosts - 1})")
    return (prefix_high(plane, spec.t0_of(host)) << 64) | interface_id(host)


def is_routed(address: int) -> bool:
    """Whether ``address`` lies in the routed block (not a uSID carrier)."""
    return address >> 104 == ROUTED_BASE >> 8


def parse(address: int) -> tuple[int, int, int]:
    """(plane, T0, host) of a routed address; ValueError outside the block."""
    if not is_routed(address):
        raise ValueError(f"{address:#x} is not a routed address")
    high = address >> 64
    return (high >> 32) & 0xFF, (high >> 16) & 0xFFFF, address & _HOST_MASK


def kernel_routes(spec: FabricSpec, switch: str) -> list[tuple[str, tuple[str, ...]]]:
    """The routed plan of one switch as Linux routes (the kernel fabric installs them beside
    the uSID plan): (prefix, the interfaces of its next hops, named after the far end as in
    :func:`topology.seg6.interface_name`). A T0: a /128 per own host down its port, and each
    other T0's /48 over every uplink (one ECMP route); a T1: each T0's /48 down its link."""
    element = names.resolve(spec, switch)
    plane, index = element.plane, element.index
    assert plane is not None and index is not None
    out: list[tuple[str, tuple[str, ...]]] = []
    if element.kind == names.T1:
        for d in range(spec.t0_per_plane):
            out.append((_net(prefix_high(plane, d) << 64, T0_PREFIX_LEN),
                        (names.t0_name(plane, d),)))
        return out
    if element.kind != names.T0:
        raise ValueError(f"{switch!r} is not a switch")
    uplinks = tuple(names.t1_name(plane, k) for k in range(spec.t1))
    for d in range(spec.t0_per_plane):
        if d == index:
            for host in range(d * spec.hosts_per_t0, (d + 1) * spec.hosts_per_t0):
                out.append((_net(host_address(spec, host, plane), 128),
                            (names.nic_port_name(host, plane),)))
        else:
            out.append((_net(prefix_high(plane, d) << 64, T0_PREFIX_LEN), uplinks))
    return out


def _net(address: int, length: int) -> str:
    return f"{ipaddress.IPv6Address(address)}/{length}"
