"""Encoding: ``Packet`` -> the bytes on the wire, one ``struct.pack`` per header.

``encode`` writes every header, the ICRC and the UDP checksum in one pass over a precompiled
layout (:mod:`mrc.wire.layout`); ``encode_many`` does the same for a sender's burst with the
payload sums taken together (``sum16_many``). The 32-bit EV is striped over the entropy fields as
the public description of MRC has it: its low 20 bits (plane and T1 in the default format)
are the IPv6 flow label, its high 12 bits the low bits of the UDP source port; the MRC
extension header repeats it and the decoder checks that the two agree. Simulated segments
without bytes get a deterministic stand-in payload so that pcaps of simulated runs have true
sizes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any, Final

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.packet import (
    ACK,
    CNP,
    DATA,
    DEFAULT_DSCP,
    ECN_CE,
    ECN_ECT0,
    ENVELOPE_BYTES,
    FLAG_ACK_REQ,
    FLAG_IMM,
    FLAG_ROCE,
    FLAG_SEQ_ERR,
    ICRC_BYTES,
    NACK,
    PROBE,
    PROBE_REPLY,
    ROCE_UDP_PORT,
    TRIM_DSCP,
    Packet,
)
from mrc.wire.checksum import CRC_LRH, masked_inner, sum16, sum16_many
from mrc.wire.layout import (
    DATA_HDR_BYTES,
    DATA_IMM_HDR_BYTES,
    HDR_ACK,
    HDR_DATA,
    HDR_DATA_IMM,
    HDR_PROBE,
    HOP_LIMIT,
    HOST_HI,
    HOST_LO,
    M24,
    M64,
    NH_IPV6,
    NH_UDP,
    OFF_BTH,
    OFF_EXT,
    OFF_UDP_CSUM,
    OP_ACKNOWLEDGE,
    OP_MRC_PROBE,
    OP_MRC_PROBE_REPLY,
    OP_RDMA_WRITE_ONLY,
    OP_RDMA_WRITE_ONLY_IMM,
    PKEY_DEFAULT,
    SYNDROME_ACK,
    SYNDROME_NAK_SEQ,
    SYNDROME_NAK_TRIM,
    UDP_SPORT_BASE,
)
from mrc.wire.outer import cut_lengths
from mrc.wire.roce import encode_roce

_U16 = struct.Struct(">H")
_ICRC = struct.Struct("<I")
# Helpers bound once: one global lookup each per packet. The struct methods are bound here
# because CPython (3.11+) compiles ``name.method(...)``, for a name bound by an import, as an
# attribute load that builds a bound method on every call.
_crc32 = zlib.crc32
_from_bytes = int.from_bytes
_pack_data: Final = HDR_DATA.pack
_pack_data_imm: Final = HDR_DATA_IMM.pack
_pack_ack: Final = HDR_ACK.pack
_pack_probe: Final = HDR_PROBE.pack


def flow_label(ev: int) -> int:
    """The IPv6 flow label that carries an EV: its low 20 bits."""
    return ev & 0xFFFFF


def udp_sport(ev: int) -> int:
    """The RoCE v2 UDP source port that carries an EV's high 12 bits (49152 + EV >> 20)."""
    return UDP_SPORT_BASE | (ev >> 20)


def ev_from_entropy(label: int, sport: int) -> int:
    """The EV an IPv6 flow label and UDP source port carry (inverse of the two above)."""
    return ((sport & 0xFFF) << 20) | (label & 0xFFFFF)


def pseudo_payload(digest: int, length: int) -> bytes:
    """Deterministic stand-in bytes for a simulated segment (its 64-bit digest, repeated)."""
    if length <= 0:
        return b""
    word = (digest & M64).to_bytes(8, "big")
    return (word * ((length >> 3) + 1))[:length]


def encode(pkt: Packet) -> bytes:
    """The packet as it is on the wire (trimmed packets: cut to ``pkt.size`` and re-marked)."""
    try:
        return _encode(pkt)
    except (struct.error, OverflowError, TypeError) as exc:
        raise ValueError(f"cannot encode {pkt!r}: {exc}") from exc


def encode_many(pkts: Sequence[Packet]) -> list[bytes]:
    """``encode`` of each packet, with the UDP checksum sums of the DATA payloads taken
    together (``sum16_many``: pure Python, one numpy reduction, whose fixed cost is about that
    of summing 4 KB, for the burst, as a received burst in ``decode_many``; compiled, a C loop
    per payload)."""
    sums = sum16_many([p.payload if p.kind == DATA else None for p in pkts], 0)
    out = []
    for p, payload_sum in zip(pkts, sums, strict=True):
        try:
            out.append(_encode(p, payload_sum))
        except (struct.error, OverflowError, TypeError) as exc:
            raise ValueError(f"cannot encode {p!r}: {exc}") from exc
    return out


@cython.ccall
@cython.annotation_typing(True)
@cython.locals(kind=cython.longlong, qpn=cython.longlong, psn=cython.longlong,
               src=cython.longlong, dst=cython.longlong, ev=cython.longlong,
               flags=cython.longlong, ecn=cython.longlong, hlim=cython.longlong,
               da_hi=cython.ulonglong, da_lo=cython.ulonglong, fl=cython.longlong,
               sport=cython.longlong, tc_out=cython.longlong, tc_in=cython.longlong,
               vtf_out=cython.longlong, vtf_in=cython.longlong, bth_psn=cython.longlong,
               n=cython.longlong, msg_id=cython.longlong, iplen=cython.longlong,
               syndrome=cython.longlong)
def _encode(p: Packet, payload_sum: Any = None) -> bytes:  # payload_sum: int | None
    """``payload_sum``: ``sum16`` of the DATA payload, if the caller has it (``encode_many``);
    None: sum it here."""
    kind = p.kind
    flags = p.flags
    if kind == CNP or (flags & FLAG_ROCE and (kind == DATA or kind == ACK or kind == NACK)):
        return _roce(p)  # RoCE RC's own packet (mrc.wire.roce)
    qpn = p.qpn
    psn = p.psn
    src = p.src
    dst = p.dst
    ev = p.ev
    ecn = p.ecn
    hlim = p.hop_limit
    _check_fields(qpn, psn, src, dst, ev, ecn, hlim)
    da_hi = p.da_hi
    da_lo = p.da_lo
    fl = ev & 0xFFFFF  # flow_label(ev)
    sport = UDP_SPORT_BASE | (ev >> 20)  # udp_sport(ev)
    src_lo = HOST_LO | src
    dst_lo = HOST_LO | dst
    tc_out = ((TRIM_DSCP if p.trimmed else DEFAULT_DSCP) << 2) | ecn
    tc_in = (DEFAULT_DSCP << 2) | (ECN_ECT0 if ecn == ECN_CE else ecn)
    vtf_out = 0x60000000 | (tc_out << 20) | fl
    vtf_in = 0x60000000 | (tc_in << 20) | fl
    bth_psn = (0x80000000 | psn) if flags & FLAG_ACK_REQ else psn

    n = 0
    payload = b""
    if kind == DATA:
        n = p.length
        payload = p.payload
        if payload is None:
            payload = pseudo_payload(p.digest, n)
        elif len(payload) != n:
            raise ValueError(f"payload has {len(payload)} bytes, length says {n}")
        msg_id = p.msg_id
        if flags & FLAG_IMM:
            iplen = DATA_IMM_HDR_BYTES - 80 + n + ICRC_BYTES
            hdr = _pack_data_imm(
                vtf_out, iplen + 40, NH_IPV6, hlim, HOST_HI, src_lo, da_hi, da_lo,
                vtf_in, iplen, NH_UDP, HOP_LIMIT, HOST_HI, src_lo, HOST_HI, dst_lo,
                sport, ROCE_UDP_PORT, iplen, 0, OP_RDMA_WRITE_ONLY_IMM, 0, PKEY_DEFAULT, qpn,
                bth_psn, p.offset, msg_id & 0xFFFFFFFF, n, p.imm,
                ev, msg_id, p.ts, flags, 0, p.msg_len)
        else:
            iplen = DATA_HDR_BYTES - 80 + n + ICRC_BYTES
            hdr = _pack_data(
                vtf_out, iplen + 40, NH_IPV6, hlim, HOST_HI, src_lo, da_hi, da_lo,
                vtf_in, iplen, NH_UDP, HOP_LIMIT, HOST_HI, src_lo, HOST_HI, dst_lo,
                sport, ROCE_UDP_PORT, iplen, 0, OP_RDMA_WRITE_ONLY, 0, PKEY_DEFAULT, qpn,
                bth_psn, p.offset, msg_id & 0xFFFFFFFF, n,
                ev, msg_id, p.ts, flags, 0, p.msg_len)
    elif kind == ACK or kind == NACK:
        if kind == ACK:
            syndrome = SYNDROME_ACK
        elif flags & FLAG_SEQ_ERR:
            syndrome = SYNDROME_NAK_SEQ
        else:
            syndrome = SYNDROME_NAK_TRIM
        iplen = HDR_ACK.size - 80 + ICRC_BYTES
        hdr = _pack_ack(
            vtf_out, iplen + 40, NH_IPV6, hlim, HOST_HI, src_lo, da_hi, da_lo,
            vtf_in, iplen, NH_UDP, HOP_LIMIT, HOST_HI, src_lo, HOST_HI, dst_lo,
            sport, ROCE_UDP_PORT, iplen, 0, OP_ACKNOWLEDGE, 0, PKEY_DEFAULT, qpn, bth_psn,
            (syndrome << 24) | (p.msg_id & M24),
            ev, p.ts, p.echo_psn, flags, 0, p.sack_base, p.sack)
    else:
        hdr = _probe_or_cnp_header(p, vtf_out, vtf_in, hlim, sport, bth_psn)
        iplen = len(hdr) - 80 + ICRC_BYTES
    return _seal(p, hdr, iplen, n, payload, payload_sum)


def _roce(p: Packet) -> bytes:
    """A RoCE RC packet or CNP, in RoCEv2's framing (simulated payloads as stand-in bytes)."""
    payload = b""
    if p.kind == DATA:
        payload = p.payload if p.payload is not None else pseudo_payload(p.digest, p.length)
        if len(payload) != p.length:
            raise ValueError(f"payload has {len(payload)} bytes, length says {p.length}")
    return encode_roce(p, payload)


@cython.cfunc
@cython.annotation_typing(True)
@cython.exceptval(-1, check=False)
def _check_fields(qpn: cython.longlong, psn: cython.longlong, src: cython.longlong,
                  dst: cython.longlong, ev: cython.longlong, ecn: cython.longlong,
                  hlim: cython.longlong) -> cython.int:
    """The packet's fields fit their wire widths (ValueError names the one that does not);
    returns 0 (compiled, a C function whose -1 says an exception is set)."""
    if (qpn | psn) >> 24 or qpn < 0 or psn < 0:
        raise ValueError(f"QPN {qpn} / PSN {psn} do not fit 24 bits")
    if (src | dst) >> 32 or src < 0 or dst < 0:
        raise ValueError(f"host {src} / {dst} outside the 32-bit host index space")
    if ev >> 32 or ev < 0:
        raise ValueError(f"EV {ev} is not a 32-bit value")
    if ecn >> 2 or ecn < 0:
        raise ValueError(f"ECN {ecn} is not a 2-bit value")
    if hlim >> 8 or hlim < 0:
        raise ValueError(f"hop limit {hlim} is not an 8-bit value")
    return 0


@cython.cfunc
@cython.annotation_typing(True)
def _probe_or_cnp_header(p: Packet, vtf_out: cython.longlong, vtf_in: cython.longlong,
                         hlim: cython.longlong, sport: cython.longlong,
                         bth_psn: cython.longlong) -> bytes:
    """The header of the rare kinds: a probe or its reply (CNPs are RoCEv2's: ``_roce``)."""
    kind: cython.longlong = p.kind
    src: cython.longlong = p.src
    dst: cython.longlong = p.dst
    if kind == PROBE or kind == PROBE_REPLY:
        iplen: cython.longlong = HDR_PROBE.size - 80 + ICRC_BYTES
        src_lo = HOST_LO | src
        return _pack_probe(
            vtf_out, iplen + 40, NH_IPV6, hlim, HOST_HI, src_lo, p.da_hi, p.da_lo,
            vtf_in, iplen, NH_UDP, HOP_LIMIT, HOST_HI, src_lo, HOST_HI, HOST_LO | dst,
            sport, ROCE_UDP_PORT, iplen, 0,
            OP_MRC_PROBE if kind == PROBE else OP_MRC_PROBE_REPLY, 0, PKEY_DEFAULT, p.qpn,
            bth_psn, p.ev, p.ts, p.flags, 0)
    raise ValueError(f"unknown packet kind {kind!r}")


@cython.cfunc
@cython.annotation_typing(True)
def _seal(p: Packet, hdr: Any, iplen: cython.longlong, n: cython.longlong, payload: Any,
          payload_sum: Any) -> Any:  # hdr, payload: bytes; payload_sum: int | None -> bytes
    """The packet from its header and payload: the ICRC, the UDP checksum, and for a trimmed
    packet the cut (``payload_sum`` as in :func:`_encode`)."""
    # ICRC: masked inner IPv6 + UDP + BTH, then the rest of the header and the payload.
    # (Slices of the small ``bytes`` header: cheaper than memoryviews, and int.from_bytes
    # would copy a memoryview into bytes anyway.)
    crc = _crc32(hdr[OFF_EXT:], _crc32(masked_inner(hdr), CRC_LRH))
    # UDP checksum: pseudo-header (src, dst, length, next header) + UDP + BTH + ... + ICRC.
    total = sum16(hdr, 48) + iplen + NH_UDP
    if n:
        crc = _crc32(payload, crc)
        total += payload_sum if payload_sum is not None else sum16(payload)
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
            cut_lengths(buf)
            return bytes(buf)
    return out
