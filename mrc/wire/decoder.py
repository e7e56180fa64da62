"""Decoding: bytes -> ``Packet``, verified; anything malformed raises ``DecodeError``.

A full-length packet must pass the ICRC and the inner UDP checksum. A shorter one is a trimmed
packet only if its outer DSCP says so; it comes back with every field that survived (nothing
can be verified past the cut; the trimming switch rewrote its length fields to the cut, so
the original length comes from the RETH DMA length). The EV is read from the outer flow
label and UDP source port, and must agree with the MRC header's copy where that survived. ``decode_many`` checksums a received burst in one numpy call.
A datagram with one IPv6 header (next header UDP) is RoCEv2's own: RoCE RC's packets and
CNPs (:mod:`mrc.wire.roce`). These decoders are fuzzed (``tests/test_fuzz_decoders.py``, ``fuzz/``): ``DecodeError`` is the
only exception they may raise.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

try:
    import cython
except ImportError:  # pure Python without Cython installed
    from mrc import _cython_shim as cython  # type: ignore[no-redef]

from mrc.packet import (
    ACK,
    DATA,
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
    make_packet,
)
from mrc.wire.checksum import CRC_LRH, CRC_RESIDUE, masked_inner, sum16, sum16_many
from mrc.wire.layout import (
    ACK_FULL_BYTES,
    DATA_HDR_BYTES,
    DATA_IMM_HDR_BYTES,
    ENDS_ACK,
    ENDS_DATA,
    ENDS_DATA_IMM,
    ENDS_PROBE,
    ENV,
    EXT_ACK,
    EXT_DATA,
    EXT_DATA_IMM,
    EXT_PROBE,
    HOST_HI,
    HOST_LO,
    M24,
    NH_IPV6,
    NH_UDP,
    OFF_EXT,
    OP_ACKNOWLEDGE,
    OP_MRC_PROBE,
    OP_MRC_PROBE_REPLY,
    OP_RDMA_WRITE_ONLY,
    OP_RDMA_WRITE_ONLY_IMM,
    PKEY_DEFAULT,
    PROBE_FULL_BYTES,
    SYNDROME_NAK_SEQ,
    SYNDROME_NAK_TRIM,
)
from mrc.wire.roce import decode_roce
from topology.routed import ROUTED_BASE
from topology.usid import BLOCK_BASE

# Helpers bound once: one global lookup each per packet. The struct methods are bound here
# because CPython (3.11+) compiles ``name.method(...)``, for a name bound by an import, as an
# attribute load that builds a bound method on every call.
_crc32 = zlib.crc32
_from_bytes = int.from_bytes
_unpack_env: Final = ENV.unpack_from
_unpack_data: Final = EXT_DATA.unpack_from
_unpack_data_imm: Final = EXT_DATA_IMM.unpack_from
_unpack_ack: Final = EXT_ACK.unpack_from
_unpack_probe: Final = EXT_PROBE.unpack_from


class DecodeError(ValueError):
    """Bytes that are not a well-formed MRC packet (the only exception ``decode`` raises)."""


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

    For a receive loop that read a burst: the UDP checksums of the whole burst are summed
    together (``sum16_many``: in pure Python one numpy sum over all its bytes, where one numpy
    call per 4 KB datagram costs about twice as much; compiled, a C loop per datagram)."""
    out: list[Packet | DecodeError] = []
    for data, udp_sum in zip(datagrams, sum16_many(datagrams, 48), strict=True):
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
    if n > 6 and data[6] == NH_UDP:  # one IPv6 header: RoCEv2's own packet (RC, CNP)
        return decode_roce(data)
    if n < ENVELOPE_BYTES:
        raise DecodeError(f"{n} bytes is shorter than the {ENVELOPE_BYTES}-byte envelope")
    (vtf, plen, nh, hlim, _os_hi, _os_lo, da_hi, da_lo,
     ivtf, iplen, inh, _ihl, s_hi, s_lo, d_hi, d_lo,
     sport, dport, ulen, csum, opcode, bflags, pkey, qpn_w, psn_w) = _unpack_env(data)
    _check_envelope(n, vtf, plen, nh, ivtf, iplen, inh, s_hi, s_lo, d_hi, d_lo, sport, dport,
                    ulen)
    src = s_lo & 0xFFFFFFFF
    dst = d_lo & 0xFFFFFFFF
    wire_ev = ((sport & 0xFFF) << 20) | (vtf & 0xFFFFF)
    if pkey != PKEY_DEFAULT or bflags & 0x3F:
        raise DecodeError("BTH P_Key, pad count or transport version not ours")
    tc = (vtf >> 20) & 0xFF
    trimmed = (tc >> 2) == TRIM_DSCP
    full = iplen + 2 * IPV6_BYTES
    abit = psn_w >> 31
    top = da_hi >> 32
    plane = top & 0xFF if top & 0xFFFFFF00 in (BLOCK_BASE, ROUTED_BASE) else 0
    if n != full:
        raise DecodeError(f"{n} bytes where the inner header says {full}")
    if trimmed and _cut(data, n, opcode):
        return _decode_cut(data, n, opcode, abit, src, dst, qpn_w & M24, psn_w & M24,
                           (da_hi << 64) | da_lo, tc & 3, plane, wire_ev, hlim)

    qpn = qpn_w & M24
    psn = psn_w & M24
    # One branch per kind, each building its Packet with only the fields it carries (the
    # others keep Packet's zero defaults): this runs for every datagram a host receives.
    # DATA and ACKs, most of them, through make_packet (every field given positionally, the
    # destination as its two halves: compiled, a C call without keywords to parse).
    if opcode == OP_RDMA_WRITE_ONLY or opcode == OP_RDMA_WRITE_ONLY_IMM:
        if opcode == OP_RDMA_WRITE_ONLY:
            hdr_len = DATA_HDR_BYTES
            va, rkey, dlen, ev, msg_id, ts, flags, _r, msg_len = _unpack_data(data, OFF_EXT)
            imm = 0
        else:
            hdr_len = DATA_IMM_HDR_BYTES
            va, rkey, dlen, imm, ev, msg_id, ts, flags, _r, msg_len = \
                _unpack_data_imm(data, OFF_EXT)
        if hdr_len + dlen + ICRC_BYTES != n:
            raise DecodeError("RETH DMA length disagrees with the packet length")
        if rkey != msg_id:
            raise DecodeError("RETH R_Key disagrees with MRC-DETH message id")
        if bool(flags & FLAG_IMM) != (opcode == OP_RDMA_WRITE_ONLY_IMM):
            raise DecodeError("FLAG_IMM disagrees with the opcode")
        if ev != wire_ev:
            raise DecodeError("MRC-DETH EV disagrees with the flow label and source port")
        _verify(data, n, iplen, udp_sum)
        _check_tail(flags, abit, csum)
        end = n - ICRC_BYTES
        pkt = make_packet(DATA, src, dst, qpn, psn, ev, msg_id, va, dlen, msg_len, flags, ts,
                          imm, 0, 0, 0, da_hi, da_lo, n,
                          data[hdr_len:end] if type(data) is bytes
                          else bytes(data[hdr_len:end]), 0, plane)
        pkt.ecn = tc & 3
        pkt.trimmed = trimmed
        pkt.hop_limit = hlim
        return pkt
    if opcode == OP_ACKNOWLEDGE:
        if n != ACK_FULL_BYTES:
            raise DecodeError("ACKNOWLEDGE of the wrong length")
        aeth, ev, ts, echo_psn, flags, _r, sack_base, sack = _unpack_ack(data, OFF_EXT)
        kind = ACK if aeth >> 29 == 0 else _ack_kind(aeth >> 24, flags)  # syndrome 0x00-0x1F
        if ev != wire_ev:
            raise DecodeError("MRC-AETH EV disagrees with the flow label and source port")
        _verify(data, n, iplen, udp_sum)
        _check_tail(flags, abit, csum)
        pkt = make_packet(kind, src, dst, qpn, psn, ev, aeth & M24, 0, 0, 0, flags, ts, 0,
                          echo_psn, sack_base, sack, da_hi, da_lo, n, None, 0, plane)
        pkt.ecn = tc & 3
        pkt.trimmed = trimmed
        pkt.hop_limit = hlim
        return pkt
    return _decode_probe_or_cnp(data, n, opcode, iplen, udp_sum, abit, csum, src, dst, qpn,
                                psn, (da_hi << 64) | da_lo, tc, trimmed, hlim, plane, wire_ev)


def _decode_probe_or_cnp(data: bytes | bytearray | memoryview, n: int, opcode: int,
                         iplen: int, udp_sum: int | None, abit: int, csum: int, src: int,
                         dst: int, qpn: int, psn: int, da: int, tc: int, trimmed: bool,
                         hlim: int, plane: int, wire_ev: int) -> Packet:
    """The rare kinds at full length: a probe or its reply (``_decode`` for the rest; anything
    else is not an MRC opcode; CNPs are RoCEv2's, :mod:`mrc.wire.roce`)."""
    if opcode == OP_MRC_PROBE or opcode == OP_MRC_PROBE_REPLY:
        if n != PROBE_FULL_BYTES:
            raise DecodeError("probe of the wrong length")
        ev, ts, flags, _r = _unpack_probe(data, OFF_EXT)
        if ev != wire_ev:
            raise DecodeError("MRC-PETH EV disagrees with the flow label and source port")
        _verify(data, n, iplen, udp_sum)
        _check_tail(flags, abit, csum)
        pkt = Packet(PROBE if opcode == OP_MRC_PROBE else PROBE_REPLY, src, dst, qpn, psn,
                     ev=ev, flags=flags, ts=ts, da=da, ecn=tc & 3, trimmed=trimmed, size=n,
                     plane=plane)
        pkt.hop_limit = hlim
        return pkt
    raise DecodeError(f"BTH opcode {opcode:#04x} is not an MRC opcode")


@cython.cfunc
@cython.annotation_typing(True)
@cython.exceptval(-1)
def _check_envelope(n: Any, vtf: Any, plen: Any, nh: Any, ivtf: Any, iplen: Any, inh: Any,
                    s_hi: Any, s_lo: Any, d_hi: Any, d_lo: Any, sport: Any, dport: Any,
                    ulen: Any) -> cython.int:
    """The envelope is ours: IPv6-in-IPv6 of this length, then IPv6/UDP to RoCE's port
    between host addresses, from a source port that carries an EV (a C call when compiled:
    every datagram runs it). Returns 0."""
    if vtf >> 28 != 6 or nh != NH_IPV6 or plen != n - IPV6_BYTES:
        raise DecodeError("outer header is not IPv6-in-IPv6 of this length")
    if ivtf >> 28 != 6 or inh != NH_UDP or dport != ROCE_UDP_PORT or ulen != iplen:
        raise DecodeError("inner header is not IPv6/UDP 4791 with consistent lengths")
    if s_hi != HOST_HI or d_hi != HOST_HI or (s_lo | d_lo) >> 32 != HOST_LO >> 32:
        raise DecodeError("inner addresses are not host addresses")
    if sport >> 12 != 0xC:
        raise DecodeError("UDP source port outside the EV range 49152..53247")
    return 0


def _check_tail(flags: int, abit: int, csum: int) -> None:
    """The checks every full-length packet ends with (after its ICRC and UDP checksum)."""
    if bool(flags & FLAG_ACK_REQ) != bool(abit):
        raise DecodeError("FLAG_ACK_REQ disagrees with the BTH A bit")
    if csum == 0:
        raise DecodeError("UDP checksum absent (mandatory over IPv6)")


def _ack_kind(syndrome: int, flags: int | None) -> int:
    if syndrome >> 5 == 0:  # ACK, any credit count
        return ACK
    if syndrome == SYNDROME_NAK_SEQ or syndrome == SYNDROME_NAK_TRIM:
        if flags is not None and bool(flags & FLAG_SEQ_ERR) != (syndrome == SYNDROME_NAK_SEQ):
            raise DecodeError("FLAG_SEQ_ERR disagrees with the AETH syndrome")
        return NACK
    raise DecodeError(f"AETH syndrome {syndrome:#04x} is not an MRC ACK/NACK")


def _verify(data: bytes | bytearray | memoryview, n: int, iplen: int,
            udp_sum: int | None = None) -> None:
    """Check ICRC and inner UDP checksum; both cover only what switches never rewrite.
    ``udp_sum``: ``sum16(data, 48)`` if the caller summed a burst at once.

    The ICRC check runs the CRC on through the stored ICRC itself: CRC-32 over a message
    followed by its own CRC (least-significant byte first) always leaves ``CRC_RESIDUE``,
    and no other 4 bytes do, so this is the same test as comparing the two values."""
    if _crc32(memoryview(data)[OFF_EXT:n], _crc32(masked_inner(data), CRC_LRH)) != CRC_RESIDUE:
        raise DecodeError("ICRC mismatch")
    # Pseudo-header addresses (inner source and destination) + UDP length and next header,
    # then UDP + BTH + ... + ICRC: one sum from offset 48 (the checksum field included).
    if udp_sum is None:
        udp_sum = sum16(data, 48)
    if (udp_sum + iplen + NH_UDP) % 0xFFFF:
        raise DecodeError("UDP checksum mismatch")


_RETH_END: Final = OFF_EXT + 16


def _cut(data: bytes | bytearray | memoryview, n: int, opcode: int) -> bool:
    """Whether a packet marked trimmed was really cut short (a packet no longer than the
    trim size keeps its bytes and is only re-marked): its kind's full length, or for DATA
    the length the RETH DMA length implies, is more than ``n``."""
    if opcode == OP_RDMA_WRITE_ONLY or opcode == OP_RDMA_WRITE_ONLY_IMM:
        if n < _RETH_END:
            return True
        dlen = _from_bytes(data[_RETH_END - 4:_RETH_END], "big")
        hdr = DATA_HDR_BYTES if opcode == OP_RDMA_WRITE_ONLY else DATA_IMM_HDR_BYTES
        return n < hdr + dlen + ICRC_BYTES
    if opcode == OP_ACKNOWLEDGE:
        return n < ACK_FULL_BYTES
    if opcode == OP_MRC_PROBE or opcode == OP_MRC_PROBE_REPLY:
        return n < PROBE_FULL_BYTES
    return False


def _decode_cut(data: bytes | bytearray | memoryview, n: int, opcode: int, abit: int,
                src: int, dst: int, qpn: int, psn: int, da: int, ecn: int, plane: int,
                wire_ev: int, hlim: int) -> Packet:
    """A trimmed packet: keep what survived, verify what can be cross-checked. The EV comes
    from the flow label and source port, which no cut reaches."""
    if opcode == OP_RDMA_WRITE_ONLY:
        layout, ends, kind = EXT_DATA, ENDS_DATA, DATA
    elif opcode == OP_RDMA_WRITE_ONLY_IMM:
        layout, ends, kind = EXT_DATA_IMM, ENDS_DATA_IMM, DATA
    elif opcode == OP_ACKNOWLEDGE:
        layout, ends, kind = EXT_ACK, ENDS_ACK, ACK
    else:  # a probe (_cut is False for any other opcode)
        layout, ends = EXT_PROBE, ENDS_PROBE
        kind = PROBE if opcode == OP_MRC_PROBE else PROBE_REPLY
    ext = bytes(data[OFF_EXT:n]) + bytes(layout.size)
    vals: list[int | None] = list(layout.unpack_from(ext))
    for i, end in enumerate(ends):
        if end > n:
            vals[i] = None
    imm = va = dlen = msg_len = msg_id = echo_psn = sack_base = sack = ts = 0
    flags: int | None
    v_ev: int | None
    if kind == DATA:
        if opcode == OP_RDMA_WRITE_ONLY:
            v_va, rkey, v_dlen, v_ev, v_msg, v_ts, flags, _r, v_len = vals
            v_imm = None
        else:
            v_va, rkey, v_dlen, v_imm, v_ev, v_msg, v_ts, flags, _r, v_len = vals
        if rkey is not None and v_msg is not None and rkey != v_msg:
            raise DecodeError("RETH R_Key disagrees with MRC-DETH message id")
        va, dlen, imm, ts, msg_len = (v or 0 for v in (v_va, v_dlen, v_imm, v_ts, v_len))
        msg_id = v_msg if v_msg is not None else (rkey or 0)
        want_imm = opcode == OP_RDMA_WRITE_ONLY_IMM
        if flags is not None and bool(flags & FLAG_IMM) != want_imm:
            raise DecodeError("FLAG_IMM disagrees with the opcode")
    elif kind == ACK:
        aeth, v_ev, v_ts, v_echo, flags, _r, v_base, v_sack = vals
        if aeth is None:
            raise DecodeError("trim cut into the AETH: ACK or NACK unknown")
        kind = _ack_kind(aeth >> 24, flags)
        msg_id = aeth & M24
        ts, echo_psn, sack_base, sack = (v or 0 for v in (v_ts, v_echo, v_base, v_sack))
    else:
        v_ev, v_ts, flags, _r = vals
        ts = v_ts or 0
    if v_ev is not None and v_ev != wire_ev:
        raise DecodeError("the MRC header's EV disagrees with the flow label and source port")
    if flags is None:  # MRC flags cut off: rebuild the two the BTH still tells
        flags = (FLAG_ACK_REQ if abit else 0) | (
            FLAG_IMM if opcode == OP_RDMA_WRITE_ONLY_IMM else 0)
    elif bool(flags & FLAG_ACK_REQ) != bool(abit):
        raise DecodeError("FLAG_ACK_REQ disagrees with the BTH A bit")
    pkt = Packet(kind, src, dst, qpn, psn, ev=wire_ev, msg_id=msg_id, offset=va, length=dlen,
                 msg_len=msg_len, flags=flags, ts=ts, imm=imm, echo_psn=echo_psn,
                 sack_base=sack_base, sack=sack, da=da, ecn=ecn, trimmed=True, size=n,
                 payload=None, plane=plane)
    pkt.hop_limit = hlim
    return pkt


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
    need = ENDS_DATA_IMM[4] if pkt.flags & FLAG_IMM else ENDS_DATA[3]  # end of MRC-DETH ev
    if pkt.size < need:
        raise DecodeError(f"trimmed to {pkt.size} bytes: the EV did not survive (need {need})")
    return TrimmedFields(pkt.src, pkt.dst, pkt.qpn, pkt.psn, pkt.ev, pkt.msg_id, pkt.offset,
                         pkt.length, pkt.ecn)
