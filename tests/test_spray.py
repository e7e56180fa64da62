"""Path-aware spraying (mrc.transport.mrc.spray): which deliveries recycle their EV, and a
small version of the slow-T1 scenario (issue 18) against the ideal (mrc.labs.report.ideal)."""

from __future__ import annotations

import dataclasses

import pytest

from mrc.labs.report.ideal import capacity_share, flow_ideal_us, healthy_fct_us
from mrc.labs.run.runner import run_lab
from mrc.labs.schema.lab import ConnectionMatrix, Flow
from mrc.labs.schema.lab_file import load_lab, validate
from mrc.labs.sweep.file import load_sweep
from mrc.sim import faults
from mrc.stack.stack import SimStack
from mrc.transport.base import PathChoice
from mrc.transport.mrc import MrcConfig, MrcQueuePair
from mrc.transport.mrc.config import CcConfig
from topology import usid
from topology.spec import FabricSpec

US = 1_000_000


def qp(**kw: object) -> MrcQueuePair:
    evs = [PathChoice(usid.make_ev(0, t1, 0), 0, t1, t1 + 1) for t1 in range(4)]
    cfg = MrcConfig(cc=CcConfig(base_rtt=10_000), **kw)  # type: ignore[arg-type]
    return MrcQueuePair(2, 0, 1, 3, 4096, evs, config=cfg)


def recycled(q: MrcQueuePair) -> list[int]:
    return [e.t1 for e in q._sender.spray._planes[0].recycle]


def test_clean_deliveries_recycle_slow_and_marked_ones_do_not() -> None:
    q = qp()
    spray = q._sender.spray
    a, b, c, d = q._path_manager.evs
    spray.feedback(0, a, 10 * US, False)  # the first sample: the unloaded RTT
    assert spray._floor == 10 * US and spray._margin == 3 * US  # slow_margin_rtts = 0.3
    spray.feedback(1, b, 12 * US, False)  # within the margin: recycled
    spray.feedback(2, c, 16 * US, False)  # 6 us over the QP's usual: a slow path
    spray.feedback(3, d, 10 * US, True)  # CE-marked: never recycled (REPS)
    spray.feedback(4, a, -1, False)  # which transmission arrived is unknown: recycled
    assert recycled(q) == [0, 1, 0]
    assert (c.slow, d.slow, q.stats.slow_deliveries) == (1, 0, 1)
    assert spray.slow_after() == spray._ref + spray._margin


def test_without_path_awareness_reps_recycles_every_unmarked_delivery() -> None:
    q = qp(path_aware=False)
    spray = q._sender.spray
    a, b, c, d = q._path_manager.evs
    spray.feedback(0, a, 10 * US, False)
    spray.feedback(1, c, 60 * US, False)
    spray.feedback(2, d, 10 * US, True)
    assert recycled(q) == [0, 2]
    assert q.stats.slow_deliveries == 0
    assert spray.slow_after() > 1 << 60


def test_the_running_median_ignores_a_slow_minority() -> None:
    q = qp()
    spray = q._sender.spray
    evs = q._path_manager.evs
    for k in range(2000):
        slow = k % 8 == 0  # one packet in eight takes 40 us longer
        spray.feedback(k, evs[k % 4], (52 if slow else 12) * US, False)
    assert 12 * US - spray._step <= spray._ref <= 13 * US


def test_a_queue_every_path_shares_is_not_one_slow_path() -> None:
    """The incast case: every delivery gets slower at once; the median trails, but what the
    QP's fastest paths deliver right now is the yardstick for the window rule."""
    q = qp()
    spray = q._sender.spray
    evs = q._path_manager.evs
    for k in range(64):  # the usual: 10 us, every 0.1 us
        spray.feedback(k * US // 10, evs[k % 4], 10 * US, False)
    assert spray.slow_after() == spray._ref + spray._margin
    t = 64 * US // 10
    for k in range(24):  # a shared queue builds: every path at 20 us for 2.4 us
        spray.feedback(t + k * US // 10, evs[k % 4], 20 * US, False)
    assert spray._ref < 14 * US  # the median has not caught up ...
    assert spray.slow_after() == 20 * US + spray._margin  # ... the recent minimum has
    # one path alone slow while the others still deliver at 10 us: the median rules
    for k in range(20):
        spray.feedback(t + 3 * US + k * US // 10, evs[k % 4], 10 * US, False)
    assert spray.slow_after() == spray._ref + spray._margin


def test_slow_after_bounds_the_rtt_and_is_unbounded_before_any_sample() -> None:
    q = qp()
    assert q._sender.spray.slow_after() > 1 << 60


def test_round_robin_policy_still_spreads_evenly() -> None:
    q = qp(spray="round_robin")
    q.post_write(0, 1, 8 * 4096)
    evs = [q.poll(0, 0).ev for _ in range(8)]  # type: ignore[union-attr]
    assert sorted(evs) == sorted([e.ev for e in q._path_manager.evs] * 2)


def planes_qp(**kw: object) -> MrcQueuePair:
    """Three planes, two EVs each."""
    evs = [PathChoice(usid.make_ev(p, t1, 0), p, t1, 10 * p + t1 + 1)
           for p in range(3) for t1 in range(2)]
    cfg = MrcConfig(cc=CcConfig(base_rtt=10_000), **kw)  # type: ignore[arg-type]
    return MrcQueuePair(2, 0, 1, 3, 4096, evs, config=cfg)


def test_the_last_window_skips_a_plane_whose_packets_would_arrive_last() -> None:
    q = planes_qp()
    spray = q._sender.spray
    good = q._sender.good
    first = [good[p][0] for p in range(3)]
    spray.feedback(0, first[0], 10 * US, False)  # the unloaded RTT: margin 3 us
    spray.feedback(1, first[1], 11 * US, False)
    spray.feedback(2, first[2], 20 * US, False)  # plane 2: a queue 10 us longer
    ref = spray._ref
    window = 1_000_000
    late = spray.declines
    # the fastest plane is never late; a plane within the margin is not either
    assert not late(3, 0, 0, window) and not late(3, 1, 0, window)
    # plane 2 is late while what is left takes less than its extra delay to send...
    assert late(3, 2, 0, window)
    assert late(3, 2, window // 2, window) == (20 * US > 13 * US + ref // 2)
    # ...and not once the rest takes longer (its packet is not the last to arrive)
    assert not late(3, 2, window - 1, window)
    # an age older than one unloaded RTT says nothing of the queue now: try it again
    assert not late(3 + 10 * US, 2, 0, window)
    # the fastest plane counts only with a GOOD EV: without plane 0, plane 1 sets the pace
    good[0], plane0 = [], good[0]  # (the path manager's list: the spray reads it)
    assert not late(3, 0, 0, window)
    assert late(3, 2, 0, window)
    good[0] = plane0


def test_a_qp_in_its_last_window_leaves_the_late_plane_to_the_others() -> None:
    for aware in (True, False):
        q = planes_qp(path_aware=aware)
        snd = q._sender
        good = snd.good
        for p, age in ((0, 10 * US), (1, 10 * US), (2, 25 * US)):
            snd.spray.feedback(0, good[p][0], age, False)
        q.post_write(1, 1, 2 * 4096)  # far less than a window: the QP's last window
        assert snd.unsent == 2 * 4096
        late = q.poll(1, 2)
        assert (late is None) == aware
        assert q.poll(1, 0) is not None
        assert snd.unsent == (4096 if aware else 0)


# ====================================================================== a small fabric
def small_lab(size: int = 2_000_000) -> dict:
    """A small version of degraded-t1s: 32 hosts, 4 T0 x 8, 8 T1, one T1 at 25%."""
    return {
        "name": "small-degraded-t1",
        "fabric": {"planes": 1, "hosts": 32, "hosts_per_t0": 8, "t1_per_plane": 8,
                   "link_gbps": 100.0, "link_delay_ns": 1000.0, "switch_latency_ns": 0.0,
                   "mtu_bytes": 4096},
        "workload": {"kind": "permutation", "size_bytes": size},
        "transport": {"mrc": {}},
        "fault": [{"kind": "degrade", "target": "p0.t1.0", "at_us": 0, "rate_fraction": 0.25}],
        "run": {"duration_us": 3000, "bin_us": 10, "seed": 1},
    }


def test_a_slow_t1_is_sprayed_around_and_flows_finish_near_the_ideal() -> None:
    aware = run_lab(small_lab(), progress=False).summary["transports"]["mrc"]
    blind = run_lab(small_lab(), progress=False,
                    overrides={"transport.mrc.path_aware": False}).summary["transports"]["mrc"]
    assert aware["flows"]["ideal_fct_us"] == pytest.approx(171.82 / (7.25 / 8), abs=0.01)
    assert aware["flows"]["completed"] == 32
    # no packet lost, no EV taken for dead: the slow path is slow, not broken
    assert aware["retransmitted_packets"] == 0 and aware["evs_marked_bad"] == 0
    assert aware["flows"]["max_vs_ideal"] <= 1.10
    # REPS alone keeps feeding the slow T1, whose late packets then look lost
    assert blind["evs_marked_bad"] > 0
    assert blind["flows"]["max_vs_ideal"] > aware["flows"]["max_vs_ideal"] + 0.1


# ====================================================================== ideal and fault
def test_capacity_share_and_ideal_of_slow_t1s() -> None:
    lab = load_lab("degraded-t1s")
    assert healthy_fct_us(lab.fabric, 2_000_000) == pytest.approx(171.82, abs=0.01)
    assert capacity_share(lab) == pytest.approx(7.25 / 8)
    assert flow_ideal_us(lab) == pytest.approx(189.60, abs=0.01)
    raw = dict(lab.raw)
    raw["fault"] = [{"kind": "degrade", "target": f"p0.t1.{k}", "at_us": 0,
                     "rate_fraction": 0.25} for k in range(4)]
    assert flow_ideal_us(validate(raw, name="k4")) == pytest.approx(274.91, abs=0.01)
    raw["fault"] = [{"kind": "degrade", "target": "p0.t0.3--p0.t1.5", "at_us": 0,
                     "rate_fraction": 0.5}]
    assert capacity_share(validate(raw, name="link")) == pytest.approx(7.5 / 8)  # T0 3's
    raw["fault"] = [{"kind": "degrade", "target": "p0.t1.0", "at_us": 50,
                     "rate_fraction": 0.25}]
    assert capacity_share(validate(raw, name="later")) == 1.0  # not there at the start


def test_only_flows_of_one_size_and_one_start_have_an_ideal() -> None:
    lab = load_lab("degraded-t1s")
    one = (Flow(0, 9, 2_000_000, 0.0, 1), Flow(9, 0, 2_000_000, 0.0, 2))
    same = dataclasses.replace(lab, workload=ConnectionMatrix(one, 128))
    assert flow_ideal_us(same) == pytest.approx(189.60, abs=0.01)
    mixed = (one[0], Flow(9, 0, 1_000_000, 0.0, 2))
    assert flow_ideal_us(dataclasses.replace(lab, workload=ConnectionMatrix(mixed, 128))) is None
    triggered = (Flow(0, 9, 2_000_000, None, 1, trigger=1),)
    assert flow_ideal_us(
        dataclasses.replace(lab, workload=ConnectionMatrix(triggered, 128))) is None


def test_the_sweep_over_slow_t1s_expands_to_four_labs() -> None:
    sweep = load_sweep("sweep-degraded-t1s")
    counts = [len(run.lab["fault"]) for run in sweep.runs]
    assert counts == [0, 1, 2, 4]


def test_degrading_a_switch_slows_every_link_of_it_both_ways() -> None:
    spec = FabricSpec(planes=1, hosts=8, hosts_per_t0=2, t1_per_plane=2, link_gbps=100.0)
    stack = SimStack(spec)
    record = faults.degrade(stack.net, "p0.t1.1", 0.25)
    ports = [p for p in stack.net.ports.values() if "p0.t1.1" in p.name]
    assert len(ports) == 2 * spec.t0_per_plane
    assert all(p.bps == 25 * 10**9 for p in ports)
    assert record.target == "p0.t1.1" and len(record.effect["rate_bps"]) == len(ports)
    assert all(p.bps == 100 * 10**9 for p in stack.net.ports.values() if "t1.0" in p.name)
    faults.degrade(stack.net, "p0.t1.1", 1.0)  # what a lab's degrade_end does
    assert all(p.bps == 100 * 10**9 for p in ports)
