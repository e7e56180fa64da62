"""pcap writer/reader, and what tshark (when installed) shows of our captures."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from scapy.utils import rdpcap, wrpcap

from mrc import pcap, wire
from mrc.packet import ACK, DATA, FLAG_ACK_REQ, FLAG_SEQ_ERR, FLAG_TRIM, NACK, PROBE, Packet
from mrc.scapy_layers import MRCAETH, MRCDETH, MRCPETH
from topology import usid

DA = usid.path_address(3, 12, 200, 45, 7)
BACK = usid.path_address(3, 45, 200, 12, 2)


def capture() -> list[tuple[int, Packet]]:
    """A little conversation: data, a trimmed copy, ACK, both NACKs, a probe."""
    data = Packet(DATA, 10, 20, 0x1234, 100, ev=usid.make_ev(3, 200), msg_id=7, offset=4096,
                  length=4096, flags=FLAG_ACK_REQ, da=DA, payload=os.urandom(4096))
    trimmed = Packet(DATA, 10, 20, 0x1234, 101, ev=usid.make_ev(3, 200), msg_id=7,
                     offset=8192, length=4096, da=DA, trimmed=True, size=128)
    ack = Packet(ACK, 20, 10, 0x1234, 100, ev=data.ev, echo_psn=100, sack=1, da=BACK)
    nack = Packet(NACK, 20, 10, 0x1234, 101, ev=data.ev, flags=FLAG_TRIM, da=BACK)
    seq = Packet(NACK, 20, 10, 0x1234, 101, flags=FLAG_SEQ_ERR, da=BACK)
    probe = Packet(PROBE, 10, 20, 0x1234, 5, ev=data.ev, da=DA)
    pkts = [data, trimmed, ack, nack, seq, probe]
    return [(1_234_567_890 + i * 330_000, p) for i, p in enumerate(pkts)]


def test_round_trip_bytes_and_packets(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    records = capture()
    with pcap.PcapWriter(path) as writer:
        for t, p in records:
            writer.write(t, p)
        writer.write(5_000_000, wire.encode(records[0][1]))  # raw bytes work too
    assert writer.count == len(records) + 1
    read = list(pcap.read_packets(path))
    assert len(read) == len(records) + 1
    for (t, p), (t2, q) in zip(records, read, strict=False):
        assert t2 == t // 1000 * 1000  # nanosecond resolution
        assert q.kind == p.kind and q.psn == p.psn and q.size == p.size and q.da == p.da
    assert read[1][1].trimmed and read[0][1].payload == records[0][1].payload
    raw = [d for _, d in pcap.read_pcap(path)]
    assert raw[0] == raw[-1] == wire.encode(records[0][1])


def test_file_object_and_ethernet(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with pcap.PcapWriter(buf, ethernet=True) as writer:
        writer.write_all(capture())
    assert not buf.closed
    magic, _, _, _, _, _, linktype = struct.unpack_from("<IHHiIII", buf.getvalue())
    assert (magic, linktype) == (pcap.MAGIC_NS, pcap.LINKTYPE_ETHERNET)
    path = tmp_path / "e.pcap"
    path.write_bytes(buf.getvalue())
    assert [q.psn for _, q in pcap.read_packets(path)] == [p.psn for _, p in capture()]


def test_scapy_reads_our_pcap_and_dissects_mrc(tmp_path: Path) -> None:
    path = tmp_path / "s.pcap"
    pcap.write_pcap(path, capture())
    pkts = rdpcap(str(path))
    assert len(pkts) == 6
    assert MRCDETH in pkts[0] and MRCAETH in pkts[2] and MRCPETH in pkts[5]
    assert pkts[0][MRCDETH].msg_id == 7
    # ...and we read scapy's (microsecond, raw IP) captures.
    other = tmp_path / "scapy.pcap"
    wrpcap(str(other), pkts[2:3])
    ((_, q),) = list(pcap.read_packets(other))
    assert q.kind == ACK and q.echo_psn == 100


@pytest.mark.parametrize("damage", ["magic", "short-header", "short-record", "huge", "bad-ip",
                                    "linktype"])
def test_malformed_files_raise_decode_error(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "bad.pcap"
    pcap.write_pcap(path, capture()[:2])
    data = bytearray(path.read_bytes())
    if damage == "magic":
        data[0:4] = b"NOPE"
    elif damage == "short-header":
        data = data[:10]
    elif damage == "short-record":
        data = data[:-7]
    elif damage == "huge":
        struct.pack_into("<I", data, 24 + 8, 1 << 30)
    elif damage == "bad-ip":
        data[24 + 16 + 60] ^= 0xFF  # inside the first packet's inner source address
    elif damage == "linktype":
        struct.pack_into("<I", data, 20, 147)
    path.write_bytes(bytes(data))
    with pytest.raises(wire.DecodeError):
        list(pcap.read_packets(path))


TSHARK = shutil.which("tshark")


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_tshark_shows_usid_destination_qpn_and_psn(tmp_path: Path) -> None:
    """tshark, with no plugin, dissects IPv6 -> IPv6 -> UDP 4791 -> InfiniBand BTH."""
    path = tmp_path / "t.pcap"
    records = capture()
    pcap.write_pcap(path, records)
    fields = ["frame.time_epoch", "frame.len", "ipv6.dst", "udp.dstport",
              "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
              "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "udp.checksum.status"]
    cmd = [TSHARK, "-n", "-r", str(path), "-o", "udp.check_checksum:TRUE", "-T", "fields",
           "-E", "separator=|"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines()]
    assert len(rows) == len(records)
    for row, (t, p) in zip(rows, records, strict=True):
        outer, inner = row["ipv6.dst"].split(",")
        assert usid.parse_address(outer) == p.da  # the uSID carrier, as written
        assert usid.parse_address(inner) == usid.host_address(p.dst)
        assert row["udp.dstport"] == "4791"
        assert int(row["infiniband.bth.destqp"], 0) == p.qpn == 0x1234
        assert int(row["infiniband.bth.psn"]) == p.psn
        assert int(row["frame.len"]) == p.size
        assert row["frame.time_epoch"].startswith(f"{t // 10**12}.{t // 1000 % 10**9:09d}")
    opcodes = [int(r["infiniband.bth.opcode"]) for r in rows]
    assert opcodes == [0x0A, 0x0A, 0x11, 0x11, 0x11, 0xC0]
    assert int(rows[0]["infiniband.reth.dmalen"]) == 4096
    assert [int(r["infiniband.aeth.syndrome"]) for r in rows[2:5]] == [0x1F, 0x65, 0x60]
    # Wireshark's own UDP checksum verification (1 = good), the trimmed packet's too: the
    # trimming switch rewrote its lengths and checksum for what is left
    status = [r["udp.checksum.status"] for r in rows]
    assert status == ["1"] * 6
