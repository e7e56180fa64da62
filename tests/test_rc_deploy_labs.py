"""Issue 15 through the labs layer: the ECN stall's regression lab, RC as deployed (lossless,
DCQCN) as the default, a stuck host's storm, and mixed runs (both transports on one fabric)."""

from __future__ import annotations

import json
from typing import Any

from mrc.labs.run.runner import run_lab

#: The lab of the issue's report: it used to end "running" with flow h6->h1 waiting for its
#: 4.3 s local ACK timeout after ECN cuts left 4 unacknowledged packets in flight.
STALL_LAB: dict[str, Any] = {
    "name": "ecn-stall",
    "fabric": {"preset": "lab-8plane", "trimming": False, "buffer_bytes": 67108864},
    "workload": {"kind": "permutation", "size_bytes": 16777216},
    "transport": {"rc": {}},
    "run": {"duration_us": 5000},
}


def _dropped(entry: dict) -> int:
    """A summary's dropped packets, every cause summed (summary.json splits them by cause)."""
    return sum(v or 0 for v in entry["dropped_packets"].values())


def _rc(lab: dict[str, Any], **rc: Any) -> dict[str, Any]:
    lab = json.loads(json.dumps(lab))
    lab["transport"] = {"rc": rc}
    return lab


def test_issue_lab_no_longer_stalls_in_the_model_that_stalled() -> None:
    """The report's configuration exactly (a lossy fabric, the AIMD window on ECN): every
    flow completes, nothing waits for a timeout, and the coalescing timer is what ACKed the
    stranded tails."""
    lab = _rc(STALL_LAB, cc="window", pfc=False)
    lab["fabric"]["pfc"] = False
    result = run_lab(lab, progress=False)
    rc = result.summary["transports"]["rc"]
    assert rc["outcome"] == "completed"
    assert rc["flows"]["completed"] == rc["flows"]["count"] == 16
    assert rc["retransmitted_packets"] == 0 and _dropped(rc) == 0
    events = result.events
    assert not (events["kind"] == "retry").any()


def test_issue_lab_as_deployed_is_lossless_with_dcqcn() -> None:
    result = run_lab(STALL_LAB, progress=False)
    rc = result.summary["transports"]["rc"]
    assert rc["outcome"] == "completed" and rc["flows"]["completed"] == 16
    assert _dropped(rc) == 0 and rc["pfc"]["lossless_overflow_drops"] == 0
    assert rc["cnps_sent"] > 0  # DCQCN was at work (ECMP collisions of the permutation)


STORM: dict[str, Any] = {
    "name": "storm-small",
    "fabric": {"preset": "lab-small"},
    "workload": {"kind": "write_bw", "pairs": [["h2", "h0"], ["h4", "h0"], ["h3", "h1"],
                                                ["h5", "h7"]],
                 "bidirectional": False, "message_bytes": 262144, "tx_depth": 4},
    "transport": {"mrc": {}, "rc": {}},
    "fault": [{"kind": "nic_stall", "target": "h0", "at_us": 100}],
    "run": {"duration_us": 400, "bin_us": 10, "grace_us": 0},
}


def test_a_stuck_host_pauses_rc_and_only_drops_mrc() -> None:
    result = run_lab(STORM, progress=False)
    mrc, rc = (result.summary["transports"][k] for k in ("mrc", "rc"))
    assert rc["pfc"]["pause_frames_sent"] > 0 and rc["pfc"]["lossless_overflow_drops"] == 0
    assert _dropped(rc) == 0  # lossless: held, never dropped
    assert mrc["pfc"]["pause_frames_sent"] == 0  # best effort: the stuck host drops instead
    assert mrc["pfc"]["stalled_host_drops"] > 0
    flows = mrc["flow_goodput_gbps"]
    assert flows["h2->h0"]["during"] == 0.0 and flows["h4->h0"]["during"] == 0.0
    for other in ("h3->h1", "h5->h7"):
        assert flows[other]["during"] > 0.9 * flows[other]["before"]
    paused = result.timeseries[(result.timeseries["transport"] == "rc")
                               & (result.timeseries["metric"] == "paused_ports")]
    # two writers share h0 (a 2-to-1 incast under DCQCN: some pauses before the stall are
    # normal); the stuck host keeps its ports paused (its XOFF is refreshed, never released)
    # once its receive buffer is full (issue 36: NVIDIA's DCQCN profile on the routed fabric
    # fills it ~210 us after the stall), and never releases them
    first = paused[paused["value"] > 0]["time_us"].min()
    assert 100 <= first < 400
    assert (paused[paused["time_us"] >= first]["value"] > 0).all()


def test_mixed_run_puts_both_transports_on_one_fabric_at_once() -> None:
    """``[run] mixed = true``: one fabric, MRC best effort and RC lossless side by side; the
    per-transport tables are still per transport, the fabric's PFC counters are shared."""
    lab = json.loads(json.dumps(STORM))
    lab["run"]["mixed"] = True
    mixed = run_lab(lab, progress=False)
    apart = run_lab(STORM, progress=False)
    m, r = (mixed.summary["transports"][k] for k in ("mrc", "rc"))
    assert m["pfc"] == r["pfc"]  # one fabric
    assert r["pfc"]["pause_frames_sent"] > 0 and r["pfc"]["lossless_overflow_drops"] == 0
    assert m["bytes_delivered"] > 0 and r["bytes_delivered"] > 0
    # sharing the wire: together they deliver less than on two fabrics of their own
    both = sum(mixed.summary["transports"][n]["bytes_delivered"] for n in ("mrc", "rc"))
    assert both < sum(apart.summary["transports"][n]["bytes_delivered"] for n in ("mrc", "rc"))
    assert set(mixed.timeseries["transport"]) == {"mrc", "rc"}
    assert {"stall_start"} <= set(mixed.events[mixed.events["transport"] == "rc"]["kind"])
    assert _dropped(m) > 0  # MRC's packets to the stuck h0
    assert _dropped(r) == 0
