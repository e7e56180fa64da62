"""``mrc-lab run LAB --runtime kernel``: the unchanged QPs over Linux seg6local switches.

The fast tests run a shortened t0-switch-down on lab-small (4 planes): MRC keeps about 3/4 of
its bandwidth and completes, RC's job fails, every message is verified by SHA-256, the fault
is applied on time and no namespace is left. The full bundled labs (lab-8plane, 1 ms
modelled, about a minute of wall time each) are slow tests. Skipped without root or SRv6.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from kernel_support import needs_kernel, no_leftovers  # noqa: F401 (fixture)

from mrc import pcap, wire
from mrc.kernel import netns
from mrc.labs.cli.run import run as run_command
from mrc.labs.errors import LabError
from mrc.labs.run.runner import run_kernel, run_lab

ROOT = Path(__file__).resolve().parents[1]
#: t0-switch-down on a 4-plane fabric, shortened: the T0 above h0 in plane 3 dies at 120 us.
SHORT = {"fabric.preset": "lab-small", "run.duration_us": 300, "fault.0.at_us": 120}


def goodput(summary: dict, name: str) -> dict:
    return summary["transports"][name]["goodput_gbps"]


@needs_kernel
@pytest.mark.usefixtures("no_leftovers")
def test_t0_switch_down_on_the_kernel_fabric(tmp_path: Path) -> None:
    """The command line's kernel runtime, both transports, with the kernel's own capture."""
    out = tmp_path / "out"
    args = ["t0-switch-down", "--runtime", "kernel", "--out", str(out),
            "--pcap", str(tmp_path / "run.pcap"), "--pcap-on", "h0.p3.uplink,h4.p0",
            *(f"--set={k}={v}" for k, v in SHORT.items())]
    result = CliRunner().invoke(run_command, args)
    assert result.exit_code == 0, result.output
    assert "through Linux seg6local switches" in result.output
    assert "trimming, ECN" in result.output
    s = json.loads((out / "summary.json").read_text())
    assert s["runtime"] == "kernel" and s["kernel"]["scale"] >= 1000
    assert any("trimming" in text for text in s["kernel"]["limits"])
    mrc, rc = s["transports"]["mrc"], s["transports"]["rc"]
    assert mrc["outcome"] == "completed" and rc["outcome"] == "failed"
    g = goodput(s, "mrc")
    assert 0.6 < g["during"] / g["before"] < 0.9  # one plane of 4 gone: about 3/4
    assert mrc["evs_marked_bad"] > 0 and mrc["trimmed_packets"] == 0
    for t in (mrc, rc):
        assert t["messages_verified"] > 0 and t["messages_corrupt"] == 0
        timing = t["kernel"]["faults"]
        assert [f["action"] for f in timing] == ["switch_down"]
        assert timing[0]["late_wall_ms"] < 1000
        assert t["kernel"]["build_s"] < 30 and t["kernel"]["hosts"]["rx_malformed"] == 0
        assert t["kernel"]["hosts"]["wakes"] > 0  # the hosts time their timers' wake-ups
    # ... and the run's pace is judged from them (live_pace: its value depends on the load)
    assert set(s["kernel"]["pace"]) == {"mrc", "rc"} and isinstance(s["kernel"]["kept_up"], bool)
    # the kernel's own capture: real packets on the chosen links, in modelled time
    records = list(pcap.read_pcap(tmp_path / "run.mrc.pcap"))
    assert len(records) == mrc["kernel"]["pcap_packets"] > 0
    packets = [wire.decode(data) for _, data in records[:50]]
    assert {p.plane for p in packets} <= {0, 3}
    assert (out / "bandwidth.png").exists()
    # a capture inside the result folder is refused up front: the folder is replaced whole
    with pytest.raises(LabError, match="pcap: is inside the output folder"):
        run_kernel("t0-switch-down", overrides=SHORT, progress=False, out=out,
                   pcap=out / "run.pcap")


@needs_kernel
@pytest.mark.usefixtures("no_leftovers")
def test_random_loss_on_a_kernel_link() -> None:
    """gray-link-loss, shortened: 20% loss on one plane-0 T0-T1 link of lab-small; MRC
    completes and keeps most of its bandwidth, and the kernel counted the loss."""
    from mrc.kernel.faults import loss_supported

    if not loss_supported():
        pytest.skip("this kernel refuses the eBPF random-drop classifier")
    result = run_kernel("gray-link-loss", transports="mrc", progress=False, overrides={
        "fabric.preset": "lab-small", "run.duration_us": 250, "fault.0.at_us": 100,
        "fault.0.probability": 0.2, "fault.0.target": "p0.t0.0--p0.t1.1"})
    mrc = result.summary["transports"]["mrc"]
    assert mrc["outcome"] == "completed" and mrc["messages_corrupt"] == 0
    assert mrc["kernel"]["fabric_drops"]["loss"] > 0
    assert [f["action"] for f in mrc["kernel"]["faults"]] == ["set_loss"]


def test_live_only_options_are_refused() -> None:
    result = CliRunner().invoke(run_command, ["t0-switch-down", "--runtime", "kernel",
                                              "--bind", "::1"])
    assert result.exit_code == 2
    result = CliRunner().invoke(run_command, ["t0-switch-down", "--pcap-on", "h0.p0"])
    assert result.exit_code == 2 and "--runtime kernel" in result.output


def test_without_privileges_one_line_and_exit_2(tmp_path: Path) -> None:
    """As root without CAP_NET_ADMIN/CAP_SYS_ADMIN (capsh drops them): one line naming
    what is missing, exit status 2, nothing built."""
    if shutil.which("capsh") is None or os.geteuid() != 0:
        pytest.skip("needs root and capsh to drop capabilities")
    code = ("from mrc.cli import main; main(['run', 't0-switch-down', '--runtime', 'kernel', "
            f"'--out', {str(tmp_path)!r}])")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = netns.listed()
    done = subprocess.run(["capsh", "--drop=cap_net_admin,cap_sys_admin", "--",
                           "-c", f'exec {sys.executable} -c "{code}"'],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "CAP_NET_ADMIN" in lines[0] and "CAP_SYS_ADMIN" in lines[0]
    assert netns.listed() == before


def test_unknown_runtime_names_kernel() -> None:
    with pytest.raises(LabError, match="sim, live, kernel"):
        run_lab("t0-switch-down", runtime="nope", progress=False)


@pytest.mark.slow
@needs_kernel
@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize("lab", ["t0-switch-down", "t1-fail-restore"])
def test_bundled_labs_match_the_simulator_qualitatively(lab: str) -> None:
    kernel = run_kernel(lab, progress=False).summary
    sim = run_lab(lab, progress=False).summary
    for s in (kernel, sim):
        assert s["transports"]["mrc"]["outcome"] == "completed"
        assert s["transports"]["rc"]["outcome"] == "failed"
    k, m = goodput(kernel, "mrc"), goodput(sim, "mrc")
    ratio_k, ratio_s = k["during"] / k["before"], m["during"] / m["before"]
    assert abs(ratio_k - ratio_s) < 0.08, (ratio_k, ratio_s)
    if lab == "t1-fail-restore":
        assert kernel["transports"]["mrc"]["evs_reintegrated"] > 0
    assert kernel["transports"]["mrc"]["messages_corrupt"] == 0
