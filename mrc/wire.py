"""Fast wire codec: ``mrc.packet.Packet`` <-> real IPv6/IPv6/UDP/RoCE v2/MRC bytes.

The layout is the one ``mrc.packet`` documents (outer IPv6 carrying the uSIDs, inner IPv6 with
the real host addresses, UDP 4791, BTH, RoCE extension headers, MRC extensions, ICRC). Choices
that the model leaves open, and why:

* **Opcodes.** DATA is RC RDMA WRITE ONLY (0x0A, 0x0B with ImmDt) so every packet carries a
  RETH and is placed on its own. ACK/NACK are RC ACKNOWLEDGE (0x11) with an AETH. PROBE and
  PROBE_REPLY use 0xC0/0xC1: opcodes 0xC0-0xFF are the IBA's manufacturer-specific range, so
  no standard RoCE endpoint mistakes them for its own traffic.
* **AETH syndromes.** ACK = 0x1F (ACK, credit field "invalid": no end-to-end credits). The RC
  go-back-N NACK (``FLAG_SEQ_ERR``) is the standard PSN-sequence-error NAK 0x60. The MRC trim
  NACK is an **RNR NAK with timer code 1 (0x21, 0.01 ms)**: RNR is the only other non-fatal
  NAK in the IBA table and means "I could not accept this packet for lack of resources, send
  it again", which is what a trim is. Sequence-error would order an RC requester to go back N
  (wrong for MRC's selective repeat, and ambiguous with our own RC NACKs); the remaining NAK
  codes (invalid request, remote access/operational error) are fatal and move an RC QP to the
  error state. ``FLAG_TRIM`` in MRC-AETH still says what happened.
* **AETH MSN** carries ``msg_id mod 2**24``: RC's MSN counts the responder's completed
  messages; MRC completes messages out of order, so the id of the message concerned is the
  honest analogue (and lets a NACK name the message of the trimmed packet).
* **RETH**: VA = byte offset in the message, R_Key = ``msg_id`` low 32 bits, DMA length =
  payload bytes. MRC-DETH repeats the full msg_id; both must agree.
* **No pad bytes** (BTH PadCnt 0): ``mrc.packet.natural_size`` counts payload bytes exactly.
* **Entropy.** Flow label (outer and inner) and UDP source port are folds of the EV, so any
  ECMP hash would spread EVs; the receiver reads the EV from the MRC header, never from these.
* **Integrity.** The inner UDP checksum and the RoCE v2 ICRC are real. The ICRC is CRC-32 over
  8 bytes of 0xFF (the masked LRH stand-in) + inner IPv6 + UDP + BTH + everything up to the
  ICRC, with the fields routers may change replaced by ones: IPv6 traffic class, flow label
  and hop limit, the UDP checksum, and the BTH byte after the P_Key (FECN/BECN/reserved). It is
  stored least-significant byte first, as Linux rxe and scapy do. Switches only ever rewrite
  the *outer* header, so both checks verify after every uSID shift, CE mark or trim re-mark.
* **Trimming.** A trimmed packet is the full packet cut to ``size`` bytes, its outer DSCP set
  to ``TRIM_DSCP`` and its outer payload length fixed (so the outer header stays well formed;
  the inner one still states the original length). ``decode`` accepts short packets only with
  that mark and returns every field that survived (no checksum can be verified).
* **Simulation.** ``payload=None`` is encoded as ``pseudo_payload(digest, length)`` so pcaps
  of simulated runs have true sizes. ``decode`` always returns the bytes it found.

``decode`` raises ``DecodeError`` (a ``ValueError``) for anything malformed, and nothing else.
``encode`` raises ``ValueError`` for fields that do not fit their wire width.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np

from mrc.packet import (
    ACK,
    DATA,
    DEFAULT_DSCP,
    ECN_CE,
    ECN_ECT0,
    ECN_NOT_ECT,
    ENVELOPE_BYTES,
    FLAG_ACK_REQ,
    FLAG_IMM,
    FLAG_SEQ_ERR,
    ICRC_BYTES,
    IPV6_BYTES,
    NACK,
    PROBE,
    PROBE_REPLY,
    ROCE_UDP_PORT,
    TRIM_DSCP,
    Packet,
)
from topology.usid import BLOCK_BASE, HOST_PREFIX


class DecodeError(ValueError):
    """Bytes that are not a well-formed MRC packet (the only exception ``decode`` raises)."""


# ------------------------------------------------------------------ protocol constants
OP_RDMA_WRITE_ONLY: Final = 0x0A
OP_RDMA_WRITE_ONLY_IMM: Final = 0x0B
OP_ACKNOWLEDGE: Final = 0x11
OP_MRC_PROBE: Final = 0xC0
OP_MRC_PROBE_REPLY: Final = 0xC1

SYNDROME_ACK: Final = 0x1F  # ACK, credit count 31 = "invalid" (no end-to-end credits)
SYNDROME_NAK_SEQ: Final = 0x60  # NAK, code 0: PSN sequence error (RC go-back-N)
SYNDROME_RNR_TRIM: Final = 0x21  # RNR NAK, timer 1 (0.01 ms): MRC trim NACK

PKEY_DEFAULT: Final = 0xFFFF
HOP_LIMIT: Final = 64
NH_IPV6: Final = 41
NH_UDP: Final = 17
UDP_SPORT_BASE: Final = 0xC000  # RoCE v2 entropy ports live in 49152..65535

#: Which Packet attributes each kind carries on the wire (what round-trips exactly).
#: ``imm`` only with FLAG_IMM; ``msg_id`` of ACK/NACK travels as AETH MSN (modulo 2**24).
WIRE_FIELDS: Final[dict[int, tuple[str, ...]]] = {
    DATA: ("kind", "src", "dst", "qpn", "psn", "ev", "msg_id", "offset", "length", "msg_len",
           "flags", "ts", "imm", "da", "ecn", "trimmed", "size", "payload"),
    ACK: ("kind", "src", "dst", "qpn", "psn", "ev", "msg_id", "flags", "ts", "echo_psn",
          "sack_base", "sack", "da", "ecn", "trimmed", "size"),
    PROBE: ("kind", "src", "dst", "qpn", "psn", "ev", "flags", "ts", "da", "ecn", "trimmed",
            "size"),
}
WIRE_FIELDS[NACK] = WIRE_FIELDS[ACK]
WIRE_FIELDS[PROBE_REPLY] = WIRE_FIELDS[PROBE]

# Byte offsets (outermost first), shared with the byte-level helpers below.
OFF_OUTER_DST: Final = 24
OFF_ACTIVE_USID: Final = 28
OFF_INNER: Final = IPV6_BYTES  # 40
OFF_UDP: Final = 2 * IPV6_BYTES  # 80
OFF_UDP_CSUM: Final = OFF_UDP + 6  # 86
OFF_BTH: Final = OFF_UDP + 8  # 88
OFF_EXT: Final = ENVELOPE_BYTES  # 100

_HOST_HI: Final = HOST_PREFIX >> 64
_M64: Final = (1 << 64) - 1
_M24: Final = (1 << 24) - 1

# ------------------------------------------------------------------ precompiled layouts
# Envelope: outer IPv6 | inner IPv6 | UDP | BTH. Addresses as two u64 halves; host addresses
# are HOST_PREFIX | host, so their low half is the host index.
_ENV_FMT = ">IHBBQQQQ" "IHBBQQQQ" "HHHH" "BBHII"
_ENV = struct.Struct(_ENV_FMT)
_RETH_DETH = "QII" "IIIHHQ"
_RETH_IMM_DETH = "QII" "I" "IIIHHQ"
_AETH_MRC = "I" "IIIHHIQ"
_PETH = "IIHH"
_DATA = struct.Struct(_ENV_FMT + _RETH_DETH)
_DATA_IMM = struct.Struct(_ENV_FMT + _RETH_IMM_DETH)
_ACK = struct.Struct(_ENV_FMT + _AETH_MRC)
_PRB = struct.Struct(_ENV_FMT + _PETH)
_X_DATA = struct.Struct(">" + _RETH_DETH)
_X_DATA_IMM = struct.Struct(">" + _RETH_IMM_DETH)
_X_ACK = struct.Struct(">" + _AETH_MRC)
_X_PRB = struct.Struct(">" + _PETH)
# ICRC: what it sees of the LRH (8 masked bytes) and of inner IPv6 + UDP + BTH.
_CRC_LRH: Final = zlib.crc32(b"\xff" * 8)  # CRC state after the 8 masked LRH bytes
#: OR-ed over inner IPv6 + UDP + BTH (bytes 40..99) as one integer, it sets to ones what the
#: ICRC does not cover: traffic class + flow label (the version nibble stays 6), hop limit,
#: the UDP checksum and the BTH FECN/BECN/reserved byte.
_ICRC_MASK: Final = int.from_bytes(
    b"\x0f\xff\xff\xff" + bytes(3) + b"\xff"  # inner IPv6 version/TC/flow label .. hop limit
    + bytes(32) + bytes(6) + b"\xff\xff"  # inner addresses, UDP ports and length, checksum
    + bytes(4) + b"\xff" + bytes(7), "big")  # BTH opcode..P_Key, FECN/BECN byte, QPN, PSN
_MASKED_BYTES: Final = OFF_EXT - OFF_INNER  # 60
_U16 = struct.Struct(">H")
_ICRC = struct.Struct("<I")

_DATA_HDR: Final = _DATA.size  # 140
_DATA_IMM_HDR: Final = _DATA_IMM.size  # 144
_ACK_FULL: Final = _ACK.size + ICRC_BYTES  # every ACK/NACK has this length
_PRB_FULL: Final = _PRB.size + ICRC_BYTES
#: CRC-32 of any message followed by its own CRC, least-significant byte first (0x2144DF1C:
#: the empty message, CRC 0, followed by it).
_CRC_RESIDUE: Final = zlib.crc32(bytes(4))


def _field_ends(fmt: str) -> tuple[int, ...]:
    """Absolute end offset of each field of an extension layout (trim survival test)."""
    ends = []
    pos = OFF_EXT
    for code in fmt:
        pos += struct.calcsize(">" + code)
        ends.append(pos)
    return tuple(ends)


_ENDS_DATA = _field_ends(_RETH_DETH)
_ENDS_DATA_IMM = _field_ends(_RETH_IMM_DETH)
_ENDS_ACK = _field_ends(_AETH_MRC)
_ENDS_PRB = _field_ends(_PETH)


def flow_label(ev: int) -> int:
    """20-bit IPv6 flow label from an EV (every EV bit influences it; EVs < 2**20 map 1:1)."""
    return (ev ^ (ev >> 20)) & 0xFFFFF


def udp_sport(ev: int) -> int:
    """RoCE v2 UDP source port (49152..65535) from an EV."""
    return UDP_SPORT_BASE | ((ev ^ (ev >> 14) ^ (ev >> 28)) & 0x3FFF)


def pseudo_payload(digest: int, length: int) -> bytes:
    """Deterministic stand-in bytes for a simulated segment (its 64-bit digest, repeated)."""
    if length <= 0:
        return b""
    word = (digest & _M64).to_bytes(8, "big")
    return (word * ((length >> 3) + 1))[:length]


_NP_MIN: Final = 512  # below this, int.from_bytes beats numpy's call overhead
_U4: Final = np.dtype("<u4")
_U64: Final = np.uint64
_frombuffer = np.frombuffer
_add_reduce = np.add.reduce
_add_reduceat = np.add.reduceat
_PADS: Final = (b"", b"\0\0\0", b"\0\0", b"\0")  # zeros up to the next multiple of 4
_crc32 = zlib.crc32
_from_bytes = int.from_bytes


def _sum16(buf: bytes | bytearray | memoryview, start: int = 0) -> int:
    """An integer congruent (mod 0xFFFF) to the big-endian 16-bit word sum of ``buf[start:]``,
    padded with a zero byte when odd (``start`` is an even offset of the checksummed data).

    Large buffers: numpy sums little-endian 32-bit words (2**16 == 1 mod 0xFFFF, so a 32-bit
    word is congruent to the sum of its two 16-bit halves), and a byte swap is multiplication
    by 256 modulo 0xFFFF (RFC 1071's byte-order independence). Bytes past the last whole
    32-bit word are added as a big-endian integer. ``start`` is numpy's buffer offset: no
    slice or memoryview is made for it."""
    n = len(buf) - start
    if n < _NP_MIN:
        v = _from_bytes(buf[start:] if start else buf, "big")
        return v << 8 if n & 1 else v
    m = n & ~3
    s = int(_add_reduce(_frombuffer(buf, _U4, m >> 2, start), 0, _U64)) << 8
    if m == n:
        return s
    v = _from_bytes(buf[start + m:], "big")
    return s + (v << 8 if n & 1 else v)


def _sum16_many(bufs: Sequence[object], start: int) -> list[int | None]:
    """``_sum16(buf, start)`` of each ``bytes`` buffer at least as long as the envelope, from
    one numpy reduction over their concatenation (None for the others: summed alone).

    Each buffer is padded with zeros to a multiple of 4 bytes, so every one (and its
    ``start``, a multiple of 4) begins on a 32-bit word; ``reduceat`` then sums the words
    from each ``start`` to the buffer's end (and, unused, each buffer's first ``start``
    bytes)."""
    parts: list[bytes] = []
    bounds: list[int] = []
    which: list[int] = []
    pos = 0
    for i, buf in enumerate(bufs):
        if type(buf) is not bytes or len(buf) < ENVELOPE_BYTES:
            continue
        n = len(buf)
        parts.append(buf)
        bounds.append((pos + start) >> 2)
        pos += n
        if n & 3:
            parts.append(_PADS[n & 3])
            pos += 4 - (n & 3)
        bounds.append(pos >> 2)
        which.append(i)
    out: list[int | None] = [None] * len(bufs)
    if which:
        bounds.pop()  # the last range runs to the end
        words = _add_reduceat(_frombuffer(b"".join(parts), _U4), bounds, 0, _U64)
        for i, total in zip(which, words[::2].tolist(), strict=True):
            out[i] = total << 8
    return out


# ------------------------------------------------------------------ encode
def encode(pkt: Packet) -> bytes:
    """The packet as it is on the wire (trimmed packets: cut to ``pkt.size`` and re-marked)."""
    try:
        return _encode(pkt)
    except (struct.error, OverflowError, TypeError) as exc:
        raise ValueError(f"cannot encode {pkt!r}: {exc}") from exc


def encode_many(pkts: Sequence[Packet]) -> list[bytes]:
    """``encode`` of each packet, with the UDP checksum sums of the DATA payloads taken in one
    numpy reduction (``_sum16_many``): a numpy call costs about as much as summing 4 KB, so a
    sender's burst pays it once, as a received burst does in ``decode_many``."""
    sums = _sum16_many([p.payload if p.kind == DATA else None for p in pkts], 0)
    out = []
    for p, payload_sum in zip(pkts, sums, strict=True):
        try:
            out.append(_encode(p, payload_sum))
        except (struct.error, OverflowError, TypeError) as exc:
            raise ValueError(f"cannot encode {p!r}: {exc}") from exc
    return out


def _encode(p: Packet, payload_sum: int | None = None) -> bytes:
    """``payload_sum``: ``_sum16`` of the DATA payload, if the caller has it (``encode_many``);
    None: sum it here."""
    kind = p.kind
    qpn = p.qpn
    psn = p.psn
    if (qpn | psn) >> 24 or qpn < 0 or psn < 0:
        raise ValueError(f"QPN {qpn} / PSN {psn} do not fit 24 bits")
    src = p.src
    dst = p.dst
    if (src | dst) >> 32 or src < 0 or dst < 0:
        raise ValueError(f"host {src} / {dst} outside the 32-bit host index space")
    ev = p.ev
    flags = p.flags
    ecn = p.ecn
    if ecn >> 2 or ecn < 0:
        raise ValueError(f"ECN {ecn} is not a 2-bit value")
    da = p.da
    fl = (ev ^ (ev >> 20)) & 0xFFFFF  # flow_label(ev)
    sport = UDP_SPORT_BASE | ((ev ^ (ev >> 14) ^ (ev >> 28)) & 0x3FFF)  # udp_sport(ev)
    tc_out = ((TRIM_DSCP if p.trimmed else DEFAULT_DSCP) << 2) | ecn
    tc_in = (DEFAULT_DSCP << 2) | (ECN_ECT0 if ecn == ECN_CE else ecn)
    vtf_out = 0x60000000 | (tc_out << 20) | fl
    vtf_in = 0x60000000 | (tc_in << 20) | fl
    bth_psn = (0x80000000 | psn) if flags & FLAG_ACK_REQ else psn

    if kind == DATA:
        n = p.length
        payload = p.payload
        if payload is None:
            payload = pseudo_payload(p.digest, n)
        elif len(payload) != n:
            raise ValueError(f"payload has {len(payload)} bytes, length says {n}")
        msg_id = p.msg_id
        if flags & FLAG_IMM:
            iplen = _DATA_IMM_HDR - 80 + n + ICRC_BYTES
            hdr = _DATA_IMM.pack(
                vtf_out, iplen + 40, NH_IPV6, HOP_LIMIT, _HOST_HI, src, da >> 64, da & _M64,
                vtf_in, iplen, NH_UDP, HOP_LIMIT, _HOST_HI, src, _HOST_HI, dst,
                sport, ROCE_UDP_PORT, iplen, 0, OP_RDMA_WRITE_ONLY_IMM, 0, PKEY_DEFAULT, qpn,
                bth_psn, p.offset, msg_id & 0xFFFFFFFF, n, p.imm,
                ev, msg_id, p.ts, flags, 0, p.msg_len)
        else:
            iplen = _DATA_HDR - 80 + n + ICRC_BYTES
            hdr = _DATA.pack(
                vtf_out, iplen + 40, NH_IPV6, HOP_LIMIT, _HOST_HI, src, da >> 64, da & _M64,
                vtf_in, iplen, NH_UDP, HOP_LIMIT, _HOST_HI, src, _HOST_HI, dst,
                sport, ROCE_UDP_PORT, iplen, 0, OP_RDMA_WRITE_ONLY, 0, PKEY_DEFAULT, qpn,
                bth_psn, p.offset, msg_id & 0xFFFFFFFF, n,
                ev, msg_id, p.ts, flags, 0, p.msg_len)
    else:
        n = 0
        payload = b""
        if kind == ACK or kind == NACK:
            if kind == ACK:
                syndrome = SYNDROME_ACK
            elif flags & FLAG_SEQ_ERR:
                syndrome = SYNDROME_NAK_SEQ
            else:
                syndrome = SYNDROME_RNR_TRIM
            iplen = _ACK.size - 80 + ICRC_BYTES
            hdr = _ACK.pack(
                vtf_out, iplen + 40, NH_IPV6, HOP_LIMIT, _HOST_HI, src, da >> 64, da & _M64,
                vtf_in, iplen, NH_UDP, HOP_LIMIT, _HOST_HI, src, _HOST_HI, dst,
                sport, ROCE_UDP_PORT, iplen, 0, OP_ACKNOWLEDGE, 0, PKEY_DEFAULT, qpn, bth_psn,
                (syndrome << 24) | (p.msg_id & _M24),
                ev, p.ts, p.echo_psn, flags, 0, p.sack_base, p.sack)
        elif kind == PROBE or kind == PROBE_REPLY:
            iplen = _PRB.size - 80 + ICRC_BYTES
            hdr = _PRB.pack(
                vtf_out, iplen + 40, NH_IPV6, HOP_LIMIT, _HOST_HI, src, da >> 64, da & _M64,
                vtf_in, iplen, NH_UDP, HOP_LIMIT, _HOST_HI, src, _HOST_HI, dst,
                sport, ROCE_UDP_PORT, iplen, 0,
                OP_MRC_PROBE if kind == PROBE else OP_MRC_PROBE_REPLY, 0, PKEY_DEFAULT, qpn,
                bth_psn, ev, p.ts, flags, 0)
        else:
            raise ValueError(f"unknown packet kind {kind!r}")

    # ICRC: masked inner IPv6 + UDP + BTH, then the rest of the header and the payload.
    # (Slices of the small ``bytes`` header: cheaper than memoryviews, and int.from_bytes
    # would copy a memoryview into bytes anyway.)
    crc = _crc32(hdr[OFF_EXT:], _crc32((_from_bytes(hdr[OFF_INNER:OFF_EXT], "big")
                                        | _ICRC_MASK).to_bytes(_MASKED_BYTES, "big"), _CRC_LRH))
    # UDP checksum: pseudo-header (src, dst, length, next header) + UDP + BTH + ... + ICRC.
    total = _from_bytes(hdr[48:], "big") + iplen + NH_UDP
    if n:
        crc = _crc32(payload, crc)
        if payload_sum is not None:
            total += payload_sum
        elif n & 3 or n < _NP_MIN:
            total += _sum16(payload)
        else:  # full-size payloads: _sum16's numpy branch, inlined
            total += int(_add_reduce(_frombuffer(payload, _U4), 0, _U64)) << 8
    icrc = _ICRC.pack(crc)
    # An odd payload leaves the ICRC on odd offsets: each of its bytes moves up 8 bits.
    total += _from_bytes(icrc, "big") << (n & 1) * 8
    # Because 2**16 == 1 (mod 0xFFFF), the one's-complement sum of 16-bit words equals the
    # big-endian integer value of the bytes modulo 0xFFFF, which Python computes in C.
    r = total % 0xFFFF
    out = b"".join((hdr[:OFF_UDP_CSUM], _U16.pack(0xFFFF - r if r else 0xFFFF),  # 0 -> 0xFFFF
                    hdr[OFF_BTH:], payload, icrc))
    if p.trimmed:
        size = p.size
        if size < ENVELOPE_BYTES:
            raise ValueError(f"trim size {size} cuts into the BTH")
        if size < len(out):
            buf = bytearray(out[:size])
            buf[4:6] = _U16.pack(size - IPV6_BYTES)
            return bytes(buf)
    return out


# ------------------------------------------------------------------ decode
def decode(data: bytes | bytearray | memoryview) -> Packet:
    """Parse and verify one packet. Raises ``DecodeError`` and nothing else.

    Full-length packets must pass the ICRC and the inner UDP checksum. A packet shorter than
    its inner IPv6 header says is accepted only if its outer DSCP is ``TRIM_DSCP``; it comes
    back with ``trimmed=True``, ``payload=None`` and zero for every field that was cut off.
    ``plane`` is read from the uSID block of the outer destination (0 outside the block)."""
    try:
        return _decode(data)
    except DecodeError:
        raise
    except _MALFORMED as exc:
        raise DecodeError(f"malformed packet: {exc}") from exc


#: What malformed input can make the parser raise (reported as ``DecodeError``).
_MALFORMED = (struct.error, ValueError, TypeError, IndexError, OverflowError, KeyError,
              AttributeError, BufferError)


def decode_many(datagrams: Sequence[bytes | bytearray | memoryview]
                ) -> list[Packet | DecodeError]:
    """``decode`` of each datagram, in order, with the ``DecodeError`` in the place of a
    datagram that does not decode: the same packets and errors as one call each.

    For a receive loop that read a burst: the UDP checksums of the whole burst are one numpy
    sum over all its bytes; one numpy call per 4 KB datagram costs about twice as much (most
    of it numpy's fixed cost per call)."""
    out: list[Packet | DecodeError] = []
    for data, udp_sum in zip(datagrams, _sum16_many(datagrams, 48), strict=True):
        try:
            out.append(_decode(data, udp_sum))
        except DecodeError as exc:
            out.append(exc)
        except _MALFORMED as exc:
            error = DecodeError(f"malformed packet: {exc}")
            error.__cause__ = exc
            out.append(error)
    return out


def _decode(data: bytes | bytearray | memoryview, udp_sum: int | None = None) -> Packet:
    n = len(data)
    if n < ENVELOPE_BYTES:
        raise DecodeError(f"{n} bytes is shorter than the {ENVELOPE_BYTES}-byte envelope")
    (vtf, plen, nh, _hl, _os_hi, _os_lo, da_hi, da_lo,
     ivtf, iplen, inh, _ihl, s_hi, src, d_hi, dst,
     _sport, dport, ulen, csum, opcode, bflags, pkey, qpn_w, psn_w) = _ENV.unpack_from(data)
    if vtf >> 28 != 6 or nh != NH_IPV6 or plen != n - IPV6_BYTES:
        raise DecodeError("outer header is not IPv6-in-IPv6 of this length")
    if ivtf >> 28 != 6 or inh != NH_UDP or dport != ROCE_UDP_PORT or ulen != iplen:
        raise DecodeError("inner header is not IPv6/UDP 4791 with consistent lengths")
    if s_hi != _HOST_HI or d_hi != _HOST_HI or (src | dst) >> 32:
        raise DecodeError("inner addresses are not host addresses")
    if pkey != PKEY_DEFAULT or bflags & 0x3F:
        raise DecodeError("BTH P_Key, pad count or transport version not ours")
    tc = (vtf >> 20) & 0xFF
    trimmed = (tc >> 2) == TRIM_DSCP
    full = iplen + 2 * IPV6_BYTES
    abit = psn_w >> 31
    top = da_hi >> 32
    plane = top & 0xFF if top & 0xFFFFFF00 == BLOCK_BASE else 0
    if n != full:
        if n > full or not trimmed:
            raise DecodeError(f"{n} bytes where the header says {full} and no trim mark")
        return _decode_cut(data, n, full, opcode, abit, src, dst, qpn_w & _M24,
                           psn_w & _M24, (da_hi << 64) | da_lo, tc & 3, plane)

    da = (da_hi << 64) | da_lo
    qpn = qpn_w & _M24
    psn = psn_w & _M24
    # One branch per kind, each building its Packet with only the fields it carries (the
    # others keep Packet's zero defaults): this runs for every datagram a host receives.
    if opcode == OP_RDMA_WRITE_ONLY or opcode == OP_RDMA_WRITE_ONLY_IMM:
        if opcode == OP_RDMA_WRITE_ONLY:
            hdr_len = _DATA_HDR
            va, rkey, dlen, ev, msg_id, ts, flags, _r, msg_len = _X_DATA.unpack_from(data, OFF_EXT)
            imm = 0
        else:
            hdr_len = _DATA_IMM_HDR
            va, rkey, dlen, imm, ev, msg_id, ts, flags, _r, msg_len = \
                _X_DATA_IMM.unpack_from(data, OFF_EXT)
        if hdr_len + dlen + ICRC_BYTES != n:
            raise DecodeError("RETH DMA length disagrees with the packet length")
        if rkey != msg_id:
            raise DecodeError("RETH R_Key disagrees with MRC-DETH message id")
        if bool(flags & FLAG_IMM) != (opcode == OP_RDMA_WRITE_ONLY_IMM):
            raise DecodeError("FLAG_IMM disagrees with the opcode")
        _verify(data, n, iplen, udp_sum)
        _check_tail(flags, abit, csum)
        end = n - ICRC_BYTES
        return Packet(DATA, src, dst, qpn, psn, ev=ev, msg_id=msg_id, offset=va, length=dlen,
                      msg_len=msg_len, flags=flags, ts=ts, imm=imm, da=da, ecn=tc & 3,
                      trimmed=trimmed, size=n, plane=plane,
                      payload=data[hdr_len:end] if type(data) is bytes
                      else bytes(data[hdr_len:end]))
    if opcode == OP_ACKNOWLEDGE:
        if n != _ACK_FULL:
            raise DecodeError("ACKNOWLEDGE of the wrong length")
        aeth, ev, ts, echo_psn, flags, _r, sack_base, sack = _X_ACK.unpack_from(data, OFF_EXT)
        kind = ACK if aeth >> 29 == 0 else _ack_kind(aeth >> 24, flags)  # syndrome 0x00-0x1F
        _verify(data, n, iplen, udp_sum)
        _check_tail(flags, abit, csum)
        return Packet(kind, src, dst, qpn, psn, ev=ev, msg_id=aeth & _M24, flags=flags, ts=ts,
                      echo_psn=echo_psn, sack_base=sack_base, sack=sack, da=da, ecn=tc & 3,
                      trimmed=trimmed, size=n, plane=plane)
    if opcode == OP_MRC_PROBE or opcode == OP_MRC_PROBE_REPLY:
        if n != _PRB_FULL:
            raise DecodeError("probe of the wrong length")
        ev, ts, flags, _r = _X_PRB.unpack_from(data, OFF_EXT)
        _verify(data, n, iplen, udp_sum)
        _check_tail(flags, abit, csum)
        return Packet(PROBE if opcode == OP_MRC_PROBE else PROBE_REPLY, src, dst, qpn, psn,
                      ev=ev, flags=flags, ts=ts, da=da, ecn=tc & 3, trimmed=trimmed, size=n,
                      plane=plane)
    raise DecodeError(f"BTH opcode {opcode:#04x} is not an MRC opcode")


def _check_tail(flags: int, abit: int, csum: int) -> None:
    """The checks every full-length packet ends with (after its ICRC and UDP checksum)."""
    if bool(flags & FLAG_ACK_REQ) != bool(abit):
        raise DecodeError("FLAG_ACK_REQ disagrees with the BTH A bit")
    if csum == 0:
        raise DecodeError("UDP checksum absent (mandatory over IPv6)")


def _ack_kind(syndrome: int, flags: int | None) -> int:
    if syndrome >> 5 == 0:  # ACK, any credit count
        return ACK
    if syndrome == SYNDROME_NAK_SEQ or syndrome >> 5 == 1:  # sequence-error NAK or RNR NAK
        if flags is not None and bool(flags & FLAG_SEQ_ERR) != (syndrome == SYNDROME_NAK_SEQ):
            raise DecodeError("FLAG_SEQ_ERR disagrees with the AETH syndrome")
        return NACK
    raise DecodeError(f"AETH syndrome {syndrome:#04x} is not an MRC ACK/NACK")


def _verify(data: bytes | bytearray | memoryview, n: int, iplen: int,
            udp_sum: int | None = None) -> None:
    """Check ICRC and inner UDP checksum; both cover only what switches never rewrite.
    ``udp_sum``: ``_sum16(data, 48)`` if the caller summed a burst at once.

    The ICRC check runs the CRC on through the stored ICRC itself: CRC-32 over a message
    followed by its own CRC (least-significant byte first) always leaves ``_CRC_RESIDUE``,
    and no other 4 bytes do, so this is the same test as comparing the two values."""
    masked = (_from_bytes(data[OFF_INNER:OFF_EXT], "big") | _ICRC_MASK).to_bytes(
        _MASKED_BYTES, "big")
    if _crc32(memoryview(data)[OFF_EXT:n], _crc32(masked, _CRC_LRH)) != _CRC_RESIDUE:
        raise DecodeError("ICRC mismatch")
    # Pseudo-header addresses (inner source and destination) + UDP length and next header,
    # then UDP + BTH + ... + ICRC: one sum from offset 48 (the checksum field included).
    if udp_sum is None:
        udp_sum = _sum16(data, 48)
    if (udp_sum + iplen + NH_UDP) % 0xFFFF:
        raise DecodeError("UDP checksum mismatch")


def _decode_cut(data: bytes | bytearray | memoryview, n: int, full: int, opcode: int,
                abit: int, src: int, dst: int, qpn: int, psn: int, da: int, ecn: int,
                plane: int) -> Packet:
    """A trimmed packet: keep what survived, verify what can be cross-checked."""
    if opcode == OP_RDMA_WRITE_ONLY:
        layout, ends, kind = _X_DATA, _ENDS_DATA, DATA
    elif opcode == OP_RDMA_WRITE_ONLY_IMM:
        layout, ends, kind = _X_DATA_IMM, _ENDS_DATA_IMM, DATA
    elif opcode == OP_ACKNOWLEDGE:
        layout, ends, kind = _X_ACK, _ENDS_ACK, ACK
    elif opcode == OP_MRC_PROBE or opcode == OP_MRC_PROBE_REPLY:
        layout, ends = _X_PRB, _ENDS_PRB
        kind = PROBE if opcode == OP_MRC_PROBE else PROBE_REPLY
    else:
        raise DecodeError(f"BTH opcode {opcode:#04x} is not an MRC opcode")
    ext = bytes(data[OFF_EXT:n]) + bytes(layout.size)
    vals: list[int | None] = list(layout.unpack_from(ext))
    for i, end in enumerate(ends):
        if end > n:
            vals[i] = None
    imm = va = dlen = msg_len = msg_id = echo_psn = sack_base = sack = ev = ts = 0
    flags: int | None
    if kind == DATA:
        if opcode == OP_RDMA_WRITE_ONLY:
            v_va, rkey, v_dlen, v_ev, v_msg, v_ts, flags, _r, v_len = vals
            v_imm = None
            hdr_len = _DATA_HDR
        else:
            v_va, rkey, v_dlen, v_imm, v_ev, v_msg, v_ts, flags, _r, v_len = vals
            hdr_len = _DATA_IMM_HDR
        if v_dlen is not None and hdr_len + v_dlen + ICRC_BYTES != full:
            raise DecodeError("RETH DMA length disagrees with the original packet length")
        if rkey is not None and v_msg is not None and rkey != v_msg:
            raise DecodeError("RETH R_Key disagrees with MRC-DETH message id")
        va, dlen, imm, ev, ts, msg_len = (v or 0 for v in (v_va, v_dlen, v_imm, v_ev, v_ts,
                                                           v_len))
        msg_id = v_msg if v_msg is not None else (rkey or 0)
        want_imm = opcode == OP_RDMA_WRITE_ONLY_IMM
        if flags is not None and bool(flags & FLAG_IMM) != want_imm:
            raise DecodeError("FLAG_IMM disagrees with the opcode")
    elif kind == ACK:
        if full != _ACK.size + ICRC_BYTES:
            raise DecodeError("ACKNOWLEDGE of the wrong original length")
        aeth, v_ev, v_ts, v_echo, flags, _r, v_base, v_sack = vals
        if aeth is None:
            raise DecodeError("trim cut into the AETH: ACK or NACK unknown")
        kind = _ack_kind(aeth >> 24, flags)
        msg_id = aeth & _M24
        ev, ts, echo_psn, sack_base, sack = (v or 0 for v in (v_ev, v_ts, v_echo, v_base,
                                                              v_sack))
    else:
        if full != _PRB.size + ICRC_BYTES:
            raise DecodeError("probe of the wrong original length")
        v_ev, v_ts, flags, _r = vals
        ev, ts = v_ev or 0, v_ts or 0
    if flags is None:  # MRC flags cut off: rebuild the two the BTH still tells
        flags = (FLAG_ACK_REQ if abit else 0) | (
            FLAG_IMM if opcode == OP_RDMA_WRITE_ONLY_IMM else 0)
    elif bool(flags & FLAG_ACK_REQ) != bool(abit):
        raise DecodeError("FLAG_ACK_REQ disagrees with the BTH A bit")
    return Packet(kind, src, dst, qpn, psn, ev=ev, msg_id=msg_id, offset=va, length=dlen,
                  msg_len=msg_len, flags=flags, ts=ts, imm=imm, echo_psn=echo_psn,
                  sack_base=sack_base, sack=sack, da=da, ecn=ecn, trimmed=True, size=n,
                  payload=None, plane=plane)


class TrimmedFields(NamedTuple):
    """What a receiver needs to NACK a trimmed DATA packet (all of it survives a 128-B trim)."""

    src: int  # sender host (the NACK's destination)
    dst: int  # receiver host (the NACK's source)
    qpn: int
    psn: int
    ev: int  # the path the packet took: the NACK echoes it so the sender can judge that EV
    msg_id: int
    offset: int
    length: int
    ecn: int


def nack_fields_from_trimmed(pkt: Packet) -> TrimmedFields:
    """The NACK-relevant fields of a decoded DATA packet, checking that they survived.

    QPN and PSN live in the BTH, host addresses in the inner IPv6, offset/msg_id/length in the
    RETH and the EV first in MRC-DETH: ``MIN_TRIM_BYTES`` (124) keeps all of them."""
    if pkt.kind != DATA:
        raise DecodeError(f"not a DATA packet: {pkt!r}")
    need = _ENDS_DATA_IMM[4] if pkt.flags & FLAG_IMM else _ENDS_DATA[3]  # end of MRC-DETH ev
    if pkt.size < need:
        raise DecodeError(f"trimmed to {pkt.size} bytes: the EV did not survive (need {need})")
    return TrimmedFields(pkt.src, pkt.dst, pkt.qpn, pkt.psn, pkt.ev, pkt.msg_id, pkt.offset,
                         pkt.length, pkt.ecn)


# ------------------------------------------------------------------ byte-level helpers
# For the user-space fabric: act on the outer header of a datagram without decoding it.
# They assume ``outer_ok(buf)`` held (the fabric checks that once per datagram).

def outer_ok(buf: bytes | bytearray | memoryview) -> bool:
    """Cheap sanity check: IPv6-in-IPv6 carrying at least the RoCE envelope, consistent length."""
    n = len(buf)
    return (n >= ENVELOPE_BYTES and buf[0] >> 4 == 6 and buf[6] == NH_IPV6
            and (buf[4] << 8 | buf[5]) == n - IPV6_BYTES)


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
    plen = size - IPV6_BYTES
    buf[4] = plen >> 8
    buf[5] = plen & 0xFF
    return True


def inner_hosts(buf: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(src, dst) host indices from the inner IPv6 addresses (no validation)."""
    return (int.from_bytes(buf[60:64], "big"), int.from_bytes(buf[76:80], "big"))
