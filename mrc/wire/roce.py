"""RoCEv2's own framing, for RoCE RC's packets (``FLAG_ROCE`` DATA, ACK and NAK; CNPs).

RoCE RC sends what a RoCE NIC sends (IBA Vol. 1 ch. 9, Annex A17), not MRC's packet:

* **One IPv6 header** (next header UDP), destination = the packet's ``da`` (what the fabric
  forwards on: a plain IPv6 destination on a routed fabric), source = the host's address;
  traffic class = DSCP + ECN, flow label = the EV's low 20 bits, hop limit as written.
* **UDP** to 4791, the EV's high 12 bits in the source port (as :mod:`mrc.wire` stripes
  MRC's), checksum over the pseudo-header and everything after it.
* **BTH**: RDMA WRITE FIRST / MIDDLE / LAST / ONLY (with immediate: LAST / ONLY 0x09 / 0x0B),
  ACKNOWLEDGE, or CNP (0x81); the A bit is ``FLAG_ACK_REQ``; the BECN bit (bit 30 of the
  QPN word) carries ``FLAG_ECN_ECHO`` of an ACK (the window CC's echo).
* **RETH** (VA = offset 0, R_Key = message id low 32 bits, DMA length = message length) on
  the first packet of a WRITE only (``FLAG_FIRST``); **ImmDt** on its last packet if it has one; **AETH** on
  ACKs (syndrome 0x1F) and sequence-error NAKs (0x60), MSN = message id mod 2^24; a CNP's 16
  reserved bytes; the **ICRC** over the masked header (as :mod:`mrc.wire.checksum`).
* Both checks use the **final** destination (RFC 8200 8.1): on a uSID carrier, which every
  switch shifts, the carrier's block alone (:func:`final_destination`), so they verify
  after every shift as MRC's do.

What a middle or last packet does not carry (message id, offset, message length), the
responder knows from the first (it places in PSN order, :mod:`mrc.transport.rc.responder`):
decoded, those fields are 0. Simulation-only fields (``ts``, ``digest``, ``FLAG_RETX``) are
not on the wire. RC on the routed fabric carries its destination host's routed address
(:mod:`topology.routed`), which names the host; a packet whose ``da`` is not a host address
(a uSID carrier) does not: decoded, ``dst`` is 0. Anything malformed raises
``DecodeError`` (the decoder's callers drop and count it).
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

from mrc.packet import (
    ACK,
    CNP,
    CNP_RESERVED_BYTES,
    DATA,
    DEFAULT_DSCP,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_FIRST,
    FLAG_IMM,
    FLAG_LAST,
    FLAG_ROCE,
    FLAG_SEQ_ERR,
    ICRC_BYTES,
    IPV6_BYTES,
    NACK,
    ROCE_ENVELOPE_BYTES,
    ROCE_UDP_PORT,
    TRIM_DSCP,
    Packet,
)
from mrc.wire.checksum import CRC_LRH, CRC_RESIDUE, ICRC_MASK, sum16
from mrc.wire.layout import (
    HOST_HI,
    HOST_LO,
    M24,
    NH_UDP,
    OP_ACKNOWLEDGE,
    OP_CNP,
    OP_RDMA_WRITE_ONLY,
    OP_RDMA_WRITE_ONLY_IMM,
    PKEY_DEFAULT,
    SYNDROME_ACK,
    SYNDROME_NAK_SEQ,
    UDP_SPORT_BASE,
)
from topology.routed import ROUTED_BASE, is_routed
from topology.usid import BLOCK_BASE, BLOCK_MASK

OP_RDMA_WRITE_FIRST: Final = 0x06
OP_RDMA_WRITE_MIDDLE: Final = 0x07
OP_RDMA_WRITE_LAST: Final = 0x08
OP_RDMA_WRITE_LAST_IMM: Final = 0x09
#: WRITE opcodes -> (first packet: RETH, last packet, ImmDt)
WRITE_OPCODES: Final = {OP_RDMA_WRITE_FIRST: (True, False, False),
                        OP_RDMA_WRITE_MIDDLE: (False, False, False),
                        OP_RDMA_WRITE_LAST: (False, True, False),
                        OP_RDMA_WRITE_LAST_IMM: (False, True, True),
                        OP_RDMA_WRITE_ONLY: (True, True, False),
                        OP_RDMA_WRITE_ONLY_IMM: (True, True, True)}
_OPCODE_OF = {v: k for k, v in WRITE_OPCODES.items()}
#: What round-trips of each kind (besides the flags the wire carries, ``WIRE_FLAGS``);
#: ``msg_id``, ``msg_len`` and ``offset`` of DATA only on a WRITE's first packet, ``imm``
#: only with FLAG_IMM on its last, ``dst`` where ``da`` is a host address, ACK ``msg_id``
#: modulo 2^24.
WIRE_FIELDS: Final = {
    DATA: ("kind", "src", "qpn", "psn", "ev", "length", "da", "ecn", "trimmed", "size",
           "hop_limit"),
    ACK: ("kind", "src", "qpn", "psn", "ev", "da", "ecn", "trimmed", "size", "hop_limit"),
    CNP: ("kind", "src", "qpn", "psn", "ev", "da", "ecn", "trimmed", "size", "hop_limit"),
}
WIRE_FIELDS[NACK] = WIRE_FIELDS[ACK]
#: The flags a RoCE packet carries (opcode, A bit, BECN, AETH syndrome); the rest are the
#: simulator's (FLAG_RETX) or MRC's.
WIRE_FLAGS: Final = (FLAG_ROCE | FLAG_FIRST | FLAG_ACK_REQ | FLAG_LAST | FLAG_IMM | FLAG_SEQ_ERR
                     | FLAG_ECN_ECHO)
BECN: Final = 0x40000000  # in the BTH word of the QPN (the byte after the P_Key)
#: IPv6 | UDP | BTH: 60 bytes
ENV: Final = struct.Struct(">IHBBQQQQ" "HHHH" "BBHII")
RETH: Final = struct.Struct(">QII")
U32: Final = struct.Struct(">I")
_ICRC = struct.Struct("<I")
_U16 = struct.Struct(">H")
#: the ICRC's mask over IPv6 + UDP + BTH (the same 60 bytes as MRC's inner headers)
_MASK: Final = ICRC_MASK
OFF_UDP_LEN: Final = IPV6_BYTES + 4
OFF_UDP_CSUM: Final = IPV6_BYTES + 6


class RoceDecodeError(ValueError):
    """Raised for malformed RoCE bytes (``mrc.wire.decode`` turns it into ``DecodeError``)."""


def is_roce(pkt: Packet) -> bool:
    """Whether a packet goes on the wire in RoCEv2's framing (RC's DATA/ACK/NAK, CNPs)."""
    return pkt.kind == CNP or bool(pkt.flags & FLAG_ROCE and pkt.kind in (DATA, ACK, NACK))


def unnamed_destination(pkt: Packet) -> bool:
    """Whether a decoded RoCE packet could not name its destination host: its IPv6
    destination is a uSID carrier, not a host address (its ``dst`` reads 0); a host that the
    fabric delivered it to takes it as its own."""
    return is_roce(pkt) and not _names_host(pkt.da_hi, pkt.da_lo)


def _names_host(d_hi: int, d_lo: int) -> bool:
    """Whether an IPv6 destination (two 64-bit halves) is a host's address: an inner host
    address, or a routed one (:mod:`topology.routed`: RC on the routed fabric), whose
    interface IDs are the same."""
    return (d_hi == HOST_HI or is_routed(d_hi << 64)) and d_lo >> 32 == HOST_LO >> 32


def final_destination(buf: bytes | bytearray) -> int:
    """The IPv6 destination the integrity checks use: the final one (RFC 8200 8.1). A uSID
    carrier (the static-SRv6 model) is rewritten at every hop and ends as its block alone
    (every uSID shifted out); a plain destination is itself."""
    da = int.from_bytes(buf[24:40], "big")
    return da & BLOCK_MASK if da >> 104 == BLOCK_BASE >> 8 else da


def _masked(buf: bytes | bytearray) -> bytes:
    """What the ICRC covers of IPv6 + UDP + BTH: the masked fields set to ones, the
    destination its final one (:func:`final_destination`)."""
    head = bytes(buf[:24]) + final_destination(buf).to_bytes(16, "big") + bytes(buf[40:60])
    return (int.from_bytes(head, "big") | _MASK).to_bytes(ROCE_ENVELOPE_BYTES, "big")


def _udp_sum(buf: bytes | bytearray) -> int:
    """The UDP checksum's sum (mod 0xFFFF): pseudo-header (source, final destination, UDP
    length, next header) and UDP onwards (2^16 = 1 mod 0xFFFF: a 16-byte address adds as
    its integer value)."""
    return (int.from_bytes(buf[8:24], "big") + final_destination(buf) + sum16(buf, IPV6_BYTES)
            + len(buf) - IPV6_BYTES + NH_UDP) % 0xFFFF


def _extension(p: Packet) -> tuple[int, bytes]:
    """(BTH opcode, the headers after the BTH) of a packet."""
    kind = p.kind
    if kind == DATA:
        first = bool(p.flags & FLAG_FIRST)
        last = bool(p.flags & FLAG_LAST)
        imm = bool(p.flags & FLAG_IMM) and last
        ext = RETH.pack(p.offset, p.msg_id & 0xFFFFFFFF, p.msg_len) if first else b""
        return _OPCODE_OF[(first, last, imm)], ext + (U32.pack(p.imm) if imm else b"")
    if kind == ACK or kind == NACK:
        syndrome = SYNDROME_ACK if kind == ACK else SYNDROME_NAK_SEQ
        if kind == NACK and not p.flags & FLAG_SEQ_ERR:
            raise ValueError("RoCE RC NAKs are sequence-error NAKs (FLAG_SEQ_ERR)")
        return OP_ACKNOWLEDGE, U32.pack((syndrome << 24) | (p.msg_id & M24))
    return OP_CNP, bytes(CNP_RESERVED_BYTES)


def encode_roce(p: Packet, payload: bytes = b"") -> bytes:
    """The RoCEv2 bytes of ``p`` (``payload``: a DATA packet's bytes; a trimmed packet is cut
    to ``p.size`` with its lengths and UDP checksum rewritten, as a trimming switch does)."""
    for name, value, bits in (("QPN", p.qpn, 24), ("PSN", p.psn, 24), ("host", p.src, 32),
                              ("EV", p.ev, 32), ("ECN", p.ecn, 2), ("hop limit", p.hop_limit, 8)):
        if value < 0 or value >> bits:
            raise ValueError(f"{name} {value} does not fit {bits} bits")
    opcode, ext = _extension(p)
    tc = ((TRIM_DSCP if p.trimmed else DEFAULT_DSCP) << 2) | p.ecn
    ulen = 8 + 12 + len(ext) + len(payload) + ICRC_BYTES
    qpn_w = p.qpn | (BECN if p.kind in (ACK, NACK) and p.flags & FLAG_ECN_ECHO else 0)
    psn_w = p.psn | (0x80000000 if p.flags & FLAG_ACK_REQ else 0)
    hdr = ENV.pack(0x60000000 | (tc << 20) | (p.ev & 0xFFFFF), ulen, NH_UDP, p.hop_limit,
                   HOST_HI, HOST_LO | p.src, p.da_hi, p.da_lo,
                   UDP_SPORT_BASE | (p.ev >> 20), ROCE_UDP_PORT, ulen, 0,
                   opcode, 0, PKEY_DEFAULT, qpn_w, psn_w) + ext
    crc = zlib.crc32(payload, zlib.crc32(hdr[ROCE_ENVELOPE_BYTES:],
                                         zlib.crc32(_masked(hdr), CRC_LRH)))
    body = hdr + payload + _ICRC.pack(crc)
    out = bytearray(body)
    _set_checksum(out)
    if p.trimmed and p.size < len(out):
        if p.size < ROCE_ENVELOPE_BYTES:
            raise ValueError(f"trim size {p.size} cuts into the BTH")
        del out[p.size:]
        cut_lengths(out)
    return bytes(out)


def _set_checksum(buf: bytearray) -> None:
    """Write the UDP checksum of a RoCE packet of ``len(buf)`` bytes (its field zero first)."""
    buf[OFF_UDP_CSUM] = buf[OFF_UDP_CSUM + 1] = 0
    r = _udp_sum(buf)
    buf[OFF_UDP_CSUM:OFF_UDP_CSUM + 2] = _U16.pack(0xFFFF - r if r else 0xFFFF)


def cut_lengths(buf: bytearray) -> None:
    """A RoCE packet cut to ``len(buf)`` bytes made well formed: IPv6 payload length, UDP
    length and checksum say the cut (the ICRC went with the cut)."""
    ulen = len(buf) - IPV6_BYTES
    buf[4:6] = buf[OFF_UDP_LEN:OFF_UDP_LEN + 2] = _U16.pack(ulen)
    _set_checksum(buf)


def decode_roce(data: bytes | bytearray | memoryview) -> Packet:
    """Parse and verify one RoCEv2 packet (raises :class:`RoceDecodeError`)."""
    data = bytes(data)
    n = len(data)
    if n < ROCE_ENVELOPE_BYTES + ICRC_BYTES:
        raise RoceDecodeError(f"{n} bytes is shorter than a RoCEv2 envelope and ICRC")
    (vtf, plen, nh, hlim, s_hi, s_lo, d_hi, d_lo, sport, dport, ulen, csum, opcode, bflags,
     pkey, qpn_w, psn_w) = ENV.unpack_from(data)
    if vtf >> 28 != 6 or nh != NH_UDP or plen != n - IPV6_BYTES or ulen != plen:
        raise RoceDecodeError("not IPv6/UDP of this length")
    if dport != ROCE_UDP_PORT or sport >> 12 != 0xC or csum == 0:
        raise RoceDecodeError("not UDP 4791 from an EV source port with a checksum")
    if s_hi != HOST_HI or s_lo >> 32 != HOST_LO >> 32:
        raise RoceDecodeError("the source is not a host address")
    if pkey != PKEY_DEFAULT or bflags & 0x3F or qpn_w & 0x3F000000:
        raise RoceDecodeError("BTH P_Key, pad count, version or reserved bits not ours")
    tc = (vtf >> 20) & 0xFF
    trimmed = tc >> 2 == TRIM_DSCP
    ext = data[ROCE_ENVELOPE_BYTES:n - ICRC_BYTES]
    kind, fields = _parse_ext(opcode, ext, trimmed)
    if not trimmed:  # a cut packet cannot be verified (RC drops trimmed packets anyway)
        _verify(data)
    flags = (FLAG_ACK_REQ if psn_w >> 31 else 0) | fields[0]
    if kind != CNP:  # (a CNP is RoCEv2's whoever sends it: no flag needed)
        flags |= FLAG_ROCE
    if kind in (ACK, NACK) and qpn_w & BECN:
        flags |= FLAG_ECN_ECHO
    msg_id, offset, length, msg_len, imm, payload = fields[1:]
    dst = d_lo & 0xFFFFFFFF if _names_host(d_hi, d_lo) else 0
    top = d_hi >> 32  # a routed address or a uSID carrier names its plane (as MRC's)
    pkt = Packet(kind, s_lo & 0xFFFFFFFF, dst, qpn_w & M24, psn_w & M24,
                 ev=((sport & 0xFFF) << 20) | (vtf & 0xFFFFF), msg_id=msg_id, offset=offset,
                 length=length, msg_len=msg_len, flags=flags, imm=imm,
                 da=(d_hi << 64) | d_lo, ecn=tc & 3, trimmed=trimmed, size=n,
                 payload=payload,
                 plane=top & 0xFF if top & 0xFFFFFF00 in (BLOCK_BASE, ROUTED_BASE) else 0)
    pkt.hop_limit = hlim
    return pkt


def _parse_ext(opcode: int, ext: bytes, trimmed: bool
               ) -> tuple[int, tuple[int, int, int, int, int, int, bytes | None]]:
    """(kind, (flags, msg_id, offset, length, msg_len, imm, payload)) of the headers after
    the BTH."""
    if opcode in WRITE_OPCODES:
        first, last, imm = WRITE_OPCODES[opcode]
        hdr = (RETH.size if first else 0) + (4 if imm else 0)
        if len(ext) < hdr:
            raise RoceDecodeError("WRITE headers cut short")
        va, rkey, dlen = RETH.unpack_from(ext) if first else (0, 0, 0)
        imm_v = U32.unpack_from(ext, hdr - 4)[0] if imm else 0
        payload = ext[hdr:]
        flags = (FLAG_FIRST if first else 0) | (FLAG_LAST if last else 0) | (FLAG_IMM if imm else 0)
        if first and last and not trimmed and dlen != len(payload):
            raise RoceDecodeError("RETH DMA length disagrees with the payload of a WRITE ONLY")
        return DATA, (flags, rkey, va, len(payload), dlen, imm_v, None if trimmed else payload)
    if opcode == OP_ACKNOWLEDGE:
        if len(ext) != 4:
            raise RoceDecodeError("an ACKNOWLEDGE has an AETH and nothing else")
        aeth = U32.unpack(ext)[0]
        syndrome = aeth >> 24
        if syndrome >> 5 == 0:
            return ACK, (0, aeth & M24, 0, 0, 0, 0, None)
        if syndrome == SYNDROME_NAK_SEQ:
            return NACK, (FLAG_SEQ_ERR, aeth & M24, 0, 0, 0, 0, None)
        raise RoceDecodeError(f"AETH syndrome {syndrome:#04x} is not an RC ACK or NAK")
    if opcode == OP_CNP:
        if len(ext) != CNP_RESERVED_BYTES:
            raise RoceDecodeError("a CNP has 16 reserved bytes")
        return CNP, (0, 0, 0, 0, 0, 0, None)
    raise RoceDecodeError(f"BTH opcode {opcode:#04x} is not a RoCE RC opcode")


def _verify(data: bytes) -> None:
    n = len(data)
    crc = zlib.crc32(data[ROCE_ENVELOPE_BYTES:n], zlib.crc32(_masked(data), CRC_LRH))
    if crc != CRC_RESIDUE:
        raise RoceDecodeError("ICRC mismatch")
    if _udp_sum(data):
        raise RoceDecodeError("UDP checksum mismatch")
