"""Byte-level edits of the outer header, for the live fabric's switches.

They act on a datagram in place without decoding it: read or shift the uSID carrier, mark CE,
trim and re-mark, count hops down. They assume ``outer_ok(buf)`` held (the fabric checks that once per
datagram). The inner headers, which the ICRC and UDP checksum cover, are never touched.
RoCE RC's packets have one IPv6 header (next header UDP, :mod:`mrc.wire.roce`): the fields
a switch rewrites (destination, traffic class, hop limit) sit at the same offsets, and a
trim rewrites their own length fields (:func:`cut_lengths`).
"""

from __future__ import annotations

from mrc.packet import ECN_NOT_ECT, ENVELOPE_BYTES, IPV6_BYTES, ROCE_ENVELOPE_BYTES, TRIM_DSCP
from mrc.wire.checksum import sum16
from mrc.wire.layout import (
    NH_IPV6,
    NH_UDP,
    OFF_ACTIVE_USID,
    OFF_HOP_LIMIT,
    OFF_INNER_PLEN,
    OFF_OUTER_DST,
    OFF_UDP_CSUM,
    OFF_UDP_LEN,
)
from mrc.wire.roce import cut_lengths as roce_cut_lengths


def outer_ok(buf: bytes | bytearray | memoryview) -> bool:
    """Cheap sanity check: IPv6-in-IPv6 carrying at least MRC's envelope, or RoCEv2's own
    IPv6/UDP/BTH (RC), of consistent length."""
    n = len(buf)
    return (n >= ROCE_ENVELOPE_BYTES and buf[0] >> 4 == 6
            and ((buf[6] == NH_IPV6 and n >= ENVELOPE_BYTES) or buf[6] == NH_UDP)
            and (buf[4] << 8 | buf[5]) == n - IPV6_BYTES)


def is_roce(buf: bytes | bytearray | memoryview) -> bool:
    """Whether a datagram is RoCEv2's own (one IPv6 header, then UDP): RoCE RC or a CNP."""
    return buf[6] == NH_UDP


def outer_dst(buf: bytes | bytearray | memoryview) -> int:
    """The uSID carrier (outer IPv6 destination) as a 128-bit int."""
    return int.from_bytes(buf[OFF_OUTER_DST:OFF_OUTER_DST + 16], "big")


def set_outer_dst(buf: bytearray, da: int) -> None:
    buf[OFF_OUTER_DST:OFF_OUTER_DST + 16] = da.to_bytes(16, "big")


def active_usid(buf: bytes | bytearray | memoryview) -> int:
    """The active uSID (the 16 bits after the 32-bit block), without building an int128."""
    return buf[OFF_ACTIVE_USID] << 8 | buf[OFF_ACTIVE_USID + 1]


def shift_outer_dst(buf: bytearray) -> int:
    """uN/uA shift in place (same result as ``topology.usid.shift``); returns the new active uSID."""
    buf[OFF_ACTIVE_USID:OFF_ACTIVE_USID + 10] = buf[OFF_ACTIVE_USID + 2:OFF_ACTIVE_USID + 12]
    buf[38] = buf[39] = 0
    return buf[OFF_ACTIVE_USID] << 8 | buf[OFF_ACTIVE_USID + 1]


def outer_ecn(buf: bytes | bytearray | memoryview) -> int:
    return (buf[1] >> 4) & 3


def outer_dscp(buf: bytes | bytearray | memoryview) -> int:
    return ((buf[0] & 0x0F) << 2) | (buf[1] >> 6)


def set_outer_dscp(buf: bytearray, dscp: int) -> None:
    buf[0] = 0x60 | (dscp >> 2)
    buf[1] = ((dscp & 3) << 6) | (buf[1] & 0x3F)


def mark_ce(buf: bytearray) -> bool:
    """Set ECN to CE if the packet is ECN-capable (RFC 3168); False if it is Not-ECT."""
    if (buf[1] >> 4) & 3 == ECN_NOT_ECT:
        return False
    buf[1] |= 0x30
    return True


def is_trimmed(buf: bytes | bytearray | memoryview) -> bool:
    return (((buf[0] & 0x0F) << 2) | (buf[1] >> 6)) == TRIM_DSCP


def trim(buf: bytearray, size: int, dscp: int = TRIM_DSCP) -> bool:
    """Cut to ``size`` bytes, re-mark DSCP, fix the outer payload length. A packet that is not
    longer than ``size`` is left alone (as switches do) and False is returned."""
    n = len(buf)
    if n <= size:
        return False
    if size < ENVELOPE_BYTES:
        raise ValueError(f"trim size {size} would cut into the BTH")
    del buf[size:]
    buf[0] = 0x60 | (dscp >> 2)
    buf[1] = ((dscp & 3) << 6) | (buf[1] & 0x3F)
    cut_lengths(buf)
    return True


def cut_lengths(buf: bytearray) -> None:
    """Make a packet cut to ``len(buf)`` bytes well formed again: the outer and inner IPv6
    payload lengths and the UDP length say the cut length, and the UDP checksum covers what
    is left. A trimming switch writes them so the trimmed packet is an ordinary shorter one
    (tshark dissects and verifies it without complaint); the original length survives in the
    RETH DMA length. The ICRC went with the cut: nothing past it can be verified, and the
    receiver never tries."""
    if buf[6] == NH_UDP:  # RoCEv2's own packet: one IPv6 header
        roce_cut_lengths(buf)
        return
    n = len(buf)
    plen = n - IPV6_BYTES
    buf[4] = plen >> 8
    buf[5] = plen & 0xFF
    inner = n - 2 * IPV6_BYTES
    buf[OFF_INNER_PLEN] = buf[OFF_UDP_LEN] = inner >> 8
    buf[OFF_INNER_PLEN + 1] = buf[OFF_UDP_LEN + 1] = inner & 0xFF
    buf[OFF_UDP_CSUM] = buf[OFF_UDP_CSUM + 1] = 0
    # pseudo-header (inner addresses, UDP length, next header) + UDP and all after it
    r = (sum16(buf, 48) + inner + NH_UDP) % 0xFFFF
    csum = 0xFFFF - r if r else 0xFFFF
    buf[OFF_UDP_CSUM] = csum >> 8
    buf[OFF_UDP_CSUM + 1] = csum & 0xFF


def hop_limit(buf: bytes | bytearray | memoryview) -> int:
    """The outer hop limit."""
    return buf[OFF_HOP_LIMIT]


def set_hop_limit(buf: bytearray, value: int) -> None:
    """Write the outer hop limit (one less per switch crossed)."""
    buf[OFF_HOP_LIMIT] = value


def inner_hosts(buf: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(src, dst) host indices from the inner IPv6 addresses (no validation); of a RoCE
    packet, from its one header (the destination's where it is a host address, else 0)."""
    if buf[6] == NH_UDP:
        dst = int.from_bytes(buf[36:40], "big") if buf[24:28] == buf[8:12] else 0
        return int.from_bytes(buf[20:24], "big"), dst
    return (int.from_bytes(buf[60:64], "big"), int.from_bytes(buf[76:80], "big"))
