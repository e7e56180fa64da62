"""Pure helpers of the labs layer: dotted paths, htsim connection matrices, the collective
table maths, deterministic peers, and the bandwidth figure drawn from synthetic tables."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mrc.labs.errors import LabError
from mrc.labs.report import collective as coll
from mrc.labs.run.workloads import derangement
from mrc.labs.schema.connection_matrix import parse_connection_matrix
from mrc.labs.schema.keys import get_key, key_paths, parse_assignment, set_key, set_keys
from mrc.labs.schema.lab_file import load_lab, validate

LAB = {
    "fabric": {"preset": "lab-8plane"},
    "workload": {"kind": "write_bw"},
    "transport": {"mrc": {"probe_interval_us": 10.0}, "rc": {"timeout_exp": 4}},
    "fault": [{"kind": "switch_down", "target": "p0.t1.1", "at_us": 100}],
    "run": {"duration_us": 500},
}


# ---------------------------------------------------------------------- dotted paths
def test_get_and_set_key() -> None:
    assert get_key(LAB, "transport.mrc.probe_interval_us") == 10.0
    assert get_key(LAB, "fault.0.target") == "p0.t1.1"
    changed = set_keys(LAB, {"transport.mrc.probe_interval_us": 2.5, "fault.0.target": "p0.t1.3",
                             "run.seed": 7, "transport.mrc_fast.kind": "mrc"})
    assert LAB["transport"]["mrc"]["probe_interval_us"] == 10.0  # the base is untouched
    lab = validate(changed)
    assert lab.transports["mrc"].params["probe_interval_us"] == 2.5
    assert lab.faults[0].target == "p0.t1.3"
    assert lab.run.seed == 7
    assert set(lab.transports) == {"mrc", "rc", "mrc_fast"}


def test_resolved_lab_exposes_defaults_and_round_trips() -> None:
    lab = validate(LAB)
    assert get_key(lab, "fabric.mtu_bytes") == 4096
    assert get_key(lab, "workload.tx_depth") == 4
    assert get_key(lab, "run.bin_us") == 5.0
    paths = key_paths(lab)
    assert "transport.mrc.probe_interval_us" in paths and "fault.0.at_us" in paths
    assert "workload.pairs" in paths
    again = validate(lab.to_dict())
    assert again.to_dict() == lab.to_dict()


@pytest.mark.parametrize(("path", "message"), [
    ("transport.mrc.nope", "no key 'nope'"),
    ("fault.3.target", "index 3 out of range"),
    ("fault.x", "'x' is not an array index"),
    ("run..seed", "not a dotted key path"),
    ("run.seed.x", "has no key 'x'"),
])
def test_bad_paths(path: str, message: str) -> None:
    with pytest.raises(LabError, match=message):
        get_key({**LAB, "run": {"duration_us": 500, "seed": 1}}, path)


def test_set_key_errors_and_assignments() -> None:
    with pytest.raises(LabError, match="out of range"):
        set_key(LAB, "fault.5.at_us", 1)
    assert parse_assignment("transport.mrc.ev_count=64") == ("transport.mrc.ev_count", 64)
    assert parse_assignment("fault.0.target=p0.t1.2") == ("fault.0.target", "p0.t1.2")
    assert parse_assignment('workload.hosts=[0, "h4"]') == ("workload.hosts", [0, "h4"])
    assert parse_assignment("fabric.trimming=false") == ("fabric.trimming", False)


# ---------------------------------------------------------------------- connection matrix
def test_connection_matrix_parses() -> None:
    nodes, flows, triggers = parse_connection_matrix(
        "# two flows\nNodes 8\nConnections 2\nTriggers 0\n"
        "0->5 id 7 start 0 size 2000000\n3 -> 1 start 12.5 size 4096  # late one\n")
    assert nodes == 8 and triggers == []
    assert [(f.src, f.dst, f.flow_id, f.start_us, f.size_bytes) for f in flows] == [
        (0, 5, 7, 0.0, 2_000_000), (3, 1, 2, 12.5, 4096)]


def test_connection_matrix_reads_htsim_triggers_and_infers_nodes() -> None:
    """The shape htsim's generators write (a ring of flows chained by triggers), no Nodes."""
    text = ("Connections 4\nTriggers 3\n"
            "0->1 id 1 start 0 size 1000 send_done_trigger 1\n"
            "1->2 id 2 trigger 1 size 1000 send_done_trigger 2\n"
            "2->3 id 3 trigger 2 size 1000 recv_done_trigger 3\n"
            "3->0 id 4 trigger 3 size 1000\n"
            "trigger id 1 oneshot\ntrigger id 2 multishot\ntrigger id 3 barrier count 1\n")
    nodes, flows, triggers = parse_connection_matrix(text)
    assert nodes == 4  # inferred: the largest node + 1
    assert [f.start_us for f in flows] == [0.0, None, None, None]
    assert [(f.trigger, f.send_done_trigger, f.recv_done_trigger) for f in flows] == [
        (None, 1, None), (1, 2, None), (2, None, 3), (3, None, None)]
    assert [(t.trigger_id, t.kind, t.count) for t in triggers] == [
        (1, "oneshot", 0), (2, "multishot", 0), (3, "barrier", 1)]


@pytest.mark.parametrize(("text", "message"), [
    ("Connections 1\n0->3 start 0 size 1\n", None),  # Nodes inferred: 4
    ("Nodes 4\n0->1 start 0 size 10\n", None),
    ("Nodes 4\nConnections 2\n0->1 start 0 size 10\n", "'Connections 2' but 1"),
    ("Nodes 4\n0->4 start 0 size 10\n", "line 2: destination 4 outside 0..3"),
    ("Nodes 4\n2->2 start 0 size 10\n", "line 2: a flow from node 2 to itself"),
    ("Nodes 4\n0->1 size 10\n", "line 2: missing 'start T' (microseconds) or 'trigger K'"),
    ("Nodes 4\n0->1 start 0\n", "line 2: missing 'size BYTES'"),
    ("Nodes 4\n0->1 start 0 size 0\n", "size must be a positive whole number"),
    ("Nodes 4\n0->1 start -3 size 10\n", "'start' must be a non-negative number"),
    ("Nodes 4\n0->1 start 0 size ten\n", "'size' needs a number, got 'ten'"),
    ("Nodes 4\n0->1 id 1 start 0 size 1\n1->2 id 1 start 0 size 1\n", "flow id 1 already used"),
    ("Nodes 4\n0->1 id 1 trigger 3 size 10\n", "line 2: trigger 3: no 'trigger id 3"),
    ("Nodes 4\n0->1 trigger 3 size 10\ntrigger id 3 oneshot\n", "line 2: a triggered flow "
     "needs an 'id'"),
    ("Nodes 4\n0->1 id 1 start 0 trigger 3 size 10\n", "line 2: both 'start' and 'trigger'"),
    ("Nodes 4\n0->1 start 0 size 10 recv_done_trigger 2\n", "line 2: recv_done_trigger 2: no "
     "'trigger id 2"),
    ("Nodes 4\nTriggers 2\n0->1 start 0 size 1\n", "'Triggers 2' but 0 trigger lines"),
    ("Nodes 4\n0->1 id 1 start 0 size 1\n1->2 id 2 trigger 1 size 1\ntrigger id 1 oneshot\n",
     "line 3: flow 2 would never start: oneshot trigger 1 is not activated"),
    ("Nodes 4\n0->1 id 1 start 0 size 1 send_done_trigger 1\n1->2 id 2 trigger 1 size 1\n"
     "2->3 id 3 trigger 1 size 1\ntrigger id 1 multishot\n", "line 4: flow 3 would never "
     "start: multishot trigger 1"),
    ("Nodes 4\n0->1 id 1 start 0 size 1 send_done_trigger 1\n1->2 id 2 trigger 1 size 1\n"
     "trigger id 1 barrier count 2\n", "line 3: flow 2 would never start: barrier trigger 1 "
     "needs 2 activations"),
    ("Nodes 4\n0->1 id 1 start 0 size 1 send_done_trigger 1\n1->2 id 2 start 0 size 1 "
     "send_done_trigger 1\n2->3 id 3 trigger 1 size 1\ntrigger id 1 oneshot\n",
     "line 5: oneshot trigger 1 is activated by several flows"),
    ("Nodes 4\n0->1 id 1 trigger 1 size 1 send_done_trigger 1\ntrigger id 1 oneshot\n",
     "line 2: flow 1 would never start"),
    ("Nodes 4\n0->1 id 1 start 0 size 1\ntrigger id 1 barrier\n", "line 3: barrier trigger 1 "
     "needs 'count N'"),
    ("Nodes 4\n0->1 id 1 start 0 size 1\ntrigger id 1\n", "line 3: trigger 1 has no type"),
    ("Nodes 4\n0->1 start 0 size 1\nfailure switch_type TOR switch_id 1 link_id 0\n",
     "line 3: failure lines are not supported: they are htsim's static failures"),
    ("Nodes 4\n0->1 start 0 size 1 prio 3\n", "line 2: 'prio' is not supported: flow "
     "priorities are not modelled"),
    ("Nodes 4\n0->1 start 0 size 1 addon\n", "line 2: unknown field 'addon'"),
    ("Nodes 4\n0->1 start 0 size 1\nNodes 4\n", "line 3: Nodes given twice"),
    ("Connections 1\n0->1 start 0 size 1\nNodes 4\n", "line 3: Nodes after the first "
     "connection"),
    ("Nodes 4\nhello world\n", "line 2: cannot read 'hello world'"),
    ("Nodes 4\n", "no connections"),
    ("", "no connections"),
])
def test_connection_matrix_errors(text: str, message: str | None) -> None:
    if message is None:
        assert parse_connection_matrix(text).nodes == 4
        return
    with pytest.raises(LabError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_connection_matrix(text)


def test_connection_matrix_file_relative_to_lab(tmp_path: Path) -> None:
    (tmp_path / "flows.cm").write_text("Nodes 4\nConnections 1\n0->3 start 5 size 8192\n")
    (tmp_path / "m.toml").write_text('[workload]\nkind = "connection_matrix"\n'
                                     'file = "flows.cm"\n[run]\nduration_us = 100\n')
    lab = load_lab(tmp_path / "m.toml")
    assert lab.workload.flows[0].dst == 3  # type: ignore[union-attr]
    (tmp_path / "big.cm").write_text("Nodes 64\n0->63 start 0 size 1\n")
    with pytest.raises(LabError, match="64 nodes but the fabric only 8 hosts"):
        validate({"workload": {"kind": "connection_matrix", "file": "big.cm"},
                  "run": {"duration_us": 10}}, base_dir=tmp_path)


def test_derangement_is_seeded_and_valid() -> None:
    hosts = list(range(16))
    a, b = derangement(hosts, 1), derangement(hosts, 1)
    assert a == b
    assert sorted(a.values()) == hosts and all(k != v for k, v in a.items())
    assert derangement(hosts, 2) != a
    assert derangement([3, 9], 5) == {3: 9, 9: 3}


# ---------------------------------------------------------------------- collective maths
def test_busbw_factors() -> None:
    assert coll.busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert coll.busbw_factor("all_to_all", 8) == pytest.approx(7 / 8)
    assert coll.busbw_factor("sendrecv", 8) == 1.0
    with pytest.raises(ValueError):
        coll.busbw_factor("broadcast", 4)


def test_collective_table_numbers() -> None:
    rows = []
    for transport, times in (("mrc", [100.0, 90.0, 110.0]), ("rc", [200.0, 200.0, None])):
        for i, t in enumerate([999.0, *times]):
            rows.append({"transport": transport, "size_bytes": 8 << 20, "iteration": i,
                         "warmup": i == 0, "start_us": 0.0, "time_us": t,
                         "ok": None if t is None else True})
    rows[-1]["ok"] = False
    table = coll.collective_table(coll.iteration_frame(rows), kind="all_reduce", ranks=4,
                                  nic_ceiling_gbps=400.0)
    mrc = table[table["transport"] == "mrc"].iloc[0]
    assert mrc["count"] == (8 << 20) // 4
    assert mrc["time_us"] == pytest.approx(100.0)  # warm-up excluded
    assert mrc["algbw_GBps"] == pytest.approx((8 << 20) / 100.0 / 1e3)
    assert mrc["busbw_GBps"] == pytest.approx(mrc["algbw_GBps"] * 1.5)
    assert mrc["busbw_pct_ceiling"] == pytest.approx(mrc["busbw_GBps"] * 8 / 400 * 100)
    assert (mrc["min_time_us"], mrc["max_time_us"], mrc["status"]) == (90.0, 110.0, "ok")
    rc = table[table["transport"] == "rc"].iloc[0]
    assert rc["status"] == "failed" and rc["failed_iters"] == 1 and rc["iters"] == 2
    text = coll.format_table(table, kind="all_reduce", ranks=4, nic_ceiling_gbps=400.0)
    assert "8M" in text and "busbw(GB/s)" in text and "failed" in text
    empty = coll.collective_table(coll.iteration_frame([]), kind="sendrecv", ranks=2,
                                  nic_ceiling_gbps=1.0)
    assert empty.empty
    assert math.isnan(coll.algbw_gbytes(10, 0))


# ---------------------------------------------------------------------- the figure
def test_bandwidth_png_from_synthetic_tables(tmp_path: Path) -> None:
    from PIL import Image

    from mrc.labs.report.plot import close, plot_bandwidth

    rows = []
    for t in np.arange(0, 1000, 10.0):
        rows += [(t, "mrc", "goodput_gbps", 740.0 if t < 200 else 555.0),
                 (t, "rc", "goodput_gbps", 700.0 if t < 200 else (525.0 if t < 320 else 0.0)),
                 (t, "mrc", "assumed_bad_evs", 0.0 if t < 200 else 16.0)]
    ts = pd.DataFrame(rows, columns=["time_us", "transport", "metric", "value"])
    summary = {"lab": "synthetic", "seed": 1, "runtime": "sim", "sim_time_us": 1000.0,
               "goodput_ceiling_gbps": 1541.5,
               "faults": [{"kind": "switch_down", "target": "p3.t0.0", "at_us": 200.0,
                           "until_us": None}],
               "transports": {"mrc": {"kind": "mrc", "outcome": "completed",
                                      "failed_at_us": None},
                              "rc": {"kind": "rc", "outcome": "failed", "failed_at_us": 320.0}}}
    path = tmp_path / "bandwidth.png"
    fig = plot_bandwidth(ts, summary, bin_us=10.0, subtitle="synthetic", path=path)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "goodput (Gb/s)"
    assert "time" in fig.axes[-1].get_xlabel()
    assert len(fig.axes) == 2  # the ASSUMED_BAD panel appears when EVs went bad
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(label.startswith("rc: failed") for label in labels)  # the name once
    assert not any("(rc)" in label or "(mrc)" in label for label in labels)
    close(fig)
    with Image.open(path) as img:
        assert img.size[0] >= 1000 and img.size[1] >= 600


def test_connection_matrix_triggers_start_flows_when_they_fire() -> None:
    """htsim's triggers at run time: a barrier of two flows starts flow 3 when the second is
    done; a oneshot on flow 3's completion starts flow 4; a multishot starts its flows one per
    activation, in file order."""
    from mrc.labs.run.runner import run_lab

    text = ("Nodes 8\nConnections 6\nTriggers 3\n"
            "0->4 id 1 start 0 size 100000 send_done_trigger 10\n"
            "1->5 id 2 start 2 size 100000 send_done_trigger 10 recv_done_trigger 30\n"
            "2->6 id 3 trigger 10 size 50000 recv_done_trigger 20\n"
            "3->7 id 4 trigger 20 size 50000 send_done_trigger 30\n"
            "4->0 id 5 trigger 30 size 50000\n"
            "5->1 id 6 trigger 30 size 50000\n"
            "trigger id 10 barrier count 2\ntrigger id 20 oneshot\ntrigger id 30 multishot\n")
    result = run_lab({"fabric": {"preset": "lab-small"}, "transport": {"mrc": {}},
                      "workload": {"kind": "connection_matrix", "text": text},
                      "run": {"duration_us": 300}}, progress=False)
    flows = result.flows.set_index("flow_id")
    end = flows["end_us"]
    assert flows.loc[3, "start_us"] == pytest.approx(max(end[1], end[2]))
    assert flows.loc[4, "start_us"] == pytest.approx(end[3])
    assert flows.loc[5, "start_us"] == pytest.approx(end[2])  # first activation: flow 5
    assert flows.loc[6, "start_us"] == pytest.approx(end[4])  # second: flow 6
    assert flows["ok"].all()
    assert result.summary["transports"]["mrc"]["outcome"] == "completed"
    assert result.summary["transports"]["mrc"]["flows"]["completed"] == 6
