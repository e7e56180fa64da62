"""benchmarks/bench_scaling.py: the points alternate round by round, every point's best and
median come from its own runs, and a point with every n-th host writing runs exactly those
flows on the whole fabric."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bench_scripts import load

ROOT = Path(__file__).resolve().parents[1]



def test_points_alternate_and_keep_their_own_runs() -> None:
    scaling = load("bench_scaling")
    points = (scaling.Point("fabric", 128, 8, 8), scaling.Point("busy", 1024, 32, 32, every=8))
    order: list[str] = []

    def fake(point: Any) -> dict[str, Any]:
        order.append(point.label)
        cost = {"fabric": 2.0, "busy": 1.5}[point.series] * (1 + len(order) // 2)
        return {"us_per_packet": cost, "events_per_packet": 7.0, "packets": 100,
                "flows": point.flows, "flows_ok": point.flows, "peak_rss_mb": 80.0}

    doc = scaling.measure(3, points, fake)
    assert order == ["fabric:128h/128f", "busy:1024h/128f"] * 3
    fabric, busy = doc["points"]
    assert fabric["us_per_packet_all"] == [2.0, 4.0, 6.0]
    assert (fabric["us_per_packet_best"], fabric["us_per_packet_median"]) == (2.0, 4.0)
    assert busy["us_per_packet_all"] == [3.0, 4.5, 6.0]
    assert (busy["hosts"], busy["flows"]) == (1024, 128)


def test_a_sparse_point_runs_every_nth_host_on_the_whole_fabric() -> None:
    scaling = load("bench_scaling")
    point = scaling.Point("busy", 16, 4, 4, every=4)
    row = scaling.run_point(point, size=40_000)
    assert row["flows"] == row["flows_ok"] == 4
    # 40,000 bytes in 4,096-byte MTUs: 10 data packets per flow, each delivered once
    assert row["packets"] == 4 * 10
    assert 6.0 <= row["events_per_packet"] <= 12.0


def test_separate_fabrics_stepped_in_turn_deliver_what_each_would_alone() -> None:
    scaling = load("bench_scaling")
    alone = scaling.run_point(scaling.Point("apart", 16, 4, 4, copies=2), size=40_000)
    stepped = scaling.run_point(scaling.Point("apart", 16, 4, 4, copies=2, window_us=1.0),
                                size=40_000)
    for row in (alone, stepped):
        assert row["flows"] == row["flows_ok"] == 2 * 16
        assert row["packets"] == 2 * 16 * 10
    # each is its own simulation, whichever order they run in: the same work, give or take
    # the events of the last window after the last write completed
    assert stepped["events_per_packet"] == pytest.approx(alone["events_per_packet"], rel=0.05)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_memory_latency_probe_compiles_cleanly(tmp_path: Path) -> None:
    """benchmarks/memory_latency.c, which docs/performance.md's latency table comes from."""
    out = tmp_path / "memory_latency"
    proc = subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out),
                           str(ROOT / "benchmarks/memory_latency.c")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert out.exists()
