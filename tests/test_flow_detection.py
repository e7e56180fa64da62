"""MRC's detection delay at flow level (mrc.flow.detection): what a dead path costs before the
per-EV timer or the overdue evidence marks its EVs ASSUMED_BAD, from MrcConfig's numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mrc.flow.detection import MID_BURST, Detection, DetectParams, evidence_ps
from mrc.flow.paths import Entries, Groups
from mrc.flow.workload import step_latency_ps
from mrc.labs.run.flow import run_flow_lab
from topology.spec import preset

US = 1_000_000
P = DetectParams(ev_timeout_ps=65_536_000, overdue=True, window_ps=7.8 * US, rtt_ps=7.8 * US,
                 grace_ps=4 * US, strikes=2, mtu_bytes=4096)


def detection(groups: int = 8, planes: int = 8) -> Detection:
    g = np.arange(groups)
    grp = Groups(g, g, np.ones(groups, dtype=np.int64), np.zeros(groups, dtype=bool))
    ent = Entries(np.repeat(g, planes), np.tile(np.arange(planes), groups),
                  np.zeros(groups * planes, dtype=np.int64), np.full(groups * planes, 16.0))
    return Detection(P, grp, ent, planes)


def test_evidence_needs_the_window_a_round_trip_the_grace_and_a_second_strike() -> None:
    assert evidence_ps(P, 5 * US) == pytest.approx(7.8 * US + 7.8 * US + 4 * US + 5 * US)
    assert evidence_ps(P, 1e9) == P.ev_timeout_ps  # never later than the per-EV timer
    off = DetectParams(**{**P.__dict__, "overdue": False})
    assert evidence_ps(off, 5 * US) == P.ev_timeout_ps


def _waves(x: float, burst_ps: float, packets: float) -> tuple[int, float]:
    d = detection()
    n_good = np.full((8, 8), 16.0)
    k_dead = np.zeros((8, 8))
    k_dead[:, 1] = 4.0  # a T1 of plane 1's four: 4 of every connection's 16 EVs there
    share = np.full((8, 8), 1 / 8)
    stalls, hold, _ = d.collective_waves(x, burst_ps, packets, n_good, k_dead, share,
                                         np.ones(8, bool))
    return stalls, hold


def test_a_fault_inside_a_short_burst_costs_two_timer_waves() -> None:
    """The all-reduce's step: 128 packets (16 per plane over 16 EVs), a 5.5 us burst. The
    message in flight reaches only the EVs after the fault; the ones it had passed are hit by
    the next message, after the first timer: a second wave."""
    stalls, hold = _waves(0.5, 5.5 * US, 128)
    assert stalls == 2
    assert hold == pytest.approx(2 * P.ev_timeout_ps - 0.5 * 5.5 * US, rel=1e-6)


def test_a_fault_between_bursts_costs_one_wave() -> None:
    stalls, hold = _waves(1.3, 5.5 * US, 128)  # the next message reaches every EV
    assert stalls == 1
    assert hold == pytest.approx(P.ev_timeout_ps)


def test_a_burst_longer_than_the_timer_recovers_within_itself() -> None:
    """A long message keeps sending past its first loss: the overdue evidence resends in time
    and its end is not delayed (a stream's case; the cost is the lost share's resend)."""
    stalls, hold = _waves(0.1, 2000 * US, 64 * 1024)
    assert (stalls, hold) == (0, 0.0)


def test_the_ring_all_reduce_waits_two_timers_when_a_t1_dies() -> None:
    flow = run_flow_lab("allreduce-t1-reboot", transports="mrc")
    ev = flow.events
    row = json.loads(ev[ev["kind"] == "detection"]["detail"].iloc[0])
    assert (row["connections"], row["waves"]) == (8, 2)
    times = [json.loads(d)["time_us"] for d in
             ev[ev["kind"] == "iteration_completed"]["detail"]]
    healthy = times[1]
    # two timers, less what the burst in flight still had to send (taken at its middle)
    burst_us = healthy / 14 - step_latency_ps(preset("lab-8plane"), True) / 1e6
    assert row["held_us"] == pytest.approx(2 * 65.536 - MID_BURST * burst_us, abs=0.01)
    hit = max(times)
    assert hit == pytest.approx(healthy + row["held_us"], abs=0.01)
    assert sum(1 for x in times if x > healthy + 1) == 1  # only the iteration it hit
    # the summary's detect_us: the first EVs found by their timer (packet model: 64.1 us)
    assert flow.summary["transports"]["mrc"]["detect_us"] == pytest.approx(65.536, abs=0.01)


def test_a_stream_finds_a_dead_t1_on_overdue_evidence() -> None:
    """t1-reboot: write_bw keeps sending, so the loss is proven by later packets (packet
    model: the first EV ASSUMED_BAD 23.7 us after the fault, reason overdue, strikes=2)."""
    flow = run_flow_lab("t1-reboot", transports="mrc")
    detect = flow.summary["transports"]["mrc"]["detect_us"]
    assert 20 < detect < 32
    row = flow.events[flow.events["kind"] == "ev_state"]
    assert json.loads(row["detail"].iloc[0])["reason"] == "overdue"


def test_own_port_down_is_known_at_once() -> None:
    """nic-port-down: h0's own port: its QP is told (port_down), no detection delay; the
    peer's QP toward that port must find it."""
    flow = run_flow_lab("nic-port-down", transports="mrc")
    rows = flow.events[flow.events["kind"] == "detection"]
    assert len(rows) == 1
    assert json.loads(rows["detail"].iloc[0])["connections"] == 1
    assert flow.summary["transports"]["mrc"]["detect_us"] == 0.0  # port down: at once


def test_a_drain_costs_nothing() -> None:
    flow = run_flow_lab("t1-drain", transports="mrc")
    assert (flow.events["kind"] == "detection").sum() == 0
