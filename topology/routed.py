"""The routed address plan: where RoCE RC's plain IPv6 destinations live.

RC runs on the fabric as deployed: a BGP/ECMP Clos that routes on the destination address,
not on a source route. Each T0 advertises one /64 per plane for the hosts under it, and a
host's address on a plane is that prefix plus the host's interface ID::

    fd00:6d72:72PP:TTTT : 0000:0001 : <host>       PP = plane, TTTT = the host's T0

The prefix is a unique-local block (RFC 4193) of mrc-lab's own choosing, disjoint from the
uSID block (``fcbb::/16``, :mod:`topology.usid`) and from the inner host addresses
(``fd00:6d72:6300::/64``): the third group is ``72PP`` ("r" for routed) where the inner one
is ``6300`` ("c"). The interface ID is the inner addresses' (``HOST_IID_MARK`` | index), so
it is never all-zero. A switch reads the destination T0 from the low 16 bits of the high
half (one lookup per hop, as a router's longest-prefix match on a /64 per T0); the T0 of the
destination reads the host from the interface ID.

Only the addressing lives here (topology imports nothing from the simulator); the switches'
ECMP groups and the routing control plane are :mod:`mrc.sim.switch` and
:mod:`mrc.sim.routing`.
"""

from __future__ import annotations

from topology.spec import FabricSpec
from topology.usid import HOST_IID_MARK, MAX_PLANES

#: The top 40 bits of every routed address: fd00:6d72:72.. (a ULA of mrc-lab's own).
ROUTED_TAG = 0xFD006D7272
#: How far the tag sits up the high 64 bits (plane 8 bits + T0 16 bits below it).
TAG_SHIFT = 24
#: The most T0s per plane the plan can name (16 bits).
MAX_T0 = 1 << 16
#: RoCEv2's UDP destination port and the IP protocol number of UDP (the 5-tuple's fixed part).
ROCE_DPORT = 4791
PROTO_UDP = 17
#: Mask of the interface ID's host bits.
_HOST_MASK = HOST_IID_MARK - 1


def prefix_high(plane: int, t0: int) -> int:
    """The high 64 bits of T0 ``t0``'s prefix on ``plane`` (its /64)."""
    if not 0 <= plane < MAX_PLANES:
        raise ValueError(f"plane {plane} outside 0..{MAX_PLANES - 1}")
    if not 0 <= t0 < MAX_T0:
        raise ValueError(f"T0 {t0} outside 0..{MAX_T0 - 1}")
    return (ROUTED_TAG << TAG_SHIFT) | (plane << 16) | t0


def plane_tag(plane: int) -> int:
    """The high 48 bits every routed address of ``plane`` starts with (what a switch of that
    plane compares ``da_hi >> 16`` to)."""
    return prefix_high(plane, 0) >> 16


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
    return address >> (64 + TAG_SHIFT) == ROUTED_TAG


def parse(address: int) -> tuple[int, int, int]:
    """(plane, T0, host) of a routed address; ValueError outside the block."""
    if not is_routed(address):
        raise ValueError(f"{address:#x} is not a routed address")
    high = address >> 64
    return (high >> 16) & 0xFF, high & 0xFFFF, address & _HOST_MASK
