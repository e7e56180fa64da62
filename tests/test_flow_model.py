"""The flow-level model through the labs layer: the same outputs as a packet run (marked
flow-level), the packet model's definitions reused (RC pins, timers), exact symmetry
reduction, Fairwater scale, bad input and the memory refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import mrc.flow.workload as flow_workload
from mrc.cli import main
from mrc.labs.errors import LabError
from mrc.labs.run.crosscheck import steady_levels
from mrc.labs.run.flow import run_flow_lab
from mrc.labs.run.runner import run_lab
from mrc.stack.qpn import first_qpn
from mrc.stack.rc_connection import ecmp_t1
from topology.spec import preset


def t(result: Any, name: str) -> dict[str, Any]:
    return result.summary["transports"][name]


def test_t0_switch_down_flow_outputs_like_a_packet_run(tmp_path: Path) -> None:
    flow = run_flow_lab("t0-switch-down", out=tmp_path)
    mrc, rc = t(flow, "mrc"), t(flow, "rc")
    assert flow.summary["runtime"] == "flow" and flow.summary["model"] == "flow"
    # settled (the cross-check's window, 50 us on): MRC keeps 7 of 8 planes
    assert steady_levels(flow)["mrc"]["during"] == pytest.approx(
        7 / 8 * mrc["goodput_gbps"]["before"], rel=1e-3)
    # before that, h4 -> h0 loses its plane-3 share until overdue evidence finds the dead
    # T0 (h0 -> h4 is told at once: its own NIC port went down)
    row = flow.events[flow.events["kind"] == "detection"]
    detail = json.loads(row["detail"].iloc[0])
    assert (detail["connections"], detail["lost_share_max"], detail["by"]) == (
        1, 0.125, "overdue evidence")
    spec = preset("lab-8plane")
    rtt_us = spec.base_rtt_ps() / 1e6
    # one more strike: the EV's next packet, a round of the plane's 16 EVs later
    cycle_us = 16 * 4096 * 8 / (mrc["goodput_gbps"]["before"] / 2 / 8 * 1e3)
    assert detail["detected_after_us"] == pytest.approx(2 * rtt_us + 4 + cycle_us, abs=0.3)
    assert mrc["goodput_gbps"]["during"] < 7 / 8 * mrc["goodput_gbps"]["before"]
    assert mrc["outcome"] == "completed"
    # RC: stalled at 200 us, errors at its adaptive retry budget (retry_cnt 7 x the QP's
    # 65.536 us timeout at the lab's time scale) later, the job fails (the packet model:
    # 658.041 us, its QP's last progress a little before the T0 died)
    assert rc["outcome"] == "failed"
    assert rc["failed_at_us"] == pytest.approx(200 + 7 * 65.536, abs=0.01)
    assert rc["detect_us"] == pytest.approx(65.536, abs=0.01)  # the first retry
    for name in ("timeseries.csv", "events.csv", "summary.json", "bandwidth.png", "lab.json"):
        assert (tmp_path / name).is_file()
    metrics = set(flow.timeseries["metric"])
    assert {"goodput_gbps", "goodput_gbps_p0", "goodput_gbps_p7", "assumed_bad_evs"} <= metrics
    kinds = set(flow.events["kind"])
    assert {"switch_down", "retry", "qp_error", "job_failed", "ev_states"} <= kinds
    assert json.loads((tmp_path / "summary.json").read_text())["flow"]["mrc"]["path_model"]


def test_plane_split_follows_the_dead_plane() -> None:
    flow = run_flow_lab("t0-switch-down")
    ts = flow.timeseries
    plane3 = ts[(ts["transport"] == "mrc") & (ts["metric"] == "goodput_gbps_p3")]
    assert plane3[plane3["time_us"] >= 200]["value"].max() == 0.0
    assert plane3[plane3["time_us"] < 200]["value"].min() > 0.0


@pytest.mark.parametrize("target", ["p0.t1.0", "p0.t1.1", "p0.t1.2", "p0.t1.3"])
def test_routing_carries_rc_past_a_rebooting_t1(target: str) -> None:
    """The RC pins are the packet model's: a QP's DATA on the T1 its source T0 hashes it to,
    its ACKs on the one the destination T0 hashes them to (ecmp_t1 over SimStack's seeded
    QPNs: h0->h4 opens QPNs q..q+7, h4->h0 q+8..q+15, QP i on plane i mod 8). On a T1
    reboot every T0 drops its own link to it after detection (15.3 ns in this lab) and RC
    carries on: the job never fails, and it dips only where a plane-0 QP's DATA or ACKs
    crossed the T1 (a NAK's round trip later the QP makes progress again)."""
    spec = preset("lab-8plane")
    q = first_qpn(1)
    hit = {ecmp_t1(spec, 0, 4, q, 0), ecmp_t1(spec, 4, 0, q, 0),
           ecmp_t1(spec, 4, 0, q + 8, 0), ecmp_t1(spec, 0, 4, q + 8, 0)}
    # one message posted at a time, so the other QPs' backlog does not hide the dip
    rc = t(run_flow_lab("t1-reboot", overrides={"fault.0.target": target, "run.seed": 1,
                                                "workload.tx_depth": 1}), "rc")
    assert rc["outcome"] == "completed"
    dipped = rc["goodput_gbps"]["min"] < 0.9 * rc["goodput_gbps"]["before"]
    assert dipped == (int(target.rsplit(".", 1)[1]) in hit)


def _rc_t1(seed: int, src: int, plane: int = 1) -> int:
    """The T1 write_bw h0<->h4's plane-``plane`` QP from ``src`` (0 or 4) is pinned to:
    h0->h4 opens first (QPNs q..q+7), then h4->h0 (q+8..q+15), QP i on plane i mod 8."""
    q = first_qpn(seed) + (0 if src == 0 else 8) + plane
    return ecmp_t1(preset("lab-8plane"), src, 4 - src, q, plane)


def _shared_link(seed: int) -> str:
    """A T0 0 - T1 link both directions' QPs of one plane are pinned across at ``seed``
    (h0->h4 going up it, h4->h0 coming down it)."""
    plane = next(p for p in range(8) if _rc_t1(seed, 0, p) == _rc_t1(seed, 4, p))
    return f"p{plane}.t0.0--p{plane}.t1.{_rc_t1(seed, 0, plane)}"


#: The flap and degrade labs' link, moved to one both directions' QPs cross at seed 1 under
#: the routed fabric's hash (issue 36: the bundled target was chosen for the old hash)
_H0_LINK = {"fault.0.target": _shared_link(1)}


def test_flap_costs_rc_its_retry_time_and_mrc_nothing() -> None:
    # one message posted at a time: the other QPs' backlog (Backlog) is spent on the first
    # flap, before the level is measured
    flow = run_flow_lab("t0-t1-link-flap", overrides={"workload.tx_depth": 1, **_H0_LINK})
    mrc, rc = t(flow, "mrc"), t(flow, "rc")
    # MRC loses what it sprays on the link's EVs (1 of 32 per direction): with REPS for one
    # round of the plane's 16 EVs (a dead EV takes one packet and is not reused), with round
    # robin until the link is back (each 20 us flap ends before the ~25 us evidence)
    cycle_us = 16 * 4096 * 8 / (mrc["goodput_gbps"]["before"] / 2 / 8 * 1e3)
    window_us = 4 * 100 + 20
    assert mrc["goodput_gbps"]["during"] == pytest.approx(
        mrc["goodput_gbps"]["before"] * (1 - 5 * cycle_us / 32 / window_us), rel=1e-3)
    rr = t(run_flow_lab("t0-t1-link-flap", transports="mrc",
                        overrides={"transport.mrc.spray": "round_robin", **_H0_LINK}),
           "mrc")["goodput_gbps"]
    assert rr["during"] == pytest.approx(rr["before"] * (1 - 5 * 20 / 32 / window_us), rel=1e-3)
    assert rc["outcome"] == "completed"
    # RC on its routed fabric: h0->h4 goes up the link (T0 0 drops it after 15.3 ns), h4->h0
    # comes down it (T0 1 learns after convergence, 15.26 us). Each flap, one connection's QP
    # has a NAK to send into a path that is still down (its ACKs' or its DATA's way back),
    # or has sent all its posted work: it waits for its first timer, the adaptive ladder's
    # first rung (131 us) capped at its 65.536 us timeout. The packet model's retries:
    # 265.85 (h4's QP), 358.19, 464.18, 555.71 us (h0's).
    retries = flow.events[(flow.events["transport"] == "rc") & (flow.events["kind"] == "retry")]
    assert retries["time_us"].tolist() == pytest.approx(
        [200 + 100 * k + 65.536 for k in range(5)], abs=1e-6)
    assert retries["target"].tolist() == ["h4->h0"] + ["h0->h4"] * 4


def test_aggregated_all_to_all_equals_the_enumerated_one(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Grouping interchangeable hosts and T0s is exact: the same lab with every connection
    enumerated gives the same MRC rates (a T0 down and a NIC port down tell hosts apart)."""
    lab = {"name": "a2a", "fabric": {"planes": 4, "hosts": 32, "hosts_per_t0": 4,
                                     "t1_per_plane": 4},
           "workload": {"kind": "all_to_all", "sizes_bytes": [1 << 24], "iters": 3,
                        "warmup_iters": 0},
           "transport": {"mrc": {}},
           "fault": [{"kind": "switch_down", "target": "p1.t0.2", "at_us": 100},
                     {"kind": "port_down", "target": "h5.p3", "at_us": 200},
                     {"kind": "switch_reboot", "target": "p2.t1.1", "at_us": 300,
                      "duration_us": 100}],
           "run": {"duration_us": 600, "bin_us": 10}}
    enumerated = run_flow_lab(lab)
    monkeypatch.setattr(flow_workload, "ENUMERATE_LIMIT", 10)
    grouped = run_flow_lab(lab)
    assert grouped.summary["flow"]["mrc"]["groups"] < enumerated.summary["flow"]["mrc"]["groups"]
    a = enumerated.timeseries[enumerated.timeseries["metric"] == "goodput_gbps"]["value"]
    b = grouped.timeseries[grouped.timeseries["metric"] == "goodput_gbps"]["value"]
    assert np.allclose(a.to_numpy(), b.to_numpy(), rtol=1e-9)


def test_fairwater_all_to_all() -> None:
    """131,072 NICs (how long it takes is benchmarks/bench_flow.py's, not a test's)."""
    lab = {"name": "fw", "fabric": {"preset": "fairwater"},
           "workload": {"kind": "all_to_all", "sizes_bytes": [1 << 34], "iters": 2,
                        "warmup_iters": 0},
           "fault": [{"kind": "switch_down", "target": "p3.t0.7", "at_us": 100_000},
                     {"kind": "switch_reboot", "target": "p0.t1.9", "at_us": 200_000,
                      "duration_us": 300_000}],
           "run": {"duration_us": 1_000_000}}
    flow = run_flow_lab(lab)
    mrc, rc = t(flow, "mrc"), t(flow, "rc")
    assert flow.summary["flow"]["mrc"]["connections"] == 131_072 * 131_071
    # a T0 down: 256 NICs lose a plane, and the synchronous all-to-all goes at their pace,
    # after the iterations wait for the per-EV timers of the dead EVs they hit (a bin of
    # bin_us holds the job's hold)
    rows = flow.events[(flow.events["kind"] == "detection") & (flow.events["time_us"] == 100_000)]
    held_us = json.loads(rows["detail"].iloc[0])["held_us"]
    assert held_us > 0
    assert mrc["goodput_gbps"]["min"] == pytest.approx(
        7 / 8 * mrc["goodput_gbps"]["before"] * (1 - held_us / flow.lab.run.bin_us), rel=2e-3)
    assert rc["outcome"] == "running"  # stalled: NCCL's 4.3 s x 8 error is beyond the run


def test_memory_estimate_refuses_before_allocating() -> None:
    with pytest.raises(LabError, match="fabric: the flow model needs about"):
        run_flow_lab("t0-switch-down", max_bytes=1000)


def test_cli_model_flow(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["run", "t1-reboot", "--model", "flow", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "rc" in res.output and (tmp_path / "bandwidth.png").is_file()
    bad = runner.invoke(main, ["run", "t1-reboot", "--model", "flow", "--runtime", "live"])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines()[-1].startswith("mrc-lab: error: --model:")
    # the re-convergence shorthand is gone (routing repairs RC's paths): an unknown key
    reroute = runner.invoke(main, ["run", "t1-reboot", "--model", "flow", "--set",
                                   "transport.rc.reroute_after_us=100"])
    assert reroute.exit_code == 2
    assert "transport.rc.reroute_after_us" in reroute.output


def test_packet_model_still_refuses_fairwater_and_points_at_flow() -> None:
    with pytest.raises(LabError, match="--model flow"):
        run_lab({"name": "big", "fabric": {"preset": "fairwater"},
                 "workload": {"kind": "write_bw"}, "run": {"duration_us": 10}})


def test_nic_stall_mrc_loses_only_the_stuck_hosts_traffic() -> None:
    """pfc-storm for MRC: h0 stops draining at 200 us; the three flows into it stop, the four
    others keep their rate (MRC runs best effort: nothing is paused)."""
    flow = run_flow_lab("pfc-storm", transports="mrc")
    mrc = t(flow, "mrc")["goodput_gbps"]
    # before: h0's port shared by three senders (one port's worth) plus four full flows
    assert mrc["during"] == pytest.approx(4 / 5 * mrc["before"], rel=1e-3)


@pytest.mark.parametrize(("args", "key"), [
    (["pfc-storm"], "fault.0.kind"),  # RC on a PFC fabric: a PFC storm
    (["t1-reboot", "--set", "fault.0.kind=ev_deny", "--set", "fault.0.target=all",
      "--set", "fault.0.deny_mask=255", "--set", "fault.0.deny_value=1",
      "--set", "fault.0.duration_us=100"], "fault.0.kind"),
    (["t1-reboot", "--set", "run.mixed=true"], "run.mixed"),
    (["t1-reboot", "--set", "transport.rc.qps_per_plane=2",
      "--set", "transport.rc.split_data_on_qps=false"], "transport.rc.split_data_on_qps"),
])
def test_what_the_flow_model_does_not_model_is_refused_in_one_line(args: list[str],
                                                                   key: str) -> None:
    res = CliRunner().invoke(main, ["run", *args, "--model", "flow"])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in res.output


def test_stall_without_pfc_fails_rc_after_its_retries() -> None:
    """Without PFC the stuck host drops RC's packets too: the QPs into it stall and the job
    fails at stall + its adaptive retry budget, retry_cnt x timeout (65.5 us x 3 here)."""
    flow = run_flow_lab("pfc-storm", overrides={"fabric.pfc": False,
                                                "transport.rc.timeout_exp": 4,
                                                "transport.rc.retry_cnt": 3})
    rc = t(flow, "rc")
    assert rc["outcome"] == "failed"
    assert rc["failed_at_us"] == pytest.approx(200 + 3 * 4.096 * 2**4, rel=1e-9)


def test_dcqcn_climbs_back_as_dcqcn_does_after_a_degrade() -> None:
    """RC as deployed, after the degrade ends. NVIDIA's profile (the default) keeps its
    target at the line while the link holds it (it clamps only after a timer increase, and
    the cuts restart its 300 us timer): fast recovery halves the way back at each
    byte-counter step, so RC is back near the line within the window (the packet model:
    1400 of 1559 Gb/s; here 1413 of 1556). The paper's profile clamps the target at every
    cut and climbs by 40 Mb/s steps: RC stays at its degraded share (packet: 255 Gb/s)."""
    nvidia = t(run_flow_lab("degraded-link", overrides=_H0_LINK), "rc")["goodput_gbps"]
    assert nvidia["after"] == pytest.approx(nvidia["before"], rel=0.10)
    assert nvidia["during"] < 0.3 * nvidia["before"]
    paper = t(run_flow_lab("degraded-link", overrides={
        "transport.rc.dcqcn_profile": "paper", **_H0_LINK}), "rc")["goodput_gbps"]
    assert paper["after"] == pytest.approx(paper["during"], rel=0.02)


def test_gray_loss_slows_only_the_connection_whose_qp_crosses_the_link() -> None:
    """Seed 5: the lossy link is the one down to h0's T0 from the T1 h4->h0's plane-1 QP is
    pinned to, which h0->h4's plane-1 QP does not take: only h4->h0 slows."""
    t1 = _rc_t1(5, 4)
    assert t1 != _rc_t1(5, 0)
    rc = t(run_flow_lab("gray-link-loss", seed=5,
                        overrides={"fault.0.target": f"p1.t0.0--p1.t1.{t1}"}), "rc")["goodput_gbps"]
    half = rc["before"] / 2
    assert rc["during"] - half == pytest.approx(0.64 * half, rel=0.05)


def test_sweep_refuses_a_flow_point_too_large_before_any_run(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    from mrc.flow import model as flow_model
    from mrc.labs.sweep.file import load_sweep

    monkeypatch.setattr(flow_model, "_BYTES_PER_ENTRY", 10**12)
    with pytest.raises(LabError, match="the flow model needs about"):
        load_sweep({"lab": "t1-reboot", "model": "flow", "grid": {"run.seed": [1, 2]}},
                   base_dir=tmp_path)


def test_a_slow_switch_is_slow_not_down() -> None:
    """``degrade`` on a switch slows every link of it (issue 18's slow T1s): MRC's flows share
    what is left (the capacity share of mrc.labs.report.ideal), RC's QPs through it crawl, nobody
    fails."""
    healthy = t(run_flow_lab("degraded-t1s", overrides={"fault": []}), "mrc")["flows"]
    slow = run_flow_lab("degraded-t1s")
    mrc, rc = t(slow, "mrc"), t(slow, "rc")
    # (RC's QPs through the slow T1 may not finish inside the run: "running", never failed;
    # which QPs cross it is the routed fabric's hash, issue 36)
    assert mrc["outcome"] == "completed" and rc["outcome"] in ("completed", "running")
    assert mrc["flows"]["max_fct_us"] == pytest.approx(
        healthy["max_fct_us"] * 8 / 7.25, rel=2e-3)
    t0 = run_flow_lab("degraded-t1s", overrides={"fault": [
        {"kind": "degrade", "target": "p0.t0.3", "at_us": 0, "rate_fraction": 0.25}]})
    assert t(t0, "mrc")["flows"]["max_fct_us"] == pytest.approx(
        healthy["max_fct_us"] * 4, rel=2e-2)  # its hosts' own links at a quarter
