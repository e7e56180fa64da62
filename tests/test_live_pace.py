"""Judging a live or kernel run's pace (mrc.labs.run.pace): each sign of a run that fell
behind its modelled clock is caught on its own, and a run that kept up is not flagged."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mrc.labs.run.pace import MAX_LAG_RTT_SHARE, MAX_LOST_PCT, judge_pace
from mrc.labs.schema.lab import Permutation
from topology.spec import preset

SPEC = preset("lab-small")  # 8 hosts, 4 planes: 32 sending ports; 7.82 us round trip
EVERY_HOST = Permutation(hosts=tuple(range(SPEC.hosts)))
RTT_US = SPEC.base_rtt_ps() / 1e6
MODEL_US = 100.0
PORT_PS = 8 * SPEC.planes * MODEL_US * 1e6  # the ports' sending time, in ps


def judged(lost_pct: float, lag_mean_us: float, kernel_drops: int = 0,
           dilation: float = 50.0, wake_late_us: float = 0.0,
           runtime: str = "live") -> dict[str, Any]:
    hosts = {"tx_lost_ps": int(lost_pct / 100 * PORT_PS), "wakes": 1000,
             "wake_late_ps": int(1000 * wake_late_us * 1e6)}
    if runtime == "live":
        run = {"model_us": MODEL_US, "hosts": hosts, "kernel_drops": kernel_drops,
               "fabric": {"lag_max_us": 3 * lag_mean_us, "lag_mean_us": lag_mean_us}}
        top = {"dilation": dilation}
    else:  # the kernel runtime's entries: its scale, its sockets' drops, no fabric lag
        run = {"model_us": MODEL_US, "hosts": hosts, "socket_drops": kernel_drops}
        top = {"scale": dilation}
    result = SimpleNamespace(lab=SimpleNamespace(fabric=SPEC, workload=EVERY_HOST),
                             summary={runtime: top, "transports": {"mrc": {runtime: run}}})
    return judge_pace(result, runtime)


def test_a_run_within_every_limit_kept_up() -> None:
    info = judged(lost_pct=0.5 * MAX_LOST_PCT, lag_mean_us=0.5 * MAX_LAG_RTT_SHARE * RTT_US)
    assert info["kept_up"] is True
    assert "suggested_dilation" not in info and "pace_warning" not in info
    assert info["pace"]["mrc"]["fabric_lag_mean_us"] == pytest.approx(
        0.5 * MAX_LAG_RTT_SHARE * RTT_US)


def test_lost_sending_time_alone_means_behind() -> None:
    info = judged(lost_pct=4 * MAX_LOST_PCT, lag_mean_us=0.0)
    assert info["kept_up"] is False
    assert info["pace"]["mrc"]["tx_lost_pct"] == pytest.approx(4 * MAX_LOST_PCT, rel=1e-3)
    assert info["suggested_dilation"] == 200  # 50 x 4, the next 1-2-5 step
    assert "lost 4.0% of their sending time" in info["pace_warning"]


def test_fabric_lag_alone_means_behind() -> None:
    """Window-limited senders lose no sending time while the fabric runs late (seen at
    --dilation 1: nothing delivered, no time lost); the lag says so."""
    lag = 10 * MAX_LAG_RTT_SHARE * RTT_US
    info = judged(lost_pct=0.0, lag_mean_us=lag)
    assert info["kept_up"] is False
    assert info["suggested_dilation"] == 500  # 50 x 10
    assert f"{lag:.3g} us late on average" in info["pace_warning"]
    assert f"{RTT_US:.3g} us unloaded round trip" in info["pace_warning"]
    assert info["pace_warning"].startswith("the live runtime fell behind")


def test_kernel_drops_alone_mean_behind_and_ask_for_at_least_twice() -> None:
    info = judged(lost_pct=0.0, lag_mean_us=0.0, kernel_drops=3)
    assert info["kept_up"] is False and info["suggested_dilation"] == 100


def test_late_timer_wake_ups_alone_mean_behind() -> None:
    """A host process that cannot keep up fires its QPs' timers late, on the kernel fabric
    the one sign of it (seen at --dilation 20: nothing delivered, 0.7% of sending time
    lost)."""
    late = 3 * MAX_LAG_RTT_SHARE * RTT_US
    info = judged(lost_pct=0.0, lag_mean_us=0.0, wake_late_us=late, runtime="kernel")
    assert info["kept_up"] is False
    assert info["pace"]["mrc"]["wake_late_mean_us"] == pytest.approx(late, rel=1e-6)
    assert "fabric_lag_mean_us" not in info["pace"]["mrc"]  # the kernel's fabric: no lag
    assert info["suggested_dilation"] == 200  # 50 x 3, the next 1-2-5 step
    assert info["pace_warning"].startswith("the kernel runtime fell behind its modelled "
                                           "clock at --dilation 50 (mrc: its hosts woke")


def test_a_kernel_run_within_every_limit_kept_up() -> None:
    info = judged(lost_pct=0.0, lag_mean_us=0.0, wake_late_us=0.01, runtime="kernel")
    assert info["kept_up"] is True and "pace_warning" not in info
