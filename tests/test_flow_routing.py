"""RC's routed fabric in the flow model (``mrc.flow.routing``): when routing moves RC's QPs,
which QPs move, what a drain and a black hole do to RC, and what MRC does about a black
hole. The rules are ``mrc.sim.routing``'s; the cross-check (``test_flow_crosscheck.py``)
holds the resulting levels to the packet model's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrc.flow.conditions import Change
from mrc.flow.paths import rc_pins
from mrc.flow.routing import epochs
from mrc.flow.workload import build
from mrc.labs.run.crosscheck import steady_levels
from mrc.labs.run.flow import check_flow, run_flow_lab
from mrc.labs.run.runner import prepare, select_transports
from mrc.sim.routing import RoutingConfig
from mrc.stack.qpn import first_qpn
from mrc.stack.rc_connection import ecmp_t1
from mrc.units import us

_FABRIC = {"planes": 2, "hosts": 64, "hosts_per_t0": 8, "t1_per_plane": 8}


def _pairs(n: int) -> list[list[str]]:
    return [[f"h{i}", f"h{(i + 8 + 3 * i) % 64}"] for i in range(n)]


def _setup(faults: list[dict[str, Any]], ecmp: str = "resilient", seed: int = 1,
           pairs: int = 40) -> tuple[Any, ...]:
    """A small routed fabric's RC pins, layout and routing epochs for ``faults``."""
    lab = prepare({"name": "r", "fabric": _FABRIC,
                   "workload": {"kind": "write_bw", "pairs": _pairs(pairs)},
                   "transport": {"rc": {}}, "fault": faults,
                   "routing": {"ecmp": ecmp, "link_down_detect_us": 1.0,
                               "routing_convergence_us": 50.0},
                   "run": {"duration_us": 1000, "seed": seed}}, max_nic_ports=None)
    work, changes, models = check_flow(lab, select_transports(lab, None))
    spec = lab.fabric
    layout, groups = build(spec, work, changes, symmetric_t1s=False)
    pins = rc_pins(spec, groups, models[0].qps // spec.planes, seed, "exact")
    healthy = pins.entries(layout, pins.healthy(spec.t1))
    return spec, layout, groups, pins, epochs(spec, layout, groups, healthy, pins, changes,
                                              lab.routing)


def test_a_t0s_own_link_is_dropped_after_detection_the_far_side_after_convergence() -> None:
    """link_down of T0 0's link to T1 3 at 100 us: T0 0 drops it after link_down_detect_us
    (1 us here), every other T0 after routing_convergence_us (50 us); its return is used
    again after convergence, by every T0 (BGP has to advertise it)."""
    faults = [{"kind": "link_down", "target": "p0.t0.0--p0.t1.3", "at_us": 100},
              {"kind": "link_up", "target": "p0.t0.0--p0.t1.3", "at_us": 300}]
    *_, routes = _setup(faults)
    assert [t for t, _, _ in routes] == [us(101), us(150), us(350)]


def test_an_advertisement_overtaken_by_a_newer_failure_is_dropped() -> None:
    """Down at 100, up at 120, down again at 140, up at 160: the first return's
    advertisement (due at 170) is overtaken by the second failure, so it never lands; the
    second failure finds the member already withdrawn everywhere; the second return lands
    at 210."""
    faults = [{"kind": "link_flap", "target": "p0.t0.0--p0.t1.3", "at_us": 100,
               "period_us": 40, "down_us": 20, "count": 2}]
    *_, routes = _setup(faults)
    assert [t for t, _, _ in routes] == [us(101), us(150), us(210)]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(min_value=1, max_value=10_000), t1=st.integers(min_value=0, max_value=7))
def test_resilient_hashing_moves_only_the_failed_members_qps(seed: int, t1: int) -> None:
    """A T1 dies: with resilient groups every QP (DATA and ACKs) that was on it moves and no
    other does; plain groups (hash mod members) move others too."""
    faults = [{"kind": "switch_down", "target": f"p0.t1.{t1}", "at_us": 100}]
    spec, layout, groups, pins, routes = _setup(faults, seed=seed)
    assert [t for t, _, _ in routes] == [us(101)]  # every T0 sees its own link to it die
    healthy = pins.healthy(spec.t1)
    after = _pins_of(layout, pins, routes[0][1])
    on_dead = (pins.plane == 0) & (healthy == t1)
    assert (after[on_dead] != t1).all()
    assert (after[~on_dead] == healthy[~on_dead]).all()
    _, layout_p, _, pins_p, plain = _setup(faults, ecmp="plain", seed=seed)
    moved = _pins_of(layout_p, pins_p, plain[0][1]) != pins_p.healthy(spec.t1)
    assert moved.sum() >= on_dead.sum()


def _pins_of(layout: Any, pins: Any, entries: Any) -> np.ndarray:
    """Each crossing QP's T1 in ``entries`` (one QP per group and plane in these labs'
    connections: write_bw opens one QP per plane)."""
    out = np.full(len(pins.group), -1)
    cross = entries.gtype >= 0
    by = {(int(g), int(p)): int(layout.type_t1[ty]) for g, p, ty in
          zip(entries.group[cross], entries.plane[cross], entries.gtype[cross], strict=True)}
    for i, (g, p) in enumerate(zip(pins.group.tolist(), pins.plane.tolist(), strict=True)):
        out[i] = by[(g, p)]
    return out


def test_ecmp_hash_is_uniform_over_t1s() -> None:
    """The healthy routed fabric's choice (the packet model's hash) spreads QPs evenly: over
    4,096 QPNs between two hosts, each of 8 T1s gets its share within 4 standard errors."""
    spec = prepare({"name": "u", "fabric": _FABRIC, "workload": {"kind": "write_bw"},
                    "run": {"duration_us": 10}}).fabric
    q = first_qpn(1)
    counts = np.bincount([ecmp_t1(spec, 0, 9, q + i, 0) for i in range(4096)], minlength=8)
    assert np.all(np.abs(counts - 512) < 4 * np.sqrt(512 * 7 / 8))


def test_a_drain_moves_rc_before_the_power_off_and_costs_it_nothing() -> None:
    """t1-drain: routing withdraws the drained T1 after convergence, the power-off comes
    after that: RC never stalls (no retry, no dip)."""
    result = run_flow_lab("t1-drain", transports="rc")
    rc = result.summary["transports"]["rc"]
    assert rc["outcome"] == "completed"
    assert not (result.events["kind"] == "retry").any()
    levels = steady_levels(result)["rc"]
    assert levels["during"] == pytest.approx(levels["before"], rel=1e-6)


def _blackhole_lab(target: str, drain_at: float | None = None) -> dict[str, Any]:
    faults: list[dict[str, Any]] = [{"kind": "blackhole", "target": target, "at_us": 200}]
    if drain_at is not None:
        faults.append({"kind": "drain", "target": target, "at_us": drain_at})
    return {"name": "bh", "fabric": {"preset": "lab-8plane"},
            "workload": {"kind": "write_bw", "pairs": [["h0", "h4"]], "bidirectional": True},
            "transport": {"mrc": {}, "rc": {"timeout_exp": 4, "retry_cnt": 3}},
            "fault": faults,
            "routing": {"link_down_detect_us": 0.0153, "routing_convergence_us": 15.26},
            "run": {"duration_us": 700, "seed": 1}}


def _hit_t1(plane: int = 1) -> int:
    return ecmp_t1(prepare(_blackhole_lab("p1.t1.0")).fabric, 0, 4, first_qpn(1) + plane,
                   plane)


def test_a_black_hole_fails_rc_at_its_retry_budget_and_mrc_maps_it_out() -> None:
    """A T1 that forwards nothing with its links up: routing never repairs it, so the RC QP
    through it errors at its retry budget (3 x 65.536 us after the fault); MRC keeps at
    least (T1s - 1) / T1s of its healthy goodput on the plane."""
    target = f"p1.t1.{_hit_t1()}"
    result = run_flow_lab(_blackhole_lab(target))
    rc = result.summary["transports"]["rc"]
    assert rc["outcome"] == "failed"
    assert rc["failed_at_us"] == pytest.approx(200 + 3 * 65.536, abs=1e-6)
    ts = result.timeseries
    plane = ts[(ts["transport"] == "mrc") & (ts["metric"] == "goodput_gbps_p1")]
    before = plane[plane["time_us"] < 200]["value"].mean()
    settled = plane[plane["time_us"] >= 300]["value"].mean()
    assert settled >= 3 / 4 * before
    assert result.summary["transports"]["mrc"]["outcome"] == "completed"


def test_an_operator_drain_within_the_budget_saves_rc_from_a_black_hole() -> None:
    """Drained at 250 us, routing withdraws the black hole 15.26 us later, inside the
    196.6 us budget: the QP makes progress again and RC completes."""
    target = f"p1.t1.{_hit_t1()}"
    result = run_flow_lab(_blackhole_lab(target, drain_at=250), transports="rc")
    assert result.summary["transports"]["rc"]["outcome"] == "completed"


def test_routing_config_reaches_the_flow_model_time_scaled() -> None:
    """The flow model's RC carries the lab's [routing] (its repair clock)."""
    lab = prepare(_blackhole_lab("p1.t1.0"))
    _, _, models = check_flow(lab, select_transports(lab, None))
    rc = next(m for m in models if m.kind == "rc")
    assert rc.routing == RoutingConfig(link_down_detect_us=0.0153,
                                       routing_convergence_us=15.26)
    assert rc.error_after_ps == 3 * 65_536_000


def test_changes_without_routing_change_nothing() -> None:
    """Faults routing cannot see (a loss window) make no epoch."""
    *_, routes = _setup([{"kind": "loss", "target": "p0.t0.0--p0.t1.3", "at_us": 100,
                          "probability": 0.01, "duration_us": 50}])
    assert routes == []
    assert Change(0, "link_down", "p0.t0.0--p0.t1.3").family == "down"


def test_the_time_scale_reaches_rc_s_timers_in_the_flow_model() -> None:
    """``[run] time_scale`` reaches RC's timers in the flow model as in the packet model:
    the flow model's ladder and budget are ``retry_schedule`` of the very config the packet
    model's connections build (``transport_params.rc_connection``) for the scaled lab."""
    from mrc.stack import transport_params
    from mrc.transport.rc.config import retry_schedule

    def rc_model(scale: float) -> tuple[Any, Any]:
        raw = _blackhole_lab("p1.t1.0")
        raw["transport"]["rc"] = {}
        raw["run"]["time_scale"] = scale
        lab = prepare(raw)
        specs = select_transports(lab, None)
        _, _, models = check_flow(lab, specs)
        rc_spec = next(t for t in specs if t.kind == "rc")
        config = transport_params.rc_connection(lab.fabric, dict(rc_spec.params))[0]
        return next(m for m in models if m.kind == "rc"), config

    for scale in (1.0, 0.5):
        model, config = rc_model(scale)
        ladder, offsets, budget = retry_schedule(config)
        assert (model.retry_offsets, model.error_after_ps) == (offsets[0], budget)
    assert rc_model(0.5)[0].error_after_ps == rc_model(1.0)[0].error_after_ps // 2
