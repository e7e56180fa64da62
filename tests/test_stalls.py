"""The stall metric: QPs hit by a fault and for how long (mrc.labs.report.stalls)."""

from __future__ import annotations

import pytest

from mrc.labs.report.stalls import stall_stats
from mrc.labs.run.runner import run_lab
from mrc.units import PS_PER_US

US = PS_PER_US
FAULT = [{"at_us": 100.0, "until_us": 300.0}]


def _rec(gaps: list[tuple[int, int]], last: int, retx: int = -1) -> dict[str, object]:
    return {"qp": "h0/2", "gaps": gaps, "last_placed_ps": last, "sender_last_retx_ps": retx}


def test_counts_gaps_over_the_threshold_that_overlap_the_fault() -> None:
    records = [_rec([(90 * US, 250 * US)], 900 * US),   # hit: 160 us
               _rec([(10 * US, 80 * US)], 900 * US),    # before the fault
               _rec([(120 * US, 150 * US)], 900 * US),  # under the threshold
               _rec([], 900 * US)]
    out = stall_stats(records, faults=FAULT, outcome="completed", failed_at_us=None,
                      end_us=1000.0, threshold_ps=50 * US)
    assert (out["qps"], out["qps_hit"], out["hit_pct"]) == (4, 1, 25.0)
    assert out["stall_max_us"] == out["stall_median_us"] == 160.0
    assert "stall_max_real_us" not in out


def test_open_gaps_count_only_with_lost_data_and_scale_to_real_time() -> None:
    records = [_rec([], 150 * US, retx=200 * US),  # retransmitting until the job failed
               _rec([], 140 * US, retx=-1)]        # idle: waiting on the other QP
    out = stall_stats(records, faults=FAULT, outcome="failed", failed_at_us=410.0,
                      end_us=1000.0, threshold_ps=50 * US, time_scale=1e-3)
    assert out["qps_hit"] == 1 and out["stall_max_us"] == 260.0
    assert out["stall_max_real_us"] == 260_000.0


def test_no_fault_no_stall() -> None:
    out = stall_stats([_rec([(0, 500 * US)], 900 * US)], faults=[], outcome="completed",
                      failed_at_us=None, end_us=1000.0, threshold_ps=50 * US)
    assert out["qps_hit"] == 0 and out["stall_max_us"] is None


def test_a_known_stall_t0_switch_down_rc() -> None:
    """RC, t0-switch-down at seed 1 (routed fabric; NCCL's timeout 4.29 s x 2^-16 = 65.5 us, 7
    retries, adaptive): the two plane-3 QPs toward and from h0 have no path around the dead
    T0 and error retry_cnt x timeout = 458.75 us after their last progress; nothing else
    stops (the other QPs wait idle, which is no stall)."""
    result = run_lab("t0-switch-down", transports="rc", progress=False)
    stalls = result.summary["transports"]["rc"]["stalls"]
    assert (stalls["qps"], stalls["qps_hit"]) == (16, 2)
    assert 0.9 * 458.752 <= stalls["stall_max_us"] <= 458.752
    assert stalls["threshold_us"] == round(3 * result.lab.fabric.base_rtt_ps() / US, 3)
    # in real-world time: the stall / the lab's factor (2^-16): ~30 s, NCCL's 7 x 4.29 s
    assert stalls["stall_max_real_us"] == pytest.approx(stalls["stall_max_us"] * 2**16, rel=1e-3)


def test_a_flap_stalls_the_qps_that_cross_the_link() -> None:
    """RC, t0-t1-link-flap (5 flaps of 20 us) at seed 1: the far side keeps sending to the T1
    until routing withdraws it (convergence, 15.26 us at the lab's scale); the QP then waits at
    most its capped adaptive timeout (65.5 us): each stall is under convergence + timeout
    (80.8 us) and within 10% of it at the longest."""
    result = run_lab("t0-t1-link-flap", transports="rc", progress=False)
    stalls = result.summary["transports"]["rc"]["stalls"]
    bound = 15.2588 + 65.536
    assert (stalls["qps"], stalls["qps_hit"]) == (16, 2)
    assert 0.9 * bound <= stalls["stall_max_us"] <= bound


def test_the_sweep_distribution() -> None:
    import pandas as pd

    from mrc.labs.sweep.stalls import distribution_text, stall_distribution

    table = pd.DataFrame({
        "transport": ["rc", "rc", "rc", "mrc", "rc"],
        "status": ["ok", "ok", "ok", "ok", "error"],
        "stalls_hit_pct": [0.0, 12.5, 25.0, 0.0, None],
        "stalls_stall_max_us": [None, 100.0, 300.0, None, None]})
    dist = stall_distribution(table)
    assert dist["rc"]["stalls_hit_pct"] == {"runs": 3, "min": 0.0, "median": 12.5, "max": 25.0}
    assert dist["rc"]["stalls_stall_max_us"] == {"runs": 3, "min": 0.0, "median": 100.0,
                                                 "max": 300.0}
    assert dist["mrc"]["stalls_stall_max_us"]["max"] == 0.0
    text = distribution_text(table)
    assert text is not None and "0 / 12.5 / 25" in text
    assert stall_distribution(pd.DataFrame()) == {}
