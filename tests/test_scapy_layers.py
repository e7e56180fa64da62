"""The two codecs agree: scapy (fields, lengths, UDP checksum and ICRC computed by scapy) and
the struct codec produce the same bytes, and scapy's dissection of wire bytes reads the same
field values that mrc.wire.decode does."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import AETH, BTH, GRH, cnp
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mrc import wire
from mrc.packet import (
    ACK,
    DATA,
    ECN_CE,
    FLAG_ACK_REQ,
    FLAG_IMM,
    FLAG_ROCE,
    FLAG_SEQ_ERR,
    FLAG_TRIM,
    NACK,
    PROBE,
    PROBE_REPLY,
    TRIM_DSCP,
    Packet,
)
from mrc.scapy_layers import MRCAETH, MRCDETH, MRCPETH, RETH, ImmDt, from_scapy, to_scapy
from topology import usid

U32 = st.integers(0, 2**32 - 1)
U24 = st.integers(0, 2**24 - 1)
U64 = st.integers(0, 2**64 - 1)
ADDRESSES = st.one_of(
    st.integers(0, 2**128 - 1),
    st.builds(usid.path_address, st.integers(0, 7), st.integers(0, 511), st.integers(0, 255),
              st.integers(0, 511), st.integers(0, 255)),
)


@st.composite
def packets(draw: st.DrawFn) -> Packet:
    kind = draw(st.sampled_from([DATA, ACK, NACK, PROBE, PROBE_REPLY]))
    common = dict(ev=draw(U32), flags=draw(st.integers(0, 0xFFFF)) & ~FLAG_ROCE, ts=draw(U32),
                  da=draw(ADDRESSES), ecn=draw(st.integers(0, 3)),
                  trimmed=draw(st.booleans()))  # full length + trim mark: still comparable
    src, dst, qpn, psn = draw(U32), draw(U32), draw(U24), draw(U24)
    if kind == DATA:
        length = draw(st.integers(0, 300))
        payload = draw(st.one_of(st.none(), st.binary(min_size=length, max_size=length)))
        return Packet(DATA, src, dst, qpn, psn, msg_id=draw(U32), offset=draw(U64),
                      length=length, msg_len=draw(U64), imm=draw(U32), payload=payload,
                      digest=draw(U64), **common)
    if kind in (ACK, NACK):
        return Packet(kind, src, dst, qpn, psn, msg_id=draw(U24), echo_psn=draw(U32),
                      sack_base=draw(U32), sack=draw(U64), **common)
    return Packet(kind, src, dst, qpn, psn, **common)


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(packets())
def test_scapy_build_equals_wire_encode(p: Packet) -> None:
    assert bytes(to_scapy(p)) == wire.encode(p)


@SETTINGS
@given(packets())
def test_scapy_dissection_reads_what_wire_decode_reads(p: Packet) -> None:
    data = wire.encode(p)
    ours = wire.decode(data).fields()
    theirs = from_scapy(IPv6(data)).fields()
    if not p.flags & FLAG_IMM:
        ours.pop("imm"), theirs.pop("imm")
    assert theirs == ours


def test_layers_stack_as_wireshark_reads_them() -> None:
    da = usid.path_address(3, 1, 2, 3, 4)
    data = IPv6(wire.encode(Packet(DATA, 1, 2, 0x42, 9, ev=0xAB, msg_id=5, offset=64,
                                   length=32, flags=FLAG_IMM | FLAG_ACK_REQ, imm=0x77,
                                   payload=os.urandom(32), da=da)))
    assert [type(layer) for layer in _layers(data)] == \
        [IPv6, IPv6, UDP, BTH, RETH, ImmDt, MRCDETH, Raw]
    assert data[IPv6].dst == usid.format_address(da) and data[UDP].dport == 4791
    assert data[BTH].dqpn == 0x42 and data[BTH].psn == 9 and data[BTH].ackreq == 1
    assert data[RETH].va == 64 and data[RETH].dlen == 32 and data[ImmDt].imm == 0x77
    assert data[MRCDETH].ev == 0xAB and len(data[Raw].load) == 32

    ack = IPv6(wire.encode(Packet(NACK, 2, 1, 0x42, 9, flags=FLAG_TRIM, sack=3, da=da)))
    assert [type(layer) for layer in _layers(ack)] == [IPv6, IPv6, UDP, BTH, AETH, MRCAETH]
    assert ack[AETH].syndrome == wire.SYNDROME_NAK_TRIM and ack[MRCAETH].sack == 3
    probe = IPv6(wire.encode(Packet(PROBE_REPLY, 2, 1, 0x42, 9, ev=7, da=da)))
    assert [type(layer) for layer in _layers(probe)] == [IPv6, IPv6, UDP, BTH, MRCPETH]
    assert probe[MRCPETH].ev == 7


def _layers(pkt: object) -> list[object]:
    out = []
    layer = pkt
    while layer is not None and type(layer).__name__ != "NoPayload":
        out.append(layer)
        layer = layer.payload  # type: ignore[attr-defined]
    return out


def test_ce_and_trim_marks_are_outer_only() -> None:
    p = Packet(NACK, 1, 2, 3, 4, flags=FLAG_SEQ_ERR, ecn=ECN_CE, trimmed=True,
               da=usid.local_address(0, 1, 2))
    s = to_scapy(p)
    assert s.tc == (TRIM_DSCP << 2) | ECN_CE and s[IPv6:2].tc & 3 != ECN_CE
    assert bytes(s) == wire.encode(p)


def test_trimmed_packets_build_from_wire_bytes() -> None:
    p = Packet(DATA, 1, 2, 3, 4, length=4096, ev=9, msg_id=5, trimmed=True, size=128,
               da=usid.local_address(0, 1, 2))
    s = to_scapy(p)
    assert bytes(s) == wire.encode(p) and len(bytes(s)) == 128
    assert s[BTH].dqpn == 3 and s[RETH].rkey == 5 and (s.tc >> 2) == TRIM_DSCP


def test_scapy_own_roce_layers_still_work() -> None:
    """Our bindings extend scapy's BTH; its plain RoCE packets still build and dissect."""
    plain = IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=50000, dport=4791) / BTH(
        opcode=0x04, dqpn=7, psn=8) / Raw(b"hello world!")
    again = IPv6(bytes(plain))
    assert again[BTH].opcode == 0x04 and again[Raw].load == b"hello world!"
    assert again[BTH].icrc == IPv6(bytes(plain))[BTH].icrc  # ICRC computed by scapy
    ack = IPv6(bytes(IPv6() / UDP(dport=4791) / BTH(opcode=0x11) / AETH(syndrome=0x1F)))
    assert ack[AETH].syndrome == 0x1F and MRCAETH not in ack
    c = cnp(5)
    assert c.dqpn == 5 and bytes(c)
    roce_v1 = Ether(bytes(Ether() / GRH() / BTH(opcode=0x0A, dqpn=1) / Raw(b"x" * 16)))
    assert roce_v1[BTH].dqpn == 1
