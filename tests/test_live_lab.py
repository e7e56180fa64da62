"""Acceptance of the live runtime: a lab of a few wall seconds on real loopback sockets.

4 hosts x 4 planes, a bidirectional write_bw between h0 and h2, and the T0 above h0 in plane 1
dies mid-transfer. Only what does not depend on machine speed is asserted: MRC delivers every
message byte-exact (SHA-256 per message); once MRC has marked the dead plane's paths bad, no
data enters that plane (probes only); RC's QP on that plane errors and its job fails; nothing
is left open. The same run's capture opens in tshark and in our scapy layers, and the CLI runs
a lab live.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from mrc import pcap, wire
from mrc.labs.run.runner import run_live
from mrc.live.stack import LiveStack
from mrc.packet import DATA, PROBE
from mrc.pcap import CaptureOptions
from topology import usid

FAILED_PLANE = 1
LAB = {
    "name": "live-t0-down",
    "fabric": {"planes": 4, "hosts": 4, "hosts_per_t0": 2, "t1_per_plane": 2},
    "workload": {"kind": "write_bw", "pairs": [["h0", "h2"]], "bidirectional": True,
                 "message_bytes": 131072, "tx_depth": 2},
    "transport": {"mrc": {}, "rc": {"timeout_exp": 3, "retry_cnt": 2}},
    "fault": [{"kind": "switch_down", "target": f"h0.p{FAILED_PLANE}.t0", "at_us": 100}],
    "run": {"duration_us": 300, "bin_us": 10, "seed": 1, "grace_us": 300},
}
DILATION = 5000  # 300 us modelled = 1.5 s of wall clock per transport
TSHARK = shutil.which("tshark")


def open_handles() -> tuple[int, int, int]:
    """UDP sockets, sockets/pipes/event fds (matplotlib keeps its font files open: not ours)
    and threads of this process."""
    proc = psutil.Process()
    kinds = ("socket:", "pipe:", "anon_inode:")
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{fd}").startswith(kinds)
        except OSError:
            pass
    return len(proc.net_connections(kind="udp")), fds, proc.num_threads()


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("live")
    before = open_handles()
    stacks: list[LiveStack] = []
    result = run_live(LAB, dilation=DILATION, progress=False, out=out / "res",
                      capture=CaptureOptions(str(out / "cap.pcapng"), point="sent",
                                             snaplen=65535),
                      keep_stacks=stacks, trace=1_000_000)
    after = open_handles()
    return {"result": result, "stacks": {s.transport_name: s for s in stacks},
            "before": before, "after": after, "out": out}


def _events(result: object, transport: str, kind: str) -> list[dict[str, object]]:
    ev = result.events  # type: ignore[attr-defined]
    rows = ev[(ev["transport"] == transport) & (ev["kind"] == kind)].to_dict("records")
    for row in rows:
        row["detail"] = json.loads(row["detail"]) if isinstance(row["detail"], str) else {}
    return rows


def test_mrc_delivers_every_message_byte_exact(live_run: dict[str, object]) -> None:
    result = live_run["result"]
    summary = result.summary  # type: ignore[attr-defined]
    assert summary["runtime"] == "live" and summary["live"]["dilation"] == DILATION
    mrc = summary["transports"]["mrc"]
    assert mrc["outcome"] == "completed"  # every posted message completed (grace included)
    assert mrc["messages_corrupt"] == 0
    stack = live_run["stacks"]["mrc"]  # type: ignore[index]
    posted = sum(c.messages_ok + c.messages_corrupt + c.pending for c in stack.connections)
    assert mrc["messages_verified"] == posted > 4
    assert all(c.pending == 0 and not c.failed for c in stack.connections)
    assert mrc["live"]["hosts"]["rx_malformed"] == 0 and mrc["live"]["fabric"]["rejected"] == 0
    drops = mrc["live"]["kernel_drops"]  # reported (losses outside the model), Linux only
    assert drops is None or isinstance(drops, int)


def test_after_detection_no_data_enters_the_failed_plane(live_run: dict[str, object]) -> None:
    result = live_run["result"]
    stack = live_run["stacks"]["mrc"]  # type: ignore[index]
    fault_ps = LAB["fault"][0]["at_us"] * 1_000_000  # type: ignore[index]
    bad: dict[tuple[int, int], dict[int, int]] = {}  # (host, qpn) -> ev -> first bad time
    for row in _events(result, "mrc", "ev_state"):
        d = row["detail"]
        if d.get("new") == "ASSUMED_BAD" and usid.ev_plane(int(d["ev"])) == FAILED_PLANE:
            host, qp = str(row["target"]).split(".qp")
            times = bad.setdefault((int(host[1:]), int(qp)), {})
            times.setdefault(int(d["ev"]), round(float(row["time_us"]) * 1_000_000))
    checked = 0
    for conn in stack.connections:
        qp = conn.sender
        host = stack.nics[qp.host]
        sent = [(t, kind, ev) for t, plane, kind, qpn, ev, _ in host.trace  # qpn: the peer's
                if qpn == qp.peer_qpn and plane == FAILED_PLANE]
        assert any(kind == DATA and t < fault_ps for t, kind, _ in sent)  # it used the plane
        if qp.host == 0:
            # h0 lost its plane-1 port with its T0 (loss of signal): nothing leaves on it
            assert not [t for t, _, _ in sent if t > fault_ps]
            continue
        marked = bad.get((qp.host, qp.qpn), {})
        assert marked and all(fault_ps < t for t in marked.values())
        assert all(qp.ev_state(ev) == "ASSUMED_BAD" for ev in marked)  # never reintegrated
        # every path that carried data after the fault was detected, and once an EV is
        # marked it carries probes only
        assert {ev for t, kind, ev in sent if kind == DATA and t > fault_ps} <= set(marked)
        for t, kind, ev in sent:
            if ev in marked and t > marked[ev]:
                assert kind == PROBE
        detected = max(marked.values())  # MRC's detection of the dead plane is complete
        after = [kind for t, kind, _ in sent if t > detected]
        assert after and set(after) == {PROBE}  # probed, never used for data again
        checked += 1
    assert checked == 1  # h2's QP towards h0


def test_rc_qp_on_the_failed_plane_errors_and_the_job_fails(live_run: dict[str, object]) -> None:
    result = live_run["result"]
    rc = result.summary["transports"]["rc"]  # type: ignore[attr-defined]
    assert rc["outcome"] == "failed"
    assert "retry count exceeded" in rc["failure_reason"]
    assert rc["messages_corrupt"] == 0 and rc["messages_verified"] > 0  # striped, SHA-256'd
    stack = live_run["stacks"]["rc"]  # type: ignore[index]
    planes = {qp.qpn: qp.plane for conn in stack.connections for qp in conn.qps()}
    errors = _events(result, "rc", "qp_error")
    assert errors and all(planes[int(str(r["target"]).split(".qp")[1])] == FAILED_PLANE
                          for r in errors)
    assert rc["failed_at_us"] > LAB["fault"][0]["at_us"]  # type: ignore[index]
    assert _events(result, "rc", "job_failed")


def test_no_socket_task_or_thread_is_left(live_run: dict[str, object]) -> None:
    assert live_run["after"] == live_run["before"]
    for stack in live_run["stacks"].values():  # type: ignore[attr-defined]
        assert stack.closed and stack.loop.is_closed()
        assert stack.fabric.transport is None and all(h._sock is None for h in stack.nics)


def test_outputs_and_capture(live_run: dict[str, object]) -> None:
    out: Path = live_run["out"]  # type: ignore[assignment]
    for name in ("timeseries.csv", "events.csv", "summary.json", "bandwidth.png"):
        assert (out / "res" / name).stat().st_size > 0
    summary = json.loads((out / "res" / "summary.json").read_text())
    assert summary["runtime"] == "live"
    path = out / "cap.mrc.pcapng"
    records = list(pcap.read_pcap(path))
    stack = live_run["stacks"]["mrc"]  # type: ignore[index]
    assert len(records) == stack.pcap.count > 100
    kinds = set()
    for _, data in records:
        pkt = wire.decode(data)  # every captured packet is a real, verifiable packet
        kinds.add(pkt.kind)
        assert pkt.da >> 96 == usid.block(pkt.plane)
    assert DATA in kinds and PROBE in kinds
    from scapy.layers.inet6 import IPv6

    from mrc import scapy_layers

    for _, data in records[:50]:
        pkt = wire.decode(data)
        if not pkt.trimmed:
            theirs = scapy_layers.from_scapy(IPv6(data))
            assert (theirs.kind, theirs.qpn, theirs.psn, theirs.ev, theirs.da) == (
                pkt.kind, pkt.qpn, pkt.psn, pkt.ev, pkt.da)
    if TSHARK is not None:
        # the live capture is the packet as described: tshark finds nothing malformed
        flagged = subprocess.run([TSHARK, "-n", "-r", str(path), "-Y",
                                  "_ws.malformed || _ws.expert.severity >= warning"],
                                 capture_output=True, text=True, timeout=60,
                                 check=True).stdout
        assert flagged == ""
        cmd = [TSHARK, "-n", "-r", str(path), "-c", "20", "-T", "fields", "-E", "separator=|",
               "-e", "ipv6.dst", "-e", "udp.dstport", "-e", "infiniband.bth.destqp",
               "-e", "infiniband.bth.psn"]
        rows = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              check=True).stdout.splitlines()
        assert len(rows) == 20
        for row, (_, data) in zip(rows, records, strict=False):
            dst, port, qpn, psn = row.split("|")
            pkt = wire.decode(data)
            assert usid.parse_address(dst.split(",")[0]) == pkt.da  # the uSID carrier
            assert port == "4791" and int(qpn, 0) == pkt.qpn and int(psn) == pkt.psn


def test_cli_runs_a_lab_live(tmp_path: Path) -> None:
    from mrc.labs.cli.run import run

    lab = tmp_path / "quick.toml"
    lab.write_text("\n".join([
        'name = "live-quick"',
        "[fabric]", "planes = 2", "hosts = 4", "hosts_per_t0 = 2", "t1_per_plane = 2",
        "[workload]", 'kind = "write_bw"', 'pairs = [["h0", "h2"]]', "bidirectional = false",
        "message_bytes = 65536", "tx_depth = 2",
        "[transport.mrc]",
        "[run]", "duration_us = 40", "bin_us = 10", "seed = 2", "grace_us = 40", ""]))
    out = tmp_path / "out"
    res = CliRunner().invoke(run, [str(lab), "--runtime", "live", "--dilation", "2000",
                                   "--out", str(out), "--pcap", str(tmp_path / "q.pcap")])
    assert res.exit_code == 0, res.output
    assert "live: modelled time x2000" in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runtime"] == "live"
    assert summary["transports"]["mrc"]["messages_verified"] > 0
    assert summary["transports"]["mrc"]["messages_corrupt"] == 0
    assert (tmp_path / "q.pcap").stat().st_size > 24
    bad = CliRunner().invoke(run, [str(lab), "--pcap-every", "3"])
    assert bad.exit_code == 2 and "--pcap-every: needs --pcap" in bad.output
    bad = CliRunner().invoke(run, [str(lab), "--pcap", "x.pcapng", "--pcap-kinds", "acks"])
    assert bad.exit_code == 2 and "--pcap-kinds: unknown kinds ['acks']" in bad.output
    bad = CliRunner().invoke(run, [str(lab), "--runtime", "live", "--bind", "192.0.2.1"])
    assert bad.exit_code == 2 and "loopback" in bad.output
    bad = CliRunner().invoke(run, [str(lab), "--runtime", "live", "--dilation", "-3"])
    assert bad.exit_code == 2 and "--dilation" in bad.output
