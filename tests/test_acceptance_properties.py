"""Acceptance item 7 (issue 3): random fault schedules against one MRC connection.

* Schedules that keep at least one path of the pair continuously up never lose, duplicate
  or corrupt a delivered byte, and never error the QP (even with short timers).
* A schedule that then cuts every path ends in a QP error, every WRITE is reported, and no
  partially delivered WRITE is reported complete.

Runs on lab-small (4 planes x 4 T1) through the real simulator; the scenario helpers are
:mod:`mrc.acceptance.schedules`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mrc.acceptance as acc
from mrc.sim import faults
from mrc.stack.stack import SimStack
from topology import preset

SPEC = preset("lab-small")
SRC, DST = 0, 2  # under different T0s: 16 paths (4 planes x 4 T1)
MB = 1 << 20
FAST = settings(max_examples=50, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
CUTS = settings(FAST, max_examples=30)
THOROUGH = settings(FAST, max_examples=300)


@st.composite
def schedules(draw: st.DrawFn, max_episodes: int = 8, horizon_us: int = 400
              ) -> tuple[tuple[int, int], list[Any]]:
    """(protected (plane, t1), faults): episodes on any element of the pair's paths but the
    protected path's, so that path stays up the whole time."""
    keep = (draw(st.integers(0, SPEC.planes - 1)), draw(st.integers(0, SPEC.t1 - 1)))
    protected = acc.path_elements(SPEC, SRC, DST, *keep)
    candidates = [e for e in acc.pair_elements(SPEC, SRC, DST) if e[1] not in protected]
    faults: list[Any] = []
    for _ in range(draw(st.integers(0, max_episodes))):
        kind, name = draw(st.sampled_from(candidates))
        effect = "down" if kind == "switch" else draw(st.sampled_from(("down", "loss",
                                                                       "degrade")))
        value = {"down": st.just(0.0), "loss": st.sampled_from((0.01, 0.1, 0.5, 1.0)),
                 "degrade": st.sampled_from((0.1, 0.25, 0.5))}[effect]
        start = draw(st.integers(0, horizon_us))
        duration = draw(st.none() | st.integers(1, horizon_us))
        faults += acc.episode(kind, name, effect, start, duration, draw(value))
    return keep, faults


messages = st.lists(st.tuples(st.integers(0, 300),
                              st.sampled_from((1, 4095, 4096, 4097, 65_536, 300_000, 2 * MB))),
                    min_size=1, max_size=5)


def check_one_path_up(schedule: list[Any], writes: list[tuple[int, int]]) -> None:
    # a 4 MB WRITE at t=0 keeps every path busy while the faults come and go
    out = acc.run_schedule(schedule, [(0, 4 * MB), *writes], SPEC, SRC, DST)
    assert not out.failed, out.failure_reason
    assert out.unreported == 0, "a WRITE never completed (lost bytes)"
    assert out.completed_ok == out.messages
    assert out.corrupt == 0
    assert out.bytes_delivered == out.bytes_posted  # unique bytes placed: no loss, no double
    assert out.receiver_bad_packets == 0


def check_cut(schedule: list[Any], writes: list[tuple[int, int]], cut_us: float) -> None:
    out = acc.run_schedule(schedule, writes, SPEC, SRC, DST, cap_us=5_000)
    assert out.failed and "retries exhausted" in (out.failure_reason or "")
    assert out.failed_at_us is not None
    assert cut_us <= out.failed_at_us <= cut_us + acc.schedule_error_after_us(SPEC) + 50
    assert out.unreported == 0  # every WRITE reported: complete or failed
    assert out.ok_after_failure == 0
    assert out.corrupt == 0
    assert out.reported_failed >= 1
    # bytes placed beyond the completed WRITEs belong to WRITEs reported failed
    assert out.bytes_delivered > out.bytes_ok


@FAST
@given(schedules(), messages)
def test_one_path_up_never_loses_duplicates_or_corrupts(
        plan: tuple[tuple[int, int], list[Any]], writes: list[tuple[int, int]]) -> None:
    check_one_path_up(plan[1], writes)


@CUTS
@given(schedules(max_episodes=4, horizon_us=100), st.sampled_from(acc.CUTS),
       st.integers(20, 150),
       st.lists(st.tuples(st.integers(0, 100), st.sampled_from((1, 4096, 100_000))),
                max_size=3))
def test_cutting_every_path_errors_and_reports_no_partial_write(
        plan: tuple[tuple[int, int], list[Any]], how: str, cut_us: int,
        small: list[tuple[int, int]]) -> None:
    schedule = acc.cut_schedule(SPEC, SRC, DST, plan[1], how, cut_us)
    # a 16 MB WRITE needs >= 340 us at full rate: it is in flight when the cut comes
    check_cut(schedule, [(0, 16 * MB), *small], cut_us)


@pytest.mark.parametrize("how", acc.CUTS)
def test_each_cut_leaves_no_path(how: str) -> None:
    net = SimStack(SPEC).net
    for _, action, target, params in acc.cut_every_path(SPEC, SRC, DST, how, 0.0):
        faults.apply(net, action, target, **params)
    for plane in range(SPEC.planes):
        for t1 in range(SPEC.t1):
            links = [n for n in acc.path_elements(SPEC, SRC, DST, plane, t1) if "--" in n]
            assert any(not net.link(n).is_up for n in links), (how, plane, t1)


@pytest.mark.slow
@THOROUGH
@given(schedules(), messages)
def test_one_path_up_thorough(plan: tuple[tuple[int, int], list[Any]],
                              writes: list[tuple[int, int]]) -> None:
    check_one_path_up(plan[1], writes)
