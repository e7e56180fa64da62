"""Captures of runs: the packet as publicly described, checked by tshark (skipped without it),
and the capture options (point of capture, snap length, sampling, kinds)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mrc import wire
from mrc.labs.run.runner import run_lab
from mrc.packet import DEFAULT_HOP_LIMIT, TRIM_DSCP
from mrc.pcap import CaptureOptions, datagram_kind, read_pcapng

TSHARK = shutil.which("tshark")
#: what the issue asks tshark to find nothing of
FLAGGED = "_ws.malformed || _ws.expert.severity >= warning"

INCAST = {
    "name": "incast-trims",
    "fabric": {"preset": "lab-small", "buffer_bytes": 32768, "trim_threshold_bytes": 32768},
    "workload": {"kind": "write_bw", "pairs": [["h1", "h0"], ["h2", "h0"], ["h3", "h0"],
                                               ["h5", "h0"]],
                 "bidirectional": False, "message_bytes": 262144, "tx_depth": 2},
    "transport": {"mrc": {}},
    "run": {"duration_us": 60, "bin_us": 10, "grace_us": 200},
}


def tshark_flagged(path: Path) -> list[str]:
    out = subprocess.run([str(TSHARK), "-n", "-r", str(path), "-Y", FLAGGED],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return out.splitlines()


@pytest.fixture(scope="module")
def incast(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cap")
    path = out / "incast.pcapng"
    result = run_lab(INCAST, progress=False, capture=CaptureOptions(str(path), snaplen=65535))
    return {"path": path, "result": result, "records": list(read_pcapng(path))}


def test_capture_has_trims_and_the_packet_as_described(incast: dict[str, Any]) -> None:
    records = incast["records"]
    assert records
    kinds = Counter(datagram_kind(data) for _, data, _ in records)
    assert kinds["trimmed"] > 0 and kinds["nack"] > 0 and kinds["data"] > 0 and kinds["ack"] > 0
    for _, data, port in records:
        assert re.fullmatch(r"p\d+\.t0\.\d+->h\d+\.p\d+", port)  # delivered: into a host
        pkt = wire.decode(data)  # every record a well-formed packet, trimmed ones too
        assert pkt.qpn >= 2  # QPs 0 and 1 are InfiniBand's management QPs
        assert data[59] == 1 and data[75] == 1  # interface IDs 0:1:<host>: never all-zero
        assert data[7] == DEFAULT_HOP_LIMIT - (3 if pkt.src // 2 != pkt.dst // 2 else 1)
        label = int.from_bytes(data[1:4], "big") & 0xFFFFF
        sport = int.from_bytes(data[80:82], "big")
        assert wire.ev_from_entropy(label, sport) == pkt.ev  # EV in flow label + UDP sport
        assert int.from_bytes(data[4:6], "big") == len(data) - 40  # payload length = bytes
        if pkt.trimmed:
            assert ((data[0] & 0x0F) << 2 | data[1] >> 6) == TRIM_DSCP
            assert int.from_bytes(data[44:46], "big") == len(data) - 80
        if kinds and pkt.kind == 2:  # a NACK: the trim's own NAK code, not RNR
            assert data[100] == wire.SYNDROME_NAK_TRIM


def test_each_datagram_is_captured_once_at_its_delivery(incast: dict[str, Any]) -> None:
    delivered = incast["result"].summary  # the capture point: links into hosts
    assert delivered
    counts = Counter((port, data) for _, data, port in incast["records"])
    # retransmissions are new datagrams; a datagram never appears twice at one point
    assert max(counts.values()) == 1


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_tshark_finds_nothing_in_an_incast_with_trims(incast: dict[str, Any]) -> None:
    assert tshark_flagged(incast["path"]) == []
    # and its one-line summaries (no tree) call nothing malformed either (full snap length:
    # a frame cut by a snap length is labelled "Invalid Packet Length from LRH" there)
    summary = subprocess.run([str(TSHARK), "-n", "-r", str(incast["path"])],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    assert summary and "Malformed" not in summary and "RESERVED" not in summary


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_tshark_finds_nothing_in_t0_switch_down(tmp_path: Path) -> None:
    path = tmp_path / "t0.pcapng"
    run_lab("t0-switch-down", progress=False,
            overrides={"run.duration_us": 300, "fault.0.at_us": 100},
            capture=CaptureOptions(str(path), point="every_hop", every=7))
    assert path.with_name("t0.mrc.pcapng").stat().st_size > 0
    for name in ("t0.mrc.pcapng", "t0.rc.pcapng"):
        assert tshark_flagged(path.with_name(name)) == [], name


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_tshark_names_the_point_of_capture(incast: dict[str, Any]) -> None:
    out = subprocess.run([str(TSHARK), "-n", "-r", str(incast["path"]), "-c", "5", "-T",
                          "fields", "-e", "frame.interface_name"], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert out and all("->h0.p" in name for name in out)


def test_snaplen_sampling_and_kinds(tmp_path: Path) -> None:
    lab = {**INCAST, "run": {"duration_us": 30, "bin_us": 10, "grace_us": 100}}
    full = tmp_path / "full.pcapng"
    run_lab(lab, progress=False, capture=CaptureOptions(str(full), snaplen=65535))
    everything = list(read_pcapng(full))
    small = tmp_path / "small.pcapng"
    run_lab(lab, progress=False, capture=CaptureOptions(str(small)))  # default 256 bytes
    cut = list(read_pcapng(small))
    assert len(cut) == len(everything) and max(len(d) for _, d, _ in cut) == 256
    assert small.stat().st_size < full.stat().st_size / 4
    tenth = tmp_path / "tenth.pcapng"
    run_lab(lab, progress=False, capture=CaptureOptions(str(tenth), every=10))
    assert len(list(read_pcapng(tenth))) == -(-len(everything) // 10)
    acks = tmp_path / "acks.pcapng"
    run_lab(lab, progress=False, capture=CaptureOptions(str(acks), kinds=frozenset({"ack"})))
    got = [datagram_kind(d) for _, d, _ in read_pcapng(acks)]
    assert got and set(got) == {"ack"}
    assert len(got) == sum(datagram_kind(d) == "ack" for _, d, _ in everything)
    sent = tmp_path / "sent.pcapng"
    run_lab(lab, progress=False, capture=CaptureOptions(str(sent), point="sent"))
    names = {port for _, _, port in read_pcapng(sent)}
    assert names and all(re.fullmatch(r"h\d+\.p\d+->p\d+\.t0\.\d+", n) for n in names)
    with pytest.raises(ValueError):
        CaptureOptions("x", point="somewhere")
