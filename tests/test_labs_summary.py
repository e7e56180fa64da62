"""summary.json maths on hand-made timeseries whose answers are known."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from mrc.labs.report import summary as s

BIN = 10.0


def series(values: dict[tuple[float, float], float], end: float = 1000.0) -> pd.Series:
    """Goodput per 10 us bin: ``{(start, stop): value}`` ranges, in order."""
    out = {}
    t = 0.0
    while t < end:
        for (a, b), v in values.items():
            if a <= t < b:
                out[t] = v
        t += BIN
    return pd.Series(out, dtype=float)


def test_t0_down_never_restored() -> None:
    # ramp bin, steady 100, fault at 200: one bin at 40, then the new level 75 to the end
    g = series({(0, 10): 50, (10, 200): 100, (200, 210): 40, (210, 1000): 75})
    stats = s.goodput_stats(g, bin_us=BIN, end_us=1000, first_fault_us=200, last_end_us=None,
                            ongoing=True)
    assert stats["before"] == 100.0  # the ramp-up bin is not steady
    assert stats["during"] == pytest.approx((40 + 79 * 75) / 80, abs=1e-3)
    assert stats["after"] is None  # the fault never ends
    assert stats["min"] == 40.0
    window = {"bin_us": BIN, "end_us": 1000, "first_fault_us": 200, "next_event_us": None,
              "before_gbps": 100, "failed": False}
    # 75% of before for good: not recovered, however fast it settled (it did in one bin)
    assert s.recovery(g, **window) == ("not recovered", None)
    assert s.settle_us(g, **window) == 10.0


def test_fault_mid_bin_and_restore() -> None:
    # fault at 205 (inside a bin), restored at 505; goodput flat: no dip at all
    g = series({(0, 1000): 80})
    faults = [{"kind": "switch_down", "target": "p0.t1.0", "at_us": 205, "until_us": 505}]
    first, last, ongoing = s.fault_bounds(faults)
    assert (first, last, ongoing) == (205, 505, False)
    stats = s.goodput_stats(g, bin_us=BIN, end_us=1000, first_fault_us=first, last_end_us=last,
                            ongoing=ongoing)
    assert stats == {"before": 80.0, "during": 80.0, "after": 80.0, "min": 80.0}
    window = {"bin_us": BIN, "end_us": 1000, "first_fault_us": first, "next_event_us": 505,
              "before_gbps": 80, "failed": False}
    assert s.recovery(g, **window) == ("no dip", 0.0)
    assert s.settle_us(g, **window) == 0.0


def test_recovery_is_against_before_and_settling_against_the_new_level() -> None:
    # fault at 300: 0 for 30 us, then 60 (new level) until the restore at 600, then 100
    g = series({(0, 300): 100, (300, 330): 0, (330, 600): 60, (600, 1000): 100})
    window = {"bin_us": BIN, "end_us": 1000, "first_fault_us": 300, "next_event_us": 600,
              "before_gbps": 100, "failed": False}
    assert s.recovery(g, **window) == ("not recovered", None)  # 60% is not back
    assert s.settle_us(g, **window) == 30.0  # but it found its new level after 30 us
    # the same outage, then back to 95% of before: recovered when the last bad bin ends
    g2 = series({(0, 300): 100, (300, 330): 0, (330, 350): 95, (350, 360): 80,
                 (360, 1000): 95})
    assert s.recovery(g2, **window) == ("recovered", 60.0)
    assert s.recovery_us(g2, **window) == 60.0
    stats = s.goodput_stats(g, bin_us=BIN, end_us=1000, first_fault_us=300, last_end_us=600,
                            ongoing=False)
    assert stats["during"] == pytest.approx((3 * 0 + 27 * 60) / 30, abs=1e-3)
    assert stats["after"] == 100.0
    assert stats["min"] == 0.0


def test_no_recovery_when_failed_or_nothing_left() -> None:
    g = series({(0, 300): 100, (300, 1000): 0})
    window = {"bin_us": BIN, "end_us": 1000, "first_fault_us": 300, "next_event_us": None,
              "before_gbps": 100, "failed": False}
    assert s.recovery(g, **window) == ("not recovered", None)
    assert s.settle_us(g, **window) is None  # nothing left to settle to
    g2 = series({(0, 300): 100, (300, 1000): 90})
    assert s.recovery(g2, **{**window, "failed": True}) == ("job failed", None)
    assert s.recovery(g2, **{**window, "first_fault_us": None}) == ("no fault", None)
    assert s.recovery(g2, **{**window, "before_gbps": None}) == ("no baseline", None)


def test_no_faults_and_partial_last_bin() -> None:
    g = series({(0, 10): 10, (10, 995): 100})
    g[990.0] = 3.0  # a last bin covering only 2 us of 10 (would read as a dip)
    stats = s.goodput_stats(g, bin_us=BIN, end_us=992, first_fault_us=None, last_end_us=None,
                            ongoing=False)
    assert stats == {"before": 100.0, "during": None, "after": None, "min": 100.0}


def test_detect_from_events_not_bins() -> None:
    events = pd.DataFrame([
        {"time_us": 150.0, "kind": "ev_state", "target": "ev 3", "old": "GOOD", "new": "DENIED"},
        {"time_us": 190.0, "kind": "ev_state", "target": "ev 9", "old": "GOOD",
         "new": "ASSUMED_BAD"},  # before the fault: not a detection of it
        {"time_us": 203.25, "kind": "ev_state", "target": "ev 4", "old": "GOOD",
         "new": "ASSUMED_BAD"},
        {"time_us": 250.0, "kind": "qp_error", "target": "qp 1"},
    ])
    assert s.detect_us(events, 200.0) == 3.25
    rc = pd.DataFrame([{"time_us": 216.4, "kind": "retry", "target": "qp 7", "detail": {}},
                       {"time_us": 300.0, "kind": "qp_error", "target": "qp 7", "detail": {}}])
    assert s.detect_us(rc, 200.0) == 16.4
    dicts = pd.DataFrame([{"time_us": 201.0, "kind": "ev_state", "target": "ev 1",
                           "detail": {"old": "GOOD", "new": "ASSUMED_BAD"}}])
    assert s.detect_us(dicts, 200.0) == 1.0
    assert s.detect_us(events, None) is None
    assert s.detect_us(pd.DataFrame(columns=["time_us", "kind"]), 10.0) is None


def test_summary_shape_and_json() -> None:
    g = series({(0, 200): 100, (200, 1000): 75})
    ts = pd.DataFrame({"time_us": g.index, "transport": "mrc", "metric": "goodput_gbps",
                       "value": g.to_numpy()})
    goodput = s.goodput_series(ts, "mrc")
    faults = [{"kind": "switch_down", "target": "p3.t0.0", "at_us": 200.0, "until_us": None}]
    totals = {"bytes_delivered": 123, "retransmitted_packets": 4, "trimmed_packets": 0,
              "dropped_packets": 12, "probes_sent": 6, "paths_marked_bad": 16,
              "paths_reintegrated": 0,
              "dropped_by_kind": {"data": 5, "control": 3, "probe": 4}}
    entry = s.transport_summary(kind="mrc", outcome="completed", failed_at_us=None,
                                failure_reason=None, totals=totals, goodput=goodput,
                                events=pd.DataFrame(columns=["time_us", "kind"]), bin_us=BIN,
                                end_us=1000, faults=faults)
    doc = s.build_summary(lab="t0", seed=1, runtime="sim", sim_time_us=1000, wall_s=1.234,
                          goodput_ceiling_gbps=1541.5, faults=faults, transports={"mrc": entry})
    assert list(doc) == ["lab", "seed", "runtime", "sim_time_us", "wall_s", "build",
                         "goodput_ceiling_gbps", "faults", "transports"]
    assert doc["build"] in ("compiled", "pure")
    assert list(doc["transports"]["mrc"]) == [
        "kind", "outcome", "failed_at_us", "failure_reason", "bytes_delivered", "goodput_gbps",
        "retained_pct", "detect_us", "settle_us", "recovery_us", "recovery",
        "retransmitted_packets", "trimmed_packets", "dropped_packets", "probes_sent",
        "evs_marked_bad", "evs_reintegrated"]
    # every field is defined in one place (and the README says the same: test_outputs)
    documented = {k.split(".")[0] for k in s.TRANSPORT_FIELDS}
    assert set(doc["transports"]["mrc"]) <= documented
    assert set(doc) - {"transports"} <= set(s.TOP_FIELDS)
    assert entry["dropped_packets"] == {"data": 5, "control": 3, "probe": 4}
    assert entry["retained_pct"] == 75.0
    assert doc["faults"] == [{"kind": "switch_down", "target": "p3.t0.0", "at_us": 200.0,
                              "until_us": None}]
    assert entry["goodput_gbps"] == {"before": 100.0, "during": 75.0, "after": None, "min": 75.0}
    assert (entry["recovery"], entry["recovery_us"]) == ("not recovered", None)
    assert entry["settle_us"] == 0.0
    assert entry["detect_us"] is None
    text = s.dumps_summary(doc)
    assert json.loads(text) == doc


def test_flow_stats() -> None:
    flows = pd.DataFrame({"fct_us": [10.0, 20.0, 60.0, None], "ok": [True, True, True, None]})
    stats = s.flow_stats(flows)
    assert stats is not None
    assert stats["count"] == 4 and stats["completed"] == 3 and stats["mean_fct_us"] == 30.0
    assert stats["p50_fct_us"] == 20.0 and stats["max_fct_us"] == 60.0
    assert list(stats) == ["count", "completed", "p50_fct_us", "mean_fct_us", "p99_fct_us",
                           "max_fct_us"]


def test_detect_reads_json_details() -> None:
    rows = pd.DataFrame([
        {"time_us": 201.0, "kind": "ev_state", "target": "h0.qp1",
         "detail": '{"new": "GOOD", "old": "ASSUMED_BAD"}'},
        {"time_us": 202.5, "kind": "ev_state", "target": "h0.qp1",
         "detail": '{"new": "ASSUMED_BAD", "old": "GOOD"}'},
    ])
    assert s.detect_us(rows, 200.0) == 2.5


def test_a_last_lucky_bin_is_not_a_recovery() -> None:
    """Goodput hovering below 90% with the window's last bin above: not recovered (the
    recovered stretch must cover 50 us); five good bins at the end: recovered."""
    g = series({(0, 300): 100, (300, 990): 60, (990, 1000): 95})
    window = {"bin_us": BIN, "end_us": 1000, "first_fault_us": 300, "next_event_us": None,
              "before_gbps": 100, "failed": False}
    assert s.recovery(g, **window) == ("not recovered", None)
    g2 = series({(0, 300): 100, (300, 950): 60, (950, 1000): 95})
    assert s.recovery(g2, **window) == ("recovered", 650.0)
