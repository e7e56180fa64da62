"""The flow model's max-min solver and its symmetric bundles: textbook allocations, demands,
ties, and that grouping interchangeable links changes no rate."""

from __future__ import annotations

import numpy as np
import pytest

from mrc.flow import conditions as cond
from mrc.flow.solver import max_min


def solve(rows: list[int], cols: list[int], capacity: list[float], nvars: int,
          coef: list[float] | None = None, demand: list[float] | None = None) -> list[float]:
    c = np.ones(len(rows)) if coef is None else np.array(coef)
    d = None if demand is None else np.array(demand)
    alloc = max_min(np.array(rows), np.array(cols), c, np.array(capacity, dtype=float), nvars,
                    demand=d)
    return [round(x, 9) for x in alloc.rates.tolist()]


def test_textbook_line_network() -> None:
    # A crosses links 0 and 1; B only link 0; C only link 1; D shares link 2 with A.
    assert solve([0, 1, 0, 1, 2, 2], [0, 0, 1, 2, 0, 3], [1, 1, 10], 4) == [0.5, 0.5, 0.5, 9.5]


def test_second_level_gets_the_leftover() -> None:
    # link 1 (cap 3) limits B; A takes what B leaves on link 0 (cap 10)
    assert solve([0, 0, 1], [0, 1, 1], [10, 3], 2) == [7.0, 3.0]


def test_demand_caps_and_the_rest_fill() -> None:
    assert solve([0, 0], [0, 1], [10], 2, demand=[2, np.inf]) == [2.0, 8.0]


def test_coefficients_are_load_per_unit_rate() -> None:
    # A loads link 0 twice as much per unit (e.g. resends): equal rates, 3 A + ... = 9
    assert solve([0, 0], [0, 1], [9], 2, coef=[2, 1]) == [3.0, 3.0]


def test_a_variable_without_entries_stays_at_zero() -> None:
    assert solve([0], [0], [5], 2) == [5.0, 0.0]


def test_bundle_of_equal_links_equals_its_members() -> None:
    # two flows spread evenly over 4 parallel links of capacity 1 (plus their own access
    # links of capacity 3 and 1): per link vs one bundle of capacity 4
    rows, cols, coef = [], [], []
    for link in range(4):
        for flow in (0, 1):
            rows.append(link)
            cols.append(flow)
            coef.append(0.25)
    rows += [4, 5]
    cols += [0, 1]
    coef += [1.0, 1.0]
    members = solve(rows, cols, [1, 1, 1, 1, 3, 1], 2, coef=coef)
    bundle = solve([0, 0, 1, 2], [0, 1, 0, 1], [4, 3, 1], 2, coef=[1, 1, 1, 1])
    assert members == bundle == [3.0, 1.0]


@pytest.mark.parametrize("reintegrate", [0, 30])
def test_mrc_view_delays_ups_and_cancels_a_quick_relapse(reintegrate: int) -> None:
    changes = [cond.Change(10, "link_down", "L"), cond.Change(20, "link_up", "L"),
               cond.Change(25, "link_down", "L"), cond.Change(100, "link_up", "L")]
    view = [(c.time_ps, c.action) for c in cond.mrc_view(changes, reintegrate)]
    if reintegrate:  # back at 20 but relapsed at 25, before MRC trusted it at 50
        assert view == [(10, "link_down"), (130, "link_up")]
    else:
        assert view == [(10, "link_down"), (20, "link_up"), (25, "link_down"), (100, "link_up")]


def test_non_binding_load_takes_capacity_but_never_stops_its_variable() -> None:
    """ACKs: variable 0 sends DATA on resource 0, variable 1 sends DATA on resource 1 and a
    little ACK load on resource 0; resource 0 filling must not freeze variable 1."""
    rows = np.array([0, 1, 0])
    cols = np.array([0, 1, 1])
    coef = np.array([1.0, 1.0, 0.01])
    binds = np.array([True, True, False])
    alloc = max_min(rows, cols, coef, np.array([10.0, 100.0]), 2, binds=binds)
    assert alloc.rates[0] < 10.0 and alloc.rates[1] == pytest.approx(100.0)
    frozen = max_min(rows, cols, coef, np.array([10.0, 100.0]), 2)
    assert frozen.rates[1] < 11.0  # without binds, the ACK entry holds its sender back
