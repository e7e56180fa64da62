"""benchmarks/bench_perm.py: the two cases alternate round by round, and the growth it reports
is each round's perm1024 cost over the same round's perm128 (event loop and whole process).
The isolated runs are replaced by a scripted machine that slows down from round to round."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mrc import bench

ROOT = Path(__file__).resolve().parents[1]


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_perm", ROOT / "benchmarks/bench_perm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_growth_is_per_round_on_the_same_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    bench_perm = _load()
    order: list[str] = []
    clock = [0.0]
    packets = {"perm128": 1_000, "perm1024": 8_000}
    loop_us = {"perm128": 2.0, "perm1024": 5.0}  # x2.5 on a steady machine
    fixed_s = {"perm128": 0.1, "perm1024": 0.3}  # interpreter, imports, setup

    def fake_run(case: str) -> bench.CaseResult:
        slow = 1.0 + 0.5 * (len(order) // 2)  # every round 50% slower than the first
        order.append(case)
        wall = loop_us[case] * slow * packets[case] / 1e6
        clock[0] += fixed_s[case] * slow + wall
        return bench.CaseResult(case=case, kind="mrc", hosts=0, planes=1, setup_s=0.01,
                                wall_s=wall, cpu_s=wall, sim_us=1.0, packets=packets[case],
                                events=7 * packets[case], peak_rss_mb=50.0)

    monkeypatch.setattr(bench_perm.bench, "run_isolated", fake_run)
    monkeypatch.setattr(bench_perm.time, "perf_counter", lambda: clock[0])
    doc = bench_perm.measure(3)
    assert order == ["perm128", "perm1024"] * 3
    loop = doc["growth_per_round"]
    assert loop["min"] == loop["max"] == loop["median"] == 2.5  # drift cancels in a round
    # whole process: (0.3 + 0.04) s / 8000 packets over (0.1 + 0.002) s / 1000 packets
    assert doc["process_growth_per_round"]["median"] == pytest.approx(
        (0.34 / 8000) / (0.102 / 1000), abs=1e-3)
    assert doc["perm128"]["us_per_packet_all"] == [2.0, 3.0, 4.0]
    assert doc["perm1024"]["process_us_per_packet_best"] == pytest.approx(42.5)
    assert doc["perm1024"]["events_per_packet"] == 7.0
