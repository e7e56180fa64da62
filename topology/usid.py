"""The SRv6 uSID addressing plan (F3216: 32-bit block, 16-bit micro-SIDs).

Why this shape: 16 bits cannot name 131,072 hosts globally, but they can name every switch of
one plane (Fairwater: 512 T0 + 256 T1 = 768). So switch uSIDs are unique *within a plane*, the
plane rides in the block, and the final hop is a T0-local uSID naming the downlink port::

    fcbb:00PP : T0src : T1 : T0dst : port ::      (hosts under different T0s)
    fcbb:00PP : T0    : port ::                   (hosts under the same T0)

Ranges are disjoint, so every table is unambiguous by construction:

=============  ===================  ==========================================
uSID           meaning              behaviour at a switch
=============  ===================  ==========================================
0x0000         end of carrier       nothing left: the packet must be at a host
0x1000+i       T0 number i          uN: the owner shifts and forwards
0x2000+k       T1 number k          uN: the owner shifts and forwards
0xE000+j       local port j of T0   uA: the T0 shifts and sends out downlink j
=============  ===================  ==========================================

"Shift and forward" (RFC 9800 NEXT-CSID flavour, Linux ``End flavors next-csid lblen 32
nflen 16``): the active uSID is the 16 bits after the block; the owner shifts the remaining
uSIDs left by 16 bits, fills with zero, and looks the new active uSID up in a static table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import NamedTuple

from mrc import ev as _ev

BLOCK_BASE = 0xFCBB0000
MAX_PLANES = 256
T0_BASE = 0x1000
T1_BASE = 0x2000
PORT_BASE = 0xE000
MAX_T0 = 0x1000
MAX_T1 = 0x1000
MAX_PORTS = 0x1000
EOC = 0x0000
USIDS_PER_ADDRESS = 6

_USID_BITS = 16
_ACTIVE_SHIFT = 128 - 32 - _USID_BITS  # 80: the active uSID sits right after the block
BLOCK_MASK = ((1 << 32) - 1) << 96
CARRIER_MASK = (1 << 96) - 1

#: Inner (end-host) IPv6 addresses: fd00:6d72:6300::/64, interface ID ``0:1:<host index>``
#: (``HOST_IID_MARK`` | index). They never change in flight, so the inner UDP checksum and
#: the RoCE ICRC verify at the receiver. The mark keeps every interface ID non-zero: an
#: all-zero one is the subnet-router anycast address (RFC 4291), never a host's.
HOST_PREFIX = 0xFD006D7263000000 << 64
HOST_IID_MARK = 1 << 32


class UsidError(ValueError):
    """An address or uSID outside the plan."""


def block(plane: int) -> int:
    if not 0 <= plane < MAX_PLANES:
        raise UsidError(f"plane {plane} outside 0..{MAX_PLANES - 1}")
    return BLOCK_BASE | plane


def t0_usid(index: int) -> int:
    if not 0 <= index < MAX_T0:
        raise UsidError(f"T0 index {index} outside 0..{MAX_T0 - 1}")
    return T0_BASE + index


def t1_usid(index: int) -> int:
    if not 0 <= index < MAX_T1:
        raise UsidError(f"T1 index {index} outside 0..{MAX_T1 - 1}")
    return T1_BASE + index


def port_usid(index: int) -> int:
    if not 0 <= index < MAX_PORTS:
        raise UsidError(f"port index {index} outside 0..{MAX_PORTS - 1}")
    return PORT_BASE + index


class Usid(NamedTuple):
    """A decoded uSID: ``kind`` is "eoc", "t0", "t1" or "port"; ``number`` the switch or
    port it names."""

    kind: str
    number: int


def classify(value: int) -> Usid:
    """Which range a 16-bit uSID falls in; raises UsidError for unallocated values."""
    if value == EOC:
        return Usid("eoc", 0)
    if T0_BASE <= value < T0_BASE + MAX_T0:
        return Usid("t0", value - T0_BASE)
    if T1_BASE <= value < T1_BASE + MAX_T1:
        return Usid("t1", value - T1_BASE)
    if PORT_BASE <= value < PORT_BASE + MAX_PORTS:
        return Usid("port", value - PORT_BASE)
    raise UsidError(f"uSID {value:#06x} is not allocated")


def encode(plane: int, usids: list[int] | tuple[int, ...]) -> int:
    """The 128-bit destination address carrying ``usids`` in plane ``plane``'s block."""
    if len(usids) > USIDS_PER_ADDRESS:
        raise UsidError(f"{len(usids)} uSIDs do not fit one F3216 address")
    address = block(plane) << 96
    shift = _ACTIVE_SHIFT
    for value in usids:
        if not 0 < value <= 0xFFFF:
            raise UsidError(f"uSID {value:#x} is not a 16-bit non-zero value")
        address |= value << shift
        shift -= _USID_BITS
    return address


def active(address: int) -> int:
    """The active uSID (the 16 bits right after the block)."""
    return (address >> _ACTIVE_SHIFT) & 0xFFFF


def shift(address: int) -> int:
    """uN/uA shift: drop the active uSID, move the rest up, fill with end-of-carrier."""
    return (address & BLOCK_MASK) | ((address << _USID_BITS) & CARRIER_MASK)


def plane_of(address: int) -> int:
    """The plane named by the block; raises UsidError when the block is not ours."""
    top = address >> 96
    if top & 0xFFFFFF00 != BLOCK_BASE:
        raise UsidError(f"{format_address(address)} is not in the fabric's uSID block")
    return top & 0xFF


def carrier(address: int) -> list[int]:
    """The uSIDs still to be consumed, in order, up to the end of carrier."""
    out = []
    for _ in range(USIDS_PER_ADDRESS):
        value = active(address)
        if value == EOC:
            break
        out.append(value)
        address = shift(address)
    return out


def path_address(plane: int, src_t0: int, t1: int, dst_t0: int, dst_port: int) -> int:
    """Host -> T0src -> T1 -> T0dst -> host."""
    return encode(plane, (t0_usid(src_t0), t1_usid(t1), t0_usid(dst_t0), port_usid(dst_port)))


def path_addresses(plane: int, src_t0: int, t1s: Iterable[int], dst_t0: int,
                   dst_port: int) -> list[int]:
    """:func:`path_address` for each T1 of ``t1s``: the T1 is the carrier's second uSID, so
    the rest of the address is encoded once (an RC QP takes one address per T1 of its plane,
    a 1024-host 8-plane fabric half a million)."""
    base = path_address(plane, src_t0, 0, dst_t0, dst_port)
    shift = _ACTIVE_SHIFT - _USID_BITS
    return [base + ((t1_usid(t1) - T1_BASE) << shift) for t1 in t1s]


def local_address(plane: int, t0: int, dst_port: int) -> int:
    """Host -> T0 -> host, for two hosts under the same T0."""
    return encode(plane, (t0_usid(t0), port_usid(dst_port)))


def host_address(host: int) -> int:
    """Inner IPv6 address of a host (its NIC, all planes)."""
    if not 0 <= host < 1 << 32:
        raise UsidError(f"host index {host} out of range")
    return HOST_PREFIX | HOST_IID_MARK | host


def host_of(address: int) -> int:
    """Inverse of host_address; raises UsidError for any other address."""
    if address >> 64 != HOST_PREFIX >> 64 or address & 0xFFFFFFFF00000000 != HOST_IID_MARK:
        raise UsidError(f"{format_address(address)} is not a host address")
    return address & 0xFFFFFFFF


def format_address(address: int) -> str:
    return str(ipaddress.IPv6Address(address))


def parse_address(text: str) -> int:
    return int(ipaddress.IPv6Address(text))


# ------------------------------------------------------------------ entropy values
# The EV layout is defined once, in mrc.ev (default format: plane bits 0-7, T1 bits 8-19);
# a uSID path is chosen by an EV's plane and T1 (profiles: topology.evs).


def make_ev(plane: int, t1: int, instance: int = 0) -> int:
    """The EV of (plane, T1, instance); fields out of range raise UsidError."""
    try:
        return _ev.make_ev(plane, t1, instance, max_t1=MAX_T1)
    except _ev.EvError as exc:
        raise UsidError(str(exc)) from None


ev_plane = _ev.ev_plane
ev_t1 = _ev.ev_t1
ev_instance = _ev.ev_instance
