"""Faults a run cannot meet, and the outputs saying so: faults on no path of the workload
(mrc.labs.report.fault_reach), found for every element kind, never claimed for a fault the traffic
crosses, and, end to end, leaving the run exactly as it was without them; and faults after
the run ended (recovery ``ended first``), not read as a failure to recover."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from mrc.labs.report.fault_reach import off_path_faults
from mrc.labs.report.summary import recovery
from mrc.labs.run.runner import prepare, run_lab

# lab-small: 4 planes, 8 hosts, 2 under each T0 (h0 h1 | h2 h3 | h4 h5 | h6 h7), 4 T1s
SAME_T0 = [["h0", "h1"]]
ACROSS = [["h0", "h2"]]


def lab(pairs: list[list[str]], *faults: dict[str, Any], workload: dict[str, Any] | None = None,
        duration_us: float = 60) -> dict[str, Any]:
    return {"name": "reach", "fabric": {"preset": "lab-small"},
            "workload": workload or {"kind": "write_bw", "pairs": pairs,
                                     "message_bytes": 65536},
            "fault": list(faults), "run": {"duration_us": duration_us, "bin_us": 10}}


def fault(kind: str, target: str, at_us: float = 20, **params: Any) -> dict[str, Any]:
    return {"kind": kind, "target": target, "at_us": at_us, **params}


def off(spec: dict[str, Any]) -> dict[int, str]:
    return off_path_faults(prepare(spec))


@pytest.mark.parametrize(("target", "kind"), [
    ("p1.t1.2", "switch_down"),             # a T1: nothing crosses the T1 tier
    ("p1.t0.0--p1.t1.2", "link_down"),      # an uplink of the hosts' own T0
    ("p2.t0.3", "switch_down"),             # another T0
    ("h5.p0", "port_down"),                 # a NIC port of another host
    ("h5.p0--p0.t0.2", "link_down"),        # its host link
    ("h6", "nic_stall"),                    # another host
])
def test_off_path_between_hosts_under_one_t0(target: str, kind: str) -> None:
    extra = {"duration_us": 20} if kind == "nic_stall" else {}
    assert set(off(lab(SAME_T0, fault(kind, target, **extra)))) == {0}


@pytest.mark.parametrize(("target", "kind"), [
    ("p1.t1.2", "switch_down"), ("p1.t0.0--p1.t1.2", "link_down"), ("p2.t0.1", "switch_down"),
    ("p0.t0.0", "switch_down"), ("h2.p3", "port_down"), ("h0.p1--p1.t0.0", "link_down"),
])
def test_on_path_between_t0s(target: str, kind: str) -> None:
    assert off(lab(ACROSS, fault(kind, target))) == {}


def test_the_uplinks_of_a_t0_no_crossing_pair_uses() -> None:
    """h0<->h2 cross the T1 tier from T0 0 and T0 1; h4<->h5 stay under T0 2: T0 2's uplinks
    carry nothing, T0 0's do."""
    spec = lab([["h0", "h2"], ["h4", "h5"]], fault("link_down", "p0.t0.2--p0.t1.1"),
               fault("link_down", "p0.t0.0--p0.t1.1", at_us=30),
               fault("degrade", "p0.t0.2", rate_fraction=0.5, duration_us=10))
    assert off(spec) == {0: "no traffic between T0s leaves or enters T0 2"}


def test_a_permutation_counts_every_pair_of_its_hosts() -> None:
    work = {"kind": "permutation", "hosts": ["h0", "h1"], "size_bytes": 65536}
    assert set(off(lab([], fault("switch_down", "p0.t1.0"), workload=work))) == {0}
    work = {"kind": "permutation", "hosts": ["h0", "h1", "h2", "h3"], "size_bytes": 65536}
    assert off(lab([], fault("switch_down", "p0.t1.0"), workload=work)) == {}


def test_an_ev_deny_is_never_called_off_path() -> None:
    spec = lab(SAME_T0, fault("ev_deny", "all", deny_mask=1, deny_value=0))
    assert off(spec) == {}


def test_an_off_path_fault_changes_nothing_and_is_named() -> None:
    """The same lab with and without a T1 failure its traffic never reaches: the same
    timeseries, the same per-transport results (but the fault-window ones), and a note."""
    healthy = run_lab(lab(SAME_T0), progress=False)
    faulted = run_lab(lab(SAME_T0, fault("switch_down", "p1.t1.2")), progress=False)
    pd_cols = ["time_us", "transport", "metric", "value"]
    assert healthy.timeseries[pd_cols].equals(faulted.timeseries[pd_cols])
    window_keys = {"goodput_gbps", "retained_pct", "detect_us", "settle_us", "recovery",
                   "recovery_us", "flow_goodput_gbps"}
    for name, t in healthy.summary["transports"].items():
        f = faulted.summary["transports"][name]
        assert {k: v for k, v in t.items() if k not in window_keys} == \
            {k: v for k, v in f.items() if k not in window_keys}
        assert f["recovery"] == "no dip" and f["goodput_gbps"]["before"] > 0
    (entry,) = faulted.summary["faults"]
    assert entry["off_path"].startswith("every pair of the workload's hosts shares its T0")
    assert "note: fault 1 (switch_down p1.t1.2) is on no path of the workload's traffic" \
        in faulted.table()
    # ... and a fault the traffic does cross carries no such mark
    crossed = run_lab(lab(ACROSS, fault("switch_down", "p1.t1.2")), progress=False)
    assert "off_path" not in crossed.summary["faults"][0]
    assert "on no path" not in crossed.table()


def test_a_fault_after_the_workload_finished_is_not_read_as_no_recovery() -> None:
    """A permutation done in a few microseconds, a T1 failure at 400 us: neither transport
    met it, and the table says so instead of 'not recovered'."""
    work = {"kind": "permutation", "hosts": [f"h{i}" for i in range(8)], "size_bytes": 65536}
    spec = lab([], fault("switch_down", "p1.t1.2", at_us=400), workload=work, duration_us=600)
    result = run_lab(spec, progress=False)
    table = result.table()
    for name, t in result.summary["transports"].items():
        assert t["outcome"] == "completed" and t["sim_end_us"] < 400
        assert t["recovery"] == "ended first" and t["recovery_us"] is None
        assert f"ended first: {name}'s run ended at" in table
    assert "before the first fault at 400.0 us; it never met the fault" in table
    assert "not recovered" not in table


def test_recovery_of_a_run_that_ended_before_its_fault() -> None:
    goodput = pd.Series({0.0: 100.0}, dtype=float)
    window = {"bin_us": 10.0, "next_event_us": None, "before_gbps": 100.0, "failed": False}
    assert recovery(goodput, end_us=8.0, first_fault_us=400.0, **window) == ("ended first", None)
    # a failed job that failed before the fault did not fail of it either
    assert recovery(goodput, end_us=8.0, first_fault_us=400.0,
                    **{**window, "failed": True}) == ("ended first", None)
    assert recovery(goodput, end_us=800.0, first_fault_us=400.0,
                    **{**window, "failed": True}) == ("job failed", None)
