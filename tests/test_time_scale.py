"""run.time_scale: one factor on exactly the declared real-world timers, to the picosecond."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrc.knobs import real_timers, scale_timers, scaled_ps
from mrc.labs.errors import LabError
from mrc.labs.run.runner import prepare, select_transports
from mrc.labs.schema.lab_file import load_lab
from mrc.stack import transport_params as tp
from mrc.transport.mrc.config import TIMEOUT_UNIT_PS, MrcConfig
from mrc.transport.rc.config import LOCAL_ACK_UNIT_PS, RcConfig


def _others(config: object) -> dict[str, object]:
    skip = {*real_timers(config), "time_scale"}
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in skip}  # type: ignore[call-overload]


def test_the_declared_timers() -> None:
    assert real_timers(RcConfig) == ("timeout_exp",)
    # MRC reacts on its own microsecond evidence: its QP watchdog (1.07 s) must stay far
    # above it, as at full scale, so it is not a lab's scaled timer
    assert real_timers(MrcConfig) == ()
    from mrc.sim.routing import RoutingConfig
    assert real_timers(RoutingConfig) == ("link_down_detect_us", "routing_convergence_us")


def test_rc_timeout_to_the_picosecond() -> None:
    rc = scale_timers(RcConfig(timeout_exp=20, retry_cnt=7), 1e-3)
    assert rc.timeout_ps == 4_294_967_296  # 4.096 us x 2^20 x 1e-3, exactly
    assert rc.error_after_ps == 7 * 4_294_967_296  # adaptive: retry_cnt timeouts
    assert rc.timeout_exp == 20 and rc.time_scale == 1e-3
    assert _others(rc) == _others(RcConfig(timeout_exp=20, retry_cnt=7))


def test_mrc_qp_timeout_to_the_picosecond() -> None:
    base = MrcConfig(timeout=20, retry_exp_cnt=2)
    cfg = scale_timers(base, 2**-10)
    assert cfg == base  # no scaled timer: the watchdog stays at full scale
    assert cfg.timeout_ps == TIMEOUT_UNIT_PS << 20


def test_factor_one_is_the_config_itself() -> None:
    rc = RcConfig()
    assert scale_timers(rc, 1.0) is rc
    assert rc.timeout_ps == LOCAL_ACK_UNIT_PS << 20


@dataclasses.dataclass(frozen=True)
class _Routing:  # a config without knobs names its timers in REAL_TIMERS
    REAL_TIMERS = ("detect_us", "converge_ps")
    detect_us: float = 1000.0
    converge_ps: int = 10**12
    mode: str = "resilient"
    other_us: float = 5.0


def test_a_config_names_its_timers_in_a_tuple() -> None:
    out = scale_timers(_Routing(), 1e-3)
    assert (out.detect_us, out.converge_ps, out.other_us, out.mode) == (1.0, 10**9, 5.0,
                                                                       "resilient")


@settings(max_examples=60, deadline=None)
@given(exp=st.integers(1, 31), factor=st.floats(1e-9, 1.0, exclude_min=False))
def test_scaled_timeout_is_the_rounded_product(exp: int, factor: float) -> None:
    rc = scale_timers(RcConfig(timeout_exp=exp), factor)
    assert rc.timeout_ps == scaled_ps(LOCAL_ACK_UNIT_PS << exp, factor)
    exact = (LOCAL_ACK_UNIT_PS << exp) * factor
    assert abs(rc.timeout_ps - exact) <= 0.5 + 1e-9 * exact or (exact < 1 and rc.timeout_ps == 1)
    assert _others(rc) == _others(RcConfig(timeout_exp=exp))


def test_the_lab_key_reaches_the_builders() -> None:
    lab = prepare("t1-reboot", overrides={"run.time_scale": 0.5})
    specs = {s.kind: s for s in select_transports(lab, None)}
    rc, _ = tp.rc_config(lab.fabric, dict(specs["rc"].params))
    mrc = tp.mrc_config(lab.fabric, dict(specs["mrc"].params))
    assert rc.timeout_ps == (LOCAL_ACK_UNIT_PS << 20) // 2
    assert mrc.timeout_ps == TIMEOUT_UNIT_PS << 20  # not a scaled timer
    plain = {s.kind: s for s in select_transports(load_lab("gray-link-loss"), None)}
    assert "time_scale" not in plain["rc"].params  # factor 1: the parameters as written


@pytest.mark.parametrize("value", [0, -1, 1.5, "fast"])
def test_a_bad_factor_names_the_key(value: object) -> None:
    with pytest.raises(LabError) as err:
        prepare("t1-reboot", overrides={"run.time_scale": value})
    assert err.value.key == "run.time_scale"


def test_time_scale_is_not_a_transport_key() -> None:
    with pytest.raises(LabError) as err:
        prepare("t1-reboot", overrides={"transport.rc.time_scale": 0.5})
    assert err.value.key == "transport.rc.time_scale"


def test_a_scaled_lab_is_the_unscaled_lab_with_the_timers_it_stands_for() -> None:
    """t0-switch-down (RC fails at its retry budget): RC at timeout_exp 21 and routing timers
    twice the file's, scaled by 2^-17, run the same timers as the file's exponent 20 at 2^-16:
    the same run, to the byte of the event log, and the stall is twice as long in real-world
    time; the table and the plot title state the factor."""
    from mrc.labs.report.plot import _bandwidth_title
    from mrc.labs.run.runner import run_lab

    plain = run_lab("t0-switch-down", transports="rc", progress=False)
    scaled = run_lab("t0-switch-down", transports="rc", progress=False,
                     overrides={"transport.rc.timeout_exp": 21, "run.time_scale": 2**-17,
                                "routing.link_down_detect_us": 2000.0,
                                "routing.routing_convergence_us": 2_000_000.0})
    a, b = plain.summary["transports"]["rc"], scaled.summary["transports"]["rc"]
    assert a["failed_at_us"] is not None and b["failed_at_us"] == a["failed_at_us"]
    assert plain.events.equals(scaled.events)
    assert b["stalls"]["stall_max_us"] == a["stalls"]["stall_max_us"]
    assert abs(b["stalls"]["stall_max_real_us"] - 2 * a["stalls"]["stall_max_real_us"]) <= 1.0
    assert scaled.summary["time_scale"]["factor"] == 2**-17
    assert "time scale" in scaled.table()
    assert "real-world timers x" in _bandwidth_title(scaled.summary, None, None, ())


def test_a_timer_pushed_below_the_rtt_is_named() -> None:
    """RC's 65.536 us timer (exponent 4) x 0.05 = 3.3 us, below lab-8plane's 7.8 us RTT: the
    summary names it and the table warns; the routing timers (1 ms, 1 s) stay above."""
    from mrc.labs.report.table import comparison_table
    from mrc.labs.run.time_scale import summary_block

    lab = prepare("gray-link-loss", overrides={"run.time_scale": 0.05,
                                               "transport.rc.timeout_exp": 4})
    block = summary_block(lab, list(lab.transports.values()))
    assert block["below_rtt"] == [{"timer": "rc.timeout_exp", "full_us": 65.536,
                                   "scaled_us": 3.2768}]
    assert block["scaled"]["rc"] == ["timeout_exp"] and not block["scaled"].get("mrc")
    assert block["scaled"]["routing"] == ["link_down_detect_us", "routing_convergence_us"]
    text = comparison_table({"time_scale": block, "transports": {}})
    assert "warning: time scale 0.05 takes rc.timeout_exp (65.536 us) below the base RTT" in text
