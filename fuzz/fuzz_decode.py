"""Coverage-guided fuzzing of every decoder with atheris (libFuzzer for Python).

One input drives one decoder, chosen by its first byte:

* 0: ``mrc.wire.decode`` on the rest, as it arrived;
* 1: the rest, trim-marked with a consistent outer length (a switch's trim), then decoded,
  and a DATA result handed to ``nack_fields_from_trimmed``;
* 2: the rest appended to a valid envelope prefix (so the fuzzer starts past the outer
  checks), then decoded;
* 3: the rest as a pcap file, read by ``mrc.pcap.read_packets``;
* 4: the rest with its ICRC and UDP checksum recomputed (``refresh_checks`` of
  ``tests/test_fuzz_decoders.py``), so mutations reach the semantic checks behind them;
* otherwise: the byte-level helpers the live fabric runs on datagrams that pass ``outer_ok``.

``DecodeError`` is the only exception a decoder may raise; anything else propagates and
libFuzzer reports a crash with the input that caused it. Run (see fuzz/README.md)::

    python fuzz/fuzz_decode.py -max_total_time=60

Without a corpus directory argument a seed corpus (valid packets of every kind, trimmed
packets and a capture) is written to a temporary directory and used.
"""

from __future__ import annotations

import io
import os
import struct
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # a checkout works without an install

import atheris  # noqa: E402
import numpy  # noqa: E402, F401  (imported first: only our decoders get instrumented)

from mrc import packet as _packet  # noqa: E402, F401  (the packet model is not a decoder)

with atheris.instrument_imports(include=["mrc.wire", "mrc.pcap"]):
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
        IPV6_BYTES,
        NACK,
        PROBE,
        PROBE_REPLY,
        TRIM_DSCP,
        Packet,
    )

# after the instrumented import: the test module imports mrc.wire too
from test_fuzz_decoders import refresh_checks  # noqa: E402

_TMP = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_PCAP_PATH = os.path.join(_TMP, f"mrc-fuzz-{os.getpid()}.pcap")


def seeds() -> list[Packet]:
    """One packet of every variant the wire format has."""
    da = (0xFCBB0001 << 96) | (0x0101 << 80)
    return [
        Packet(DATA, 1, 2, 7, 5, ev=0x10203, msg_id=9, offset=4096, length=64, msg_len=8192,
               flags=FLAG_LAST | FLAG_ACK_REQ, ts=77, da=da, digest=0x1122334455667788),
        Packet(DATA, 1, 2, 7, 6, ev=3, msg_id=9, offset=0, length=5, msg_len=5,
               flags=FLAG_LAST | FLAG_IMM, imm=0xBEEF, ts=77, da=da, payload=b"hello"),
        Packet(ACK, 2, 1, 7, 6, ev=3, msg_id=9, echo_psn=5, sack_base=5, sack=3, ts=77, da=da),
        Packet(NACK, 2, 1, 7, 6, ev=3, flags=FLAG_TRIM, echo_psn=5, da=da),
        Packet(NACK, 2, 1, 7, 6, ev=3, flags=FLAG_SEQ_ERR, echo_psn=5, da=da),
        Packet(PROBE, 1, 2, 7, 1, ev=3, ts=77, da=da),
        Packet(PROBE_REPLY, 2, 1, 7, 1, ev=3, ts=77, da=da),
    ]


_PREFIX = wire.encode(seeds()[0])[:ENVELOPE_BYTES]


def write_seed_corpus(folder: str) -> None:
    packets = [wire.encode(p) for p in seeds()]
    items = [b"\x00" + d for d in packets]
    for d in packets:
        buf = bytearray(d)
        if wire.trim(buf, 128):
            items.append(b"\x01" + bytes(buf))
    items += [b"\x02" + d[ENVELOPE_BYTES:] for d in packets]
    capture = io.BytesIO()
    with pcap.PcapWriter(capture) as writer:
        for i, p in enumerate(seeds()):
            writer.write(i * 1000, p)
    items.append(b"\x03" + capture.getvalue())
    items += [b"\x04" + d for d in packets]
    items.append(b"\x05" + packets[0])
    for i, item in enumerate(items):
        with open(os.path.join(folder, f"seed-{i:02d}"), "wb") as f:
            f.write(item)


def _check_decoded(q: Packet, n: int) -> None:
    if q.size != n:
        raise AssertionError(f"decoded size {q.size} != {n} bytes received")
    if q.kind == DATA:
        try:
            wire.nack_fields_from_trimmed(q)
        except wire.DecodeError:
            if not q.trimmed:
                raise


def decode(data: bytes | bytearray) -> None:
    try:
        q = wire.decode(data)
    except wire.DecodeError:
        return
    _check_decoded(q, len(data))


def test_one_input(raw: bytes) -> None:
    if not raw:
        return
    mode, data = raw[0], raw[1:]
    if mode == 0:
        decode(data)
    elif mode == 1:
        buf = bytearray(data)
        if len(buf) >= 6:
            wire.set_outer_dscp(buf, TRIM_DSCP)
            buf[4:6] = struct.pack(">H", max(len(buf) - IPV6_BYTES, 0) & 0xFFFF)
        decode(buf)
    elif mode == 2:
        decode(_PREFIX + data)
    elif mode == 3:
        with open(_PCAP_PATH, "wb") as f:
            f.write(data)
        try:
            for _ in pcap.read_packets(_PCAP_PATH):
                pass
        except wire.DecodeError:
            pass
    elif mode == 4:
        buf = bytearray(data)
        refresh_checks(buf)
        decode(buf)
    elif wire.outer_ok(data):
        buf = bytearray(data)
        wire.outer_dst(buf)
        wire.active_usid(buf)
        wire.inner_hosts(buf)
        wire.shift_outer_dst(buf)
        wire.mark_ce(buf)
        wire.trim(buf, max(ENVELOPE_BYTES, len(buf) // 2))
        if not wire.outer_ok(buf):
            raise AssertionError("a switch rewrite broke the envelope")


def main(argv: list[str]) -> None:
    args = list(argv)
    corpus = [a for a in args[1:] if not a.startswith("-")]
    if not corpus:
        folder = tempfile.mkdtemp(prefix="mrc-fuzz-corpus-")
        write_seed_corpus(folder)
        args.append(folder)
    atheris.Setup(args, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        if os.path.exists(_PCAP_PATH):
            os.unlink(_PCAP_PATH)


if __name__ == "__main__":
    main(sys.argv)
