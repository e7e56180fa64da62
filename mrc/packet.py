"""The one packet model: compact objects the simulator passes around.

Every field here has a place in the real encoding (``mrc.wire``), except the simulation-only
bookkeeping at the end (``digest``, ``plane``, ``hop_epoch``). The layout, outermost first::

    outer IPv6 (40)   dst = uSID carrier (rewritten per hop), ECN + trim DSCP, next-header 41
    inner IPv6 (40)   real host addresses, never touched by switches
    UDP (8)           dst port 4791; EV low 20 bits = outer flow label, high 12 in src port
    BTH (12)          opcode, dest QPN, PSN (24-bit), ack-request bit
    DATA:  RETH (16) [ImmDt (4)] MRC-DETH (24)  payload
    ACK/NACK: AETH (4) MRC-AETH (28)
    PROBE/PROBE_REPLY: MRC-PETH (12)
    ICRC (4)

Switches write only the outer header (destination, ECN, DSCP, hop limit: one less per
switch, and cut the bytes on a trim).
``ts`` is the sender's clock in picoseconds when the packet left (echoed by ACK, NACK and
PROBE_REPLY, and used by the sender to recognise which transmission came back). The wire
carries its low 32 bits; a receiver restores the full value against its own clock, which is
exact for any round trip under 4.29 ms (``mrc.live.host`` does this).

The MRC extensions put the EV and message id first so that a 128-byte trimmed DATA packet
still carries what its NACK needs (QPN, PSN, EV, message id).

RoCE RC's packets (``FLAG_ROCE``) are RoCEv2's own, not MRC's::

    IPv6 (40)         dst = ``da`` (what the fabric forwards on), ECN; next header UDP
    UDP (8)           dst port 4791; source port from the QPN's entropy
    BTH (12)          opcode (WRITE FIRST/MIDDLE/LAST/ONLY, ACKNOWLEDGE, CNP), QPN, PSN
    DATA: RETH (16) on the first packet of a WRITE only, [ImmDt (4)] on the last; payload
    ACK/NAK: AETH (4)
    CNP: 16 reserved bytes
    ICRC (4)

so a middle DATA packet carries 64 header bytes (``rc_data_bytes``), an ACK is 68 bytes and a
CNP 80 (IBA Vol. 1 ch. 9 and Annex A17, RoCEv2). CNPs are RoCEv2's in either case (only RC
sends them). RC's ACKs and NAKs queue with RC's DATA (``data_class``): a RoCE NIC sends them
on the QP's traffic class; only CNPs take the high-priority one.
"""

from __future__ import annotations

import types
from typing import Any, Final

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

# ---------------------------------------------------------------- packet kinds
DATA: Final = 0
ACK: Final = 1
NACK: Final = 2
PROBE: Final = 3
PROBE_REPLY: Final = 4
#: RoCEv2 congestion notification packet (BTH opcode 0x81): the DCQCN notification point's
#: signal to the sender of a CE-marked flow.
CNP: Final = 5
#: IEEE 802.1Qbb PFC frame (MAC control): never leaves its link, never an IPv6 packet.
PAUSE: Final = 6
KIND_NAMES: Final = ("DATA", "ACK", "NACK", "PROBE", "PROBE_REPLY", "CNP", "PAUSE")

# ---------------------------------------------------------------- flags (u16 on the wire)
FLAG_LAST: Final = 0x0001  # DATA: last packet of its message (by offset)
FLAG_ACK_REQ: Final = 0x0002  # DATA: ask for an immediate ACK (BTH A bit)
FLAG_RETX: Final = 0x0004  # DATA: a retransmission (statistics only)
FLAG_IMM: Final = 0x0008  # DATA: WRITE with immediate (opcode 0x0B, ImmDt present)
FLAG_ECN_ECHO: Final = 0x0010  # ACK/NACK: the acknowledged packet arrived CE-marked
FLAG_TRIM: Final = 0x0020  # NACK: the packet arrived trimmed (congestion, not loss)
FLAG_SEQ_ERR: Final = 0x0040  # NACK: RC PSN sequence error (go-back-N rewind)
FLAG_PROBE_LOSS: Final = 0x0080  # PROBE_REPLY: reserved for loss-probe semantics
#: DATA/ACK/NACK: RoCEv2 RC framing (one IPv6 header, BTH and the IBA extension headers only,
#: no MRC headers): what a RoCE RC QP sends. On the wire it is the next header of the first
#: IPv6 header (UDP, where MRC's is IPv6), not a bit.
FLAG_ROCE: Final = 0x0100
#: RoCE DATA: the first packet of its WRITE (RDMA WRITE FIRST or ONLY: it carries the RETH).
FLAG_FIRST: Final = 0x0200

PSN_BITS: Final = 24
PSN_MOD: Final = 1 << PSN_BITS
PSN_MASK: Final = PSN_MOD - 1

# ---------------------------------------------------------------- header sizes (bytes)
IPV6_BYTES: Final = 40
UDP_BYTES: Final = 8
BTH_BYTES: Final = 12
RETH_BYTES: Final = 16
IMMDT_BYTES: Final = 4
AETH_BYTES: Final = 4
MRC_DETH_BYTES: Final = 24  # ev, msg_id, ts, flags, reserved, msg_len
MRC_AETH_BYTES: Final = 28  # ev echo, ts echo, echo psn, flags, reserved, sack base, sack bitmap
MRC_PETH_BYTES: Final = 12  # ev, ts, flags, reserved
ICRC_BYTES: Final = 4
ROCE_UDP_PORT: Final = 4791
SACK_BITS: Final = 64

ENVELOPE_BYTES: Final = 2 * IPV6_BYTES + UDP_BYTES + BTH_BYTES  # 100
DATA_HEADER_BYTES: Final = ENVELOPE_BYTES + RETH_BYTES + MRC_DETH_BYTES + ICRC_BYTES  # 144
ACK_BYTES: Final = ENVELOPE_BYTES + AETH_BYTES + MRC_AETH_BYTES + ICRC_BYTES  # 136
PROBE_BYTES: Final = ENVELOPE_BYTES + MRC_PETH_BYTES + ICRC_BYTES  # 116
CNP_RESERVED_BYTES: Final = 16
#: RoCEv2's envelope: one IPv6 header, UDP, BTH (RoCE RC; MRC's has a second IPv6 header).
ROCE_ENVELOPE_BYTES: Final = IPV6_BYTES + UDP_BYTES + BTH_BYTES  # 60
#: RoCE RC DATA header bytes of a middle (or last) packet of a WRITE: envelope + ICRC.
RC_DATA_HEADER_BYTES: Final = ROCE_ENVELOPE_BYTES + ICRC_BYTES  # 64
#: RoCE RC ACK or NAK: envelope + AETH + ICRC.
RC_ACK_BYTES: Final = ROCE_ENVELOPE_BYTES + AETH_BYTES + ICRC_BYTES  # 68
#: RoCEv2 CNP (BTH opcode 0x81): envelope + 16 reserved bytes + ICRC.
CNP_BYTES: Final = ROCE_ENVELOPE_BYTES + CNP_RESERVED_BYTES + ICRC_BYTES  # 80
#: A PFC frame is a minimum Ethernet frame (64 bytes with MAC header and FCS); counted like
#: an IPv6 packet's size, the ports' Ethernet overhead (38) then gives its 84 wire bytes.
PAUSE_BYTES: Final = 46
#: The smallest trim that keeps QPN, PSN, EV and message id of a DATA packet.
MIN_TRIM_BYTES: Final = ENVELOPE_BYTES + RETH_BYTES + 8

# ---------------------------------------------------------------- IP marks
ECN_NOT_ECT: Final = 0
ECN_ECT0: Final = 2
ECN_CE: Final = 3
#: DSCP that a trimming switch writes into the outer header (SONiC lets operators pick one).
TRIM_DSCP: Final = 46
DEFAULT_DSCP: Final = 26
#: Outer (and inner) IPv6 hop limit a host sends with; every switch takes one off the outer.
DEFAULT_HOP_LIMIT: Final = 64


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(-1, check=True)
def data_bytes(length: cython.longlong, imm: cython.bint = False) -> cython.longlong:
    """IPv6 bytes of a DATA packet with ``length`` payload bytes."""
    return DATA_HEADER_BYTES + length + (IMMDT_BYTES if imm else 0)


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(-1, check=True)
def rc_data_bytes(length: cython.longlong, first: cython.bint,
                  imm: cython.bint = False) -> cython.longlong:
    """IPv6 bytes of a RoCE RC WRITE packet with ``length`` payload bytes: RETH on the first
    packet of the WRITE only, ImmDt on the last of a WRITE with immediate."""
    return (RC_DATA_HEADER_BYTES + length + (RETH_BYTES if first else 0)
            + (IMMDT_BYTES if imm else 0))


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(check=False)
def data_class(kind: cython.longlong, flags: cython.longlong) -> cython.bint:
    """Whether a switch queues a packet of this kind with the data (the rest ride the
    strict-priority header queue): DATA, and RoCE RC's ACKs and NAKs, which a RoCE NIC sends
    on its QP's traffic class (its CNPs keep the high-priority one)."""
    # (C integers: DATA, FLAG_ROCE, ACK and NACK written out, as in psn_add; a Python
    # constant here would box ``kind`` on every hop; tests/test_packet_classes.py holds them)
    return kind == 0 or ((flags & 0x0100) != 0 and (kind == 1 or kind == 2))


# (the PSN constants are written out in these two: C arithmetic in the compiled build)
@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(check=False)
def psn_add(psn: cython.longlong, n: cython.longlong) -> cython.longlong:
    return (psn + n) & 0xFFFFFF  # PSN_MASK


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(check=False)
def psn_diff(a: cython.longlong, b: cython.longlong) -> cython.longlong:
    """Signed distance a - b on the 24-bit PSN circle, in [-2^23, 2^23)."""
    d: cython.longlong = (a - b) & 0xFFFFFF  # PSN_MASK
    return d - 0x1000000 if d >= 0x800000 else d  # PSN_MOD, PSN_MOD // 2


@cython.freelist(4096)
@cython.no_gc
@cython.cclass
class Packet:
    """One packet in flight. Plain attributes (``__slots__``) because the simulator moves
    millions of them; build with keywords, unset fields take neutral values.

    Compiled, freed packets are kept for reuse (``freelist``: two packets are made per
    delivered DATA packet) and the cycle collector never tracks them (``no_gc``: a packet
    refers to ints, bytes and a bytearray only, so it can be part of no cycle)."""

    # The C fields, in the order of the C struct: what every hop reads or writes first
    # (ports, switches, the NIC's delivery), so a packet that went cold in its queue costs one
    # or two cache lines per hop, not four; the transport's fields after. Fields that can
    # exceed 63 bits stay Python ints: the 64-bit wire fields (RETH offset, message length,
    # SACK bitmap); the outer destination is two unsigned 64-bit halves (``da`` joins them,
    # so that a switch's shift-and-forward is C integer arithmetic) and the digest
    # (simulation only, always a u64) is unsigned.
    kind: cython.longlong
    size: cython.longlong
    #: simulation bookkeeping, not on the wire (``prio``: the 802.1p priority the switches
    #: classify the packet by, which a real packet carries as its DSCP)
    hop_epoch: cython.longlong
    prio: cython.longlong
    # outer header, written by the sender and rewritten by switches
    ecn: cython.longlong
    trimmed: cython.bint
    da_hi: cython.ulonglong
    da_lo: cython.ulonglong
    hop_limit: cython.longlong
    plane: cython.longlong
    # transport (inner) fields
    dst: cython.longlong
    qpn: cython.longlong
    src: cython.longlong
    psn: cython.longlong
    ev: cython.longlong
    msg_id: cython.longlong
    offset: int
    length: cython.longlong
    msg_len: int
    flags: cython.longlong
    ts: cython.longlong
    imm: cython.longlong
    echo_psn: cython.longlong
    sack_base: cython.longlong
    sack: int
    #: real bytes (live runtime, pcap) or None in simulation
    payload: Any
    digest: cython.ulonglong
    #: the live fabric's datagram this packet models (None elsewhere): the fabric moves the
    #: object through the simulator's ports and writes its outer header back here
    frame: Any
    if not cython.compiled:  # pure Python: the fields above are the slots
        __slots__ = tuple(__annotations__)

    def __init__(
        self,
        kind: int,
        src: int,
        dst: int,
        qpn: int,
        psn: int = 0,
        *,
        ev: int = 0,
        msg_id: int = 0,
        offset: int = 0,
        length: int = 0,
        msg_len: int = 0,
        flags: int = 0,
        ts: int = 0,
        imm: int = 0,
        echo_psn: int = 0,
        sack_base: int = 0,
        sack: int = 0,
        da: int = 0,
        ecn: int = ECN_ECT0,
        trimmed: bool = False,
        size: int | None = None,
        payload: bytes | None = None,
        digest: int = 0,
        plane: int = 0,
        prio: int = 0,
    ) -> None:
        self.kind = kind
        self.src = src
        self.dst = dst
        self.qpn = qpn
        self.psn = psn
        self.ev = ev
        self.msg_id = msg_id
        self.offset = offset
        self.length = length
        self.msg_len = msg_len
        self.flags = flags
        self.ts = ts
        self.imm = imm
        self.echo_psn = echo_psn
        self.sack_base = sack_base
        self.sack = sack
        self.da = da
        self.ecn = ecn
        self.trimmed = trimmed
        self.size = natural_size(kind, length, flags) if size is None else size
        self.hop_limit = DEFAULT_HOP_LIMIT
        self.payload = payload
        self.digest = digest
        self.plane = plane
        self.hop_epoch = 0
        self.prio = prio
        self.frame = None

    def __repr__(self) -> str:
        extra = " TRIMMED" if self.trimmed else ""
        return (f"<{KIND_NAMES[self.kind]} h{self.src}->h{self.dst} qpn={self.qpn} "
                f"psn={self.psn} ev={self.ev:#x} off={self.offset} len={self.length} "
                f"size={self.size}{extra}>")

    @property
    def da(self) -> int:
        """The outer IPv6 destination (the uSID carrier), as one 128-bit integer."""
        hi: int = self.da_hi  # a Python int (compiled too): the join needs 128 bits
        return (hi << 64) | self.da_lo

    @da.setter
    def da(self, value: int) -> None:
        if value >> 128 or value < 0:
            raise ValueError(f"destination {value:#x} is not a 128-bit IPv6 address")
        self.da_hi = value >> 64
        self.da_lo = value & 0xFFFFFFFFFFFFFFFF

    def fields(self) -> dict[str, object]:
        """Every field (and ``da``) as a dict, by name (tests and debugging; never on a hot
        path)."""
        return {name: getattr(self, name) for name in attribute_names(type(self))}


@cython.ccall
@cython.annotation_typing(True)
def make_packet(kind: cython.longlong, src: cython.longlong, dst: cython.longlong,
                qpn: cython.longlong, psn: cython.longlong, ev: cython.longlong,
                msg_id: cython.longlong, offset: Any, length: cython.longlong, msg_len: Any,
                flags: cython.longlong, ts: cython.longlong, imm: cython.longlong,
                echo_psn: cython.longlong, sack_base: cython.longlong, sack: Any,
                da_hi: cython.ulonglong, da_lo: cython.ulonglong, size: cython.longlong,
                payload: Any, digest: cython.ulonglong, plane: cython.longlong) -> Packet:
    """``Packet(kind, src, dst, qpn, psn, ev=ev, ...)`` with every one of these fields given
    (the rest as ``Packet`` sets them: ECT(0), untrimmed, default hop limit, priority 0), for
    the transports' per-packet paths: compiled, this is a C call that fills the fields
    directly, where the keyword call boxes every field and parses the keywords. The
    destination comes as its two 64-bit halves (``split_address``), as ``Packet`` keeps it
    (``tests/test_packet.py`` checks that both make the same packet)."""
    pkt: Packet = Packet.__new__(Packet)
    pkt.kind = kind
    pkt.src = src
    pkt.dst = dst
    pkt.qpn = qpn
    pkt.psn = psn
    pkt.ev = ev
    pkt.msg_id = msg_id
    pkt.offset = offset
    pkt.length = length
    pkt.msg_len = msg_len
    pkt.flags = flags
    pkt.ts = ts
    pkt.imm = imm
    pkt.echo_psn = echo_psn
    pkt.sack_base = sack_base
    pkt.sack = sack
    pkt.da_hi = da_hi
    pkt.da_lo = da_lo
    pkt.ecn = ECN_ECT0
    pkt.trimmed = False
    pkt.size = size
    pkt.hop_limit = DEFAULT_HOP_LIMIT
    pkt.payload = payload
    pkt.digest = digest
    pkt.plane = plane
    pkt.hop_epoch = 0
    pkt.prio = 0
    pkt.frame = None
    return pkt


def split_address(address: int) -> tuple[int, int]:
    """A 128-bit IPv6 address as its (high, low) 64-bit halves, as ``make_packet`` takes
    it: senders split each path's address once, not once per packet."""
    if address >> 128 or address < 0:
        raise ValueError(f"destination {address:#x} is not a 128-bit IPv6 address")
    return address >> 64, address & 0xFFFFFFFFFFFFFFFF


@cython.ccall
@cython.annotation_typing(True)
@cython.exceptval(-1, check=True)
def natural_size(kind: cython.longlong, length: cython.longlong = 0,
                 flags: cython.longlong = 0) -> cython.longlong:
    """Untrimmed IPv6 packet bytes for a packet of this kind."""
    if kind == DATA:
        if flags & FLAG_ROCE:
            return rc_data_bytes(length, bool(flags & FLAG_FIRST),
                                 bool(flags & FLAG_IMM and flags & FLAG_LAST))
        return data_bytes(length, bool(flags & FLAG_IMM))
    if kind in (ACK, NACK):
        return RC_ACK_BYTES if flags & FLAG_ROCE else ACK_BYTES
    if kind == CNP:
        return CNP_BYTES
    if kind == PAUSE:
        return PAUSE_BYTES
    return PROBE_BYTES


def attribute_names(cls: type) -> tuple[str, ...]:
    """The data attributes of a class of the core, sorted: its fields and properties (the
    descriptors of its type, in either build: the fields are declared once, as annotations)."""
    kinds = (types.MemberDescriptorType, types.GetSetDescriptorType, property)
    return tuple(sorted(name for klass in cls.__mro__ for name, value in vars(klass).items()
                        if isinstance(value, kinds) and not name.startswith("__")))
