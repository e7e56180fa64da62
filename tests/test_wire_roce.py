"""RoCE RC's own packet on the wire (issue 36): RoCEv2 framing round-trips, its sizes are the
simulator's, malformed bytes raise only DecodeError, and MRC's packets are untouched."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrc import wire
from mrc.packet import (
    ACK,
    CNP,
    CNP_BYTES,
    DATA,
    FLAG_ACK_REQ,
    FLAG_ECN_ECHO,
    FLAG_FIRST,
    FLAG_IMM,
    FLAG_LAST,
    FLAG_RETX,
    FLAG_ROCE,
    FLAG_SEQ_ERR,
    NACK,
    RC_ACK_BYTES,
    Packet,
    natural_size,
    rc_data_bytes,
)
from mrc.wire import roce
from topology import usid

U24 = st.integers(0, 2**24 - 1)
U32 = st.integers(0, 2**32 - 1)
HOSTS = st.integers(0, 2**20)
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def rc_packets(draw: st.DrawFn) -> Packet:
    kind = draw(st.sampled_from((DATA, ACK, NACK, CNP)))
    src, dst = draw(HOSTS), draw(HOSTS)
    flags = draw(st.integers(0, 0xFFFF)) | FLAG_ROCE
    common = dict(ev=draw(st.integers(0, 2**32 - 1)), da=usid.host_address(dst),
                  ecn=draw(st.integers(0, 3)), ts=draw(U32))
    if kind == DATA:
        length = draw(st.integers(1, 600))
        first = draw(st.booleans())
        msg_len = length if first and flags & FLAG_LAST else draw(st.integers(length, 2**32 - 1))  # RETH: 32 bits
        payload = draw(st.one_of(st.none(), st.binary(min_size=length, max_size=length)))
        imm = bool(flags & FLAG_IMM and flags & FLAG_LAST)
        flags = flags | FLAG_FIRST if first else flags & ~FLAG_FIRST
        return Packet(DATA, src, dst, draw(U24), draw(U24), msg_id=draw(U32),
                      offset=0 if first else draw(st.integers(1, 2**40)), length=length,
                      msg_len=msg_len, imm=draw(U32), payload=payload, digest=draw(U32),
                      flags=flags, size=rc_data_bytes(length, first, imm), **common)
    if kind == NACK:
        flags |= FLAG_SEQ_ERR
    return Packet(kind, src, dst, draw(U24), draw(U24), msg_id=draw(U24), flags=flags,
                  **common)


@SETTINGS
@given(rc_packets())
def test_roce_round_trip(p: Packet) -> None:
    data = wire.encode(p)
    assert data[6] == 17  # one IPv6 header, then UDP: no second IPv6 header
    assert len(data) == p.size
    q = wire.decode(data)
    for name in roce.WIRE_FIELDS[p.kind]:
        assert getattr(q, name) == getattr(p, name), name
    assert q.dst == p.dst  # its destination is a host address
    want = p.flags & roce.WIRE_FLAGS
    if p.kind == DATA:
        want &= ~(FLAG_SEQ_ERR | FLAG_ECN_ECHO)
        if not p.flags & FLAG_LAST:
            want &= ~FLAG_IMM
        first = p.offset == 0
        assert (q.msg_id, q.msg_len) == ((p.msg_id, p.msg_len) if first else (0, 0))
        assert bool(q.flags & FLAG_FIRST) == first
        assert q.payload == (p.payload if p.payload is not None
                             else wire.pseudo_payload(p.digest, p.length))
    elif p.kind == CNP:
        want = p.flags & FLAG_ACK_REQ
    else:
        want &= ~(FLAG_LAST | FLAG_IMM | FLAG_FIRST)
        if p.kind == ACK:
            want &= ~FLAG_SEQ_ERR  # the AETH syndrome says ACK
        assert q.msg_id == p.msg_id
    assert q.flags == want and not q.flags & FLAG_RETX
    assert wire.encode(q) == data


def test_roce_sizes_are_the_simulators() -> None:
    """64 bytes of headers on a middle WRITE packet, +16 (RETH) on the first; 68-byte ACK,
    80-byte CNP: the sizes Packet.size gives RC's packets."""
    da = usid.host_address(5)
    mid = Packet(DATA, 1, 5, 9, 3, length=4096, flags=FLAG_ROCE, offset=4096, da=da)
    first = Packet(DATA, 1, 5, 9, 3, length=4096, flags=FLAG_ROCE | FLAG_FIRST | FLAG_LAST,
                   msg_len=4096, da=da)
    ack = Packet(ACK, 5, 1, 9, 3, flags=FLAG_ROCE, da=usid.host_address(1))
    cnp = Packet(CNP, 5, 1, 9, 0, da=usid.host_address(1))
    assert (mid.size, first.size, ack.size, cnp.size) == (4160, 4176, RC_ACK_BYTES, CNP_BYTES)
    assert (RC_ACK_BYTES, CNP_BYTES) == (68, 80)
    assert first.size == rc_data_bytes(4096, True)
    for p in (mid, first, ack, cnp):
        assert len(wire.encode(p)) == p.size == natural_size(p.kind, p.length, p.flags)
    # opcodes: WRITE ONLY on the one-packet message, MIDDLE on the other; ACK; CNP
    assert [wire.encode(p)[48] for p in (first, mid, ack, cnp)] == [0x0A, 0x07, 0x11, 0x81]


def test_roce_trimmed_packet_decodes_unverified() -> None:
    p = Packet(DATA, 1, 5, 9, 3, length=4096, flags=FLAG_ROCE, offset=4096,
               da=usid.host_address(5))
    p.trimmed, p.size = True, 128
    data = wire.encode(p)
    assert len(data) == 128
    q = wire.decode(data)
    assert q.trimmed and q.size == 128 and q.payload is None and q.qpn == 9


@SETTINGS
@given(rc_packets(), st.data())
def test_mutated_roce_bytes_raise_only_decode_error(p: Packet, data: st.DataObject) -> None:
    buf = bytearray(wire.encode(p))
    i = data.draw(st.integers(0, len(buf) - 1))
    buf[i] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(buf)))
    for raw in (bytes(buf), bytes(buf[:cut])):
        try:
            wire.decode(raw)
        except wire.DecodeError:
            pass


def test_a_flipped_covered_byte_is_refused() -> None:
    p = Packet(ACK, 5, 1, 9, 3, flags=FLAG_ROCE, da=usid.host_address(1))
    data = bytearray(wire.encode(p))
    data[50] ^= 1  # the QPN, under the ICRC
    with pytest.raises(wire.DecodeError):
        wire.decode(bytes(data))
    assert struct.unpack_from(">H", data, 4)[0] == len(data) - 40


def test_roce_checks_verify_after_every_usid_shift() -> None:
    """On the static uSID carrier every switch rewrites the destination: the ICRC and the UDP
    checksum cover the final destination (the block alone), so they verify at every hop."""
    da = usid.path_address(2, 3, 7, 9, 4)
    p = Packet(DATA, 1, 5, 9, 3, length=256, flags=FLAG_ROCE | FLAG_FIRST | FLAG_LAST,
               msg_len=256, da=da, payload=bytes(range(256)))
    buf = bytearray(wire.encode(p))
    for _ in range(4):
        wire.shift_outer_dst(buf)
        q = wire.decode(bytes(buf))
        assert q.payload == p.payload and q.plane == 2
