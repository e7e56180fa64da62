"""Decoder fuzzing (issue 7): whatever bytes arrive, the decoders raise only ``DecodeError``.

``tests/test_wire.py`` already throws plain random bytes and blind mutations at
``wire.decode``. Those mostly die at the first length or checksum test, so this module goes
after the code behind those tests:

* **checksum-refreshed mutations**: a valid packet of every kind (DATA, DATA with immediate,
  ACK, trim NACK, sequence-error NACK, PROBE, PROBE_REPLY) has header fields overwritten and
  then its ICRC and UDP checksum recomputed (by this module's own implementation of the
  RoCE v2 rules), so the decoder's semantic checks are what must refuse it;
* **trimmed packets**: cut at every size, trim-marked, their surviving extension bytes
  randomized (no checksum protects them, so ``_decode_cut`` sees anything);
* **exhaustive sweeps**: every BTH opcode, every AETH syndrome, every cut length;
* **the IPv6/UDP envelope**: random envelopes that pass the outer checks, and the byte-level
  helpers the live fabric runs on any datagram that passes ``outer_ok``;
* **pcap files**: valid captures in both byte orders, both time resolutions and every link
  type we read, then mutated, truncated and spliced; ``read_pcap``/``read_packets`` must raise
  only ``DecodeError`` (a missing file is an ``OSError``, as for any file API).

Decoded results are checked too: a packet that decodes has the size it arrived with, and
``nack_fields_from_trimmed`` refuses (with ``DecodeError``) what did not survive. The module
prints how many inputs it fed the decoders.
"""

from __future__ import annotations

import io
import os
import struct
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrc import pcap, wire
from mrc.packet import (
    ACK,
    DATA,
    ENVELOPE_BYTES,
    FLAG_ACK_REQ,
    FLAG_IMM,
    FLAG_LAST,
    FLAG_SEQ_ERR,
    FLAG_TRIM,
    ICRC_BYTES,
    IPV6_BYTES,
    NACK,
    PROBE,
    PROBE_REPLY,
    TRIM_DSCP,
    Packet,
)
from topology import usid

COUNTS: Counter[str] = Counter()
MANY = settings(max_examples=4 * settings().max_examples, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SOME = settings(MANY, max_examples=2 * settings().max_examples)


# ====================================================================== harness
def decode_only_decode_error(data: bytes | bytearray) -> Packet | None:
    """Decode; a DecodeError is an answer, any other exception fails the test."""
    COUNTS["wire.decode"] += 1
    try:
        q = wire.decode(data)
    except wire.DecodeError:
        return None
    assert q.size == len(data)
    assert q.kind in (DATA, ACK, NACK, PROBE, PROBE_REPLY)
    if q.kind == DATA:
        try:
            wire.nack_fields_from_trimmed(q)
        except wire.DecodeError:  # only a trim can cut the EV off
            assert q.trimmed and q.size < ENVELOPE_BYTES + 24
    return q


def refresh_checks(buf: bytearray) -> None:
    """Recompute ICRC and inner UDP checksum of a full-length packet, from the RoCE v2 rules
    (not from ``mrc.wire``): ICRC = CRC-32 over 8 bytes of ones, the inner IPv6 header with
    traffic class, flow label and hop limit set to ones, UDP with its checksum set to ones,
    the BTH with its byte after the P_Key set to ones, and the rest up to the ICRC, stored
    least significant byte first; UDP checksum over the IPv6 pseudo-header and everything
    after the UDP header's start, zero sent as 0xFFFF."""
    n = len(buf)
    if n < ENVELOPE_BYTES + ICRC_BYTES:
        return
    inner = bytearray(buf[IPV6_BYTES:n - ICRC_BYTES])
    inner[0:4] = b"\x6f\xff\xff\xff"
    inner[7] = 0xFF  # hop limit
    inner[46:48] = b"\xff\xff"  # UDP checksum
    inner[52] = 0xFF  # BTH: FECN/BECN/reserved
    crc = zlib.crc32(bytes(inner), zlib.crc32(b"\xff" * 8))
    buf[n - ICRC_BYTES:] = struct.pack("<I", crc)
    buf[86:88] = b"\x00\x00"
    udp_len = n - 80
    total = sum(struct.unpack(">16H", bytes(buf[48:80]))) + udp_len + 17
    body = bytes(buf[80:]) + (b"\x00" if udp_len % 2 else b"")
    total += sum(struct.unpack(f">{len(body) // 2}H", body))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    csum = ~total & 0xFFFF
    buf[86:88] = struct.pack(">H", csum or 0xFFFF)


# ====================================================================== valid packets
U24 = st.integers(0, 2**24 - 1)
U32 = st.integers(0, 2**32 - 1)
ANY_DA = st.one_of(st.integers(0, 2**128 - 1),
                   st.builds(usid.path_address, st.integers(0, 7), st.integers(0, 200),
                             st.integers(0, 200), st.integers(0, 200), st.integers(0, 200)))
VARIANTS = ("data", "data_imm", "ack", "nack_trim", "nack_seq", "probe", "probe_reply")


@st.composite
def valid_packets(draw: st.DrawFn, variant: str | None = None, max_payload: int = 300
                  ) -> Packet:
    """A well-formed packet of one of the seven variants the wire format has."""
    v = variant or draw(st.sampled_from(VARIANTS))
    src, dst, qpn, psn = draw(U32), draw(U32), draw(U24), draw(U24)
    ev, ts, da, ecn = draw(U32), draw(U32), draw(ANY_DA), draw(st.integers(0, 3))
    ackreq = draw(st.sampled_from((0, FLAG_ACK_REQ)))
    if v.startswith("data"):
        length = draw(st.integers(1, max_payload))
        flags = FLAG_LAST | ackreq | (FLAG_IMM if v == "data_imm" else 0)
        payload = draw(st.none() | st.binary(min_size=length, max_size=length))
        return Packet(DATA, src, dst, qpn, psn, ev=ev, ts=ts, da=da, ecn=ecn,
                      msg_id=draw(U32), offset=draw(U32) * 4096, length=length,
                      msg_len=draw(U32), imm=draw(U32), flags=flags, payload=payload,
                      digest=draw(st.integers(0, 2**64 - 1)))
    if v.startswith(("ack", "nack")):
        kind = ACK if v == "ack" else NACK
        flags = ackreq | {"ack": 0, "nack_trim": FLAG_TRIM, "nack_seq": FLAG_SEQ_ERR}[v]
        return Packet(kind, src, dst, qpn, psn, ev=ev, ts=ts, da=da, ecn=ecn,
                      msg_id=draw(U24), echo_psn=draw(U24), sack_base=draw(U24),
                      sack=draw(st.integers(0, 2**64 - 1)), flags=flags)
    kind = PROBE if v == "probe" else PROBE_REPLY
    return Packet(kind, src, dst, qpn, psn, ev=ev, ts=ts, da=da, ecn=ecn, flags=ackreq)


# ====================================================================== the checksum rules
@SOME
@given(valid_packets())
def test_independent_checksums_match_the_encoder(p: Packet) -> None:
    """This module's ICRC/UDP implementation agrees with mrc.wire on valid packets, so the
    refreshed mutations below really are checksum-correct."""
    data = wire.encode(p)
    buf = bytearray(data)
    buf[86:88] = b"\x12\x34"
    buf[-4:] = b"\x00\x00\x00\x00"
    refresh_checks(buf)
    assert bytes(buf) == data
    assert decode_only_decode_error(data) is not None


# ====================================================================== semantic mutations
#: Header fields worth corrupting: (offset, width) over the envelope and every extension.
FIELDS = [(0, 1), (1, 1), (4, 2), (6, 1), (24, 8), (32, 8), (40, 4), (44, 2), (46, 1),
          (48, 8), (56, 8), (64, 8), (72, 8), (80, 2), (82, 2), (84, 2), (88, 1), (89, 1),
          (90, 2), (92, 4), (96, 4), (100, 1), (100, 4), (101, 3), (104, 4), (108, 4),
          (112, 4), (116, 2), (118, 2), (120, 4), (124, 4), (128, 2), (130, 2), (132, 8),
          (136, 4)]


@st.composite
def refreshed_mutants(draw: st.DrawFn) -> bytes:
    buf = bytearray(wire.encode(draw(valid_packets(max_payload=64))))
    for _ in range(draw(st.integers(1, 3))):
        offset, width = draw(st.sampled_from(FIELDS))
        if offset + width > len(buf):
            continue
        value = draw(st.one_of(st.integers(0, 2 ** (8 * width) - 1),
                               st.sampled_from((0, 1, 2 ** (8 * width) - 1))))
        buf[offset:offset + width] = value.to_bytes(width, "big")
    if draw(st.booleans()):  # keep the outer length consistent so the envelope passes
        buf[4:6] = struct.pack(">H", (len(buf) - IPV6_BYTES) & 0xFFFF)
    refresh_checks(buf)
    return bytes(buf)


@MANY
@given(refreshed_mutants())
def test_checksum_correct_mutants_raise_only_decode_error(data: bytes) -> None:
    decode_only_decode_error(data)


def _retyped(p: Packet, opcode: int | None = None, syndrome: int | None = None) -> bytearray:
    buf = bytearray(wire.encode(p))
    if opcode is not None:
        buf[88] = opcode
    if syndrome is not None:
        buf[100] = syndrome
    refresh_checks(buf)
    return buf


SAMPLES = {
    "data": Packet(DATA, 3, 9, 77, 5, ev=usid.make_ev(1, 2), msg_id=11, offset=0,
                   length=100, msg_len=100, flags=FLAG_LAST | FLAG_ACK_REQ, ts=42,
                   da=usid.path_address(1, 0, 2, 3, 1), digest=7),
    "data_imm": Packet(DATA, 3, 9, 77, 5, ev=1, msg_id=11, offset=0, length=7, msg_len=7,
                       flags=FLAG_LAST | FLAG_IMM, imm=99, ts=42, da=1, payload=b"abcdefg"),
    "ack": Packet(ACK, 9, 3, 77, 6, ev=1, msg_id=11, echo_psn=5, sack_base=5, sack=1,
                  ts=42, da=2),
    "nack_trim": Packet(NACK, 9, 3, 77, 6, ev=1, flags=FLAG_TRIM, echo_psn=5, da=2),
    "nack_seq": Packet(NACK, 9, 3, 77, 6, ev=1, flags=FLAG_SEQ_ERR, echo_psn=5, da=2),
    "probe": Packet(PROBE, 3, 9, 77, 1, ev=1, ts=42, da=3),
    "probe_reply": Packet(PROBE_REPLY, 9, 3, 77, 1, ev=1, ts=42, da=3),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_opcode_and_syndrome(variant: str) -> None:
    """All 256 BTH opcodes and all 256 AETH syndromes on every variant, checksums valid."""
    p = SAMPLES[variant]
    accepted = set()
    for value in range(256):
        if decode_only_decode_error(_retyped(p, opcode=value)) is not None:
            accepted.add(value)
        decode_only_decode_error(_retyped(p, syndrome=value))
    # the packet's own opcode, and only opcodes of the same layout (PROBE <-> PROBE_REPLY)
    own = wire.encode(p)[88]
    assert own in accepted
    assert accepted <= ({own} | ({wire.OP_MRC_PROBE, wire.OP_MRC_PROBE_REPLY}
                                 if own in (wire.OP_MRC_PROBE, wire.OP_MRC_PROBE_REPLY)
                                 else set()))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_cut_length_with_and_without_trim_mark(variant: str) -> None:
    """Every prefix of every variant, with a consistent outer length, marked and unmarked."""
    full = wire.encode(SAMPLES[variant])
    for size in range(len(full) + 2):
        raw = bytearray(full[:size]) + (b"\x00" * max(0, size - len(full)))
        decode_only_decode_error(raw)
        if size >= 6:
            raw[4:6] = struct.pack(">H", max(size - IPV6_BYTES, 0))
            decode_only_decode_error(raw)
            wire.set_outer_dscp(raw, TRIM_DSCP)
            q = decode_only_decode_error(raw)
            if q is not None and size < len(full):
                assert q.trimmed and q.payload is None


# ====================================================================== trimmed packets
@st.composite
def trimmed_garbage(draw: st.DrawFn) -> bytes:
    """A trim-marked packet cut anywhere, whose surviving extension bytes are random."""
    full = wire.encode(draw(valid_packets(max_payload=200)))
    size = draw(st.integers(ENVELOPE_BYTES, len(full)))
    buf = bytearray(full)
    wire.trim(buf, size) if size < len(full) else wire.set_outer_dscp(buf, TRIM_DSCP)
    keep = draw(st.integers(ENVELOPE_BYTES - 12, len(buf)))  # from within the BTH on
    buf[keep:] = draw(st.binary(min_size=len(buf) - keep, max_size=len(buf) - keep))
    return bytes(buf)


@MANY
@given(trimmed_garbage())
def test_trimmed_packets_with_random_extensions_raise_only_decode_error(data: bytes) -> None:
    decode_only_decode_error(data)


# ====================================================================== the envelope
@st.composite
def envelopes(draw: st.DrawFn) -> bytes:
    """IPv6-in-IPv6 with a consistent outer length (what ``outer_ok`` lets through), then
    anything: inner header, UDP, BTH and the rest random or nearly right."""
    n = draw(st.integers(ENVELOPE_BYTES, 400))
    buf = bytearray(draw(st.binary(min_size=n, max_size=n)))
    buf[0] = 0x60 | (buf[0] & 0x0F)
    buf[4:6] = struct.pack(">H", n - IPV6_BYTES)
    buf[6] = 41
    if draw(st.booleans()):  # plausible inner header and UDP port too
        buf[40] = 0x60 | (buf[40] & 0x0F)
        buf[44:46] = struct.pack(">H", draw(st.sampled_from((n - 80, n - 79, 0, 0xFFFF))))
        buf[46] = 17
        buf[82:84] = struct.pack(">H", 4791)
        buf[84:86] = buf[44:46]
        if draw(st.booleans()):  # host addresses, our P_Key, a known opcode
            for at in (48, 64):
                buf[at:at + 12] = (usid.HOST_PREFIX >> 32).to_bytes(12, "big")
            buf[89] &= 0xC0
            buf[90:92] = b"\xff\xff"
            buf[88] = draw(st.sampled_from((0x0A, 0x0B, 0x11, 0xC0, 0xC1, buf[88])))
        if draw(st.booleans()):
            refresh_checks(buf)
    return bytes(buf)


@MANY
@given(envelopes())
def test_envelopes_raise_only_decode_error_and_helpers_never_raise(data: bytes) -> None:
    decode_only_decode_error(data)
    assert wire.outer_ok(data)
    COUNTS["byte helpers"] += 1
    wire.outer_dst(data)
    wire.active_usid(data)
    wire.outer_ecn(data)
    wire.outer_dscp(data)
    wire.is_trimmed(data)
    wire.inner_hosts(data)
    buf = bytearray(data)
    wire.shift_outer_dst(buf)
    wire.mark_ce(buf)
    wire.set_outer_dscp(buf, TRIM_DSCP)
    assert len(buf) == len(data)
    wire.trim(buf, ENVELOPE_BYTES + 28)
    assert wire.outer_ok(buf)  # a switch's rewrite keeps the envelope well formed


# ====================================================================== pcap files
MAGICS = (0xA1B23C4D, 0xA1B2C3D4)


@st.composite
def pcap_images(draw: st.DrawFn) -> bytes:
    """A capture in either byte order and resolution, raw IPv6 or Ethernet, then damaged."""
    order = draw(st.sampled_from(("<", ">")))
    magic = draw(st.sampled_from(MAGICS))
    linktype = draw(st.sampled_from((101, 229, 1)))
    out = io.BytesIO()
    out.write(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, linktype))
    for p in draw(st.lists(valid_packets(max_payload=40), max_size=3)):
        data = wire.encode(p)
        if linktype == 1:
            data = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x86\xdd" + data
        out.write(struct.pack(order + "IIII", draw(U32), draw(st.integers(0, 999_999)),
                              len(data), len(data)))
        out.write(data)
    buf = bytearray(out.getvalue())
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(("set", "cut", "word", "insert", "magic", "linktype")))
        pos = draw(st.integers(0, len(buf)))
        if op == "set" and pos < len(buf):
            buf[pos] = draw(st.integers(0, 255))
        elif op == "cut":
            del buf[pos:]
        elif op == "word" and pos + 4 <= len(buf):  # a length or time field gone wild
            buf[pos:pos + 4] = struct.pack(order + "I", draw(st.sampled_from(
                (0, 1, 13, 999_999_999, 1_000_000_000, 2**18, 2**18 + 1, 2**31, 2**32 - 1))))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "magic" and len(buf) >= 4:
            buf[0:4] = struct.pack(draw(st.sampled_from(("<", ">"))) + "I",
                                   draw(st.sampled_from((*MAGICS, 0xD4C3B2A1, 0))))
        elif op == "linktype" and len(buf) >= 24:
            buf[20:24] = struct.pack(order + "I", draw(st.sampled_from(
                (0, 1, 101, 228, 229, 0x10000065, 2**32 - 1))))
    return bytes(buf)


def read_all(data: bytes) -> None:
    """Both pcap readers over ``data`` as a file: records or DecodeError, nothing else."""
    COUNTS["pcap files"] += 1
    with tempfile.NamedTemporaryFile(suffix=".pcap", delete=False) as f:
        f.write(data)
        name = f.name
    try:
        for reader in (pcap.read_pcap, pcap.read_packets):
            try:
                for _time_ps, _item in reader(name):
                    COUNTS["pcap records"] += 1
            except wire.DecodeError:
                pass
    finally:
        os.unlink(name)


@SOME
@given(pcap_images())
def test_damaged_pcaps_raise_only_decode_error(data: bytes) -> None:
    read_all(data)


@SOME
@given(st.binary(max_size=200))
def test_random_bytes_as_pcap_raise_only_decode_error(data: bytes) -> None:
    read_all(data)


def test_every_truncation_of_a_capture() -> None:
    out = io.BytesIO()
    with pcap.PcapWriter(out, ethernet=True) as writer:
        for p in SAMPLES.values():
            writer.write(1234, p)
    image = out.getvalue()
    for size in range(len(image)):
        read_all(image[:size])


def test_a_missing_capture_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        list(pcap.read_pcap(tmp_path / "nope.pcap"))


# ====================================================================== figures
def _inputs() -> Iterator[tuple[str, int]]:
    yield from sorted(COUNTS.items())


@pytest.fixture(scope="module", autouse=True)
def _report_figures(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not COUNTS:
        return
    line = "decoder fuzzing: " + ", ".join(f"{k}={v:,}" for k, v in _inputs())
    plugins = request.config.pluginmanager
    reporter, capture = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(line)

