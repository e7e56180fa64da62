"""benchmarks/bench_perm.py: the two cases alternate round by round, and the growth it reports
is each round's perm1024 cost over the same round's perm128 (event loop and whole process).
The isolated runs are replaced by a scripted machine that slows down from round to round."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_scripts import load

from mrc import bench


def test_growth_is_per_round_on_the_same_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    bench_perm = load("bench_perm")
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


def test_htsim_gets_the_same_fabric_and_permutation(tmp_path: Path) -> None:
    bench_perm = load("bench_perm")
    topo, matrix = bench_perm.htsim_inputs("perm128", tmp_path)
    lines = matrix.read_text(encoding="ascii").splitlines()
    assert lines[:2] == ["Nodes 128", "Connections 128"]
    pairs = [tuple(int(x) for x in line.split()[0].split("->")) for line in lines[2:]]
    stack = bench.open_permutation(bench.SPECS["perm128"], "mrc")  # what mrc-lab runs
    assert sorted(pairs) == sorted((c.src, c.dst) for c in stack.connections)
    assert all(line.endswith(f"start 0 size {bench.FLOW_BYTES}") for line in lines[2:])
    text = topo.read_text(encoding="ascii")
    assert "Radix_Down 8\nRadix_Up 8\n" in text  # 8 hosts per T0, 8 T1s
    assert "Tier 1\nDownlink_speed_Gbps 100\nRadix_Down 16\n" in text  # 16 T0s
    assert text.count("Downlink_Latency_ns 1000\n") == 2


def test_htsim_runs_in_every_round_and_its_growth_is_per_round(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bench_perm = load("bench_perm")
    order: list[str] = []

    def fake_run(case: str) -> bench.CaseResult:
        order.append(case)
        return bench.CaseResult(case=case, kind="mrc", hosts=0, planes=1, setup_s=0.0,
                                wall_s=1.0, cpu_s=1.0, sim_us=1.0, packets=1000, events=7000,
                                peak_rss_mb=1.0)

    def fake_htsim(binary: str, case: str, directory: Path) -> tuple[float, int]:
        assert binary == "htsim_uec" and (directory / f"{case}.cm").exists()
        order.append("htsim " + case)
        return (0.001, 1000) if case == "perm128" else (0.005, 8000)

    ticks = iter(range(100))  # each mrc-lab process "takes" one second
    monkeypatch.setattr(bench_perm.time, "perf_counter", lambda: float(next(ticks)))
    monkeypatch.setattr(bench_perm.bench, "run_isolated", fake_run)
    monkeypatch.setattr(bench_perm, "run_htsim", fake_htsim)
    doc = bench_perm.measure(2, "htsim_uec", tmp_path / "inputs")
    assert order == ["perm128", "htsim perm128", "perm1024", "htsim perm1024"] * 2
    assert doc["htsim"]["perm128"]["all"] == [1.0, 1.0]  # us per packet
    assert doc["htsim"]["perm1024"]["all"] == [0.625, 0.625]
    assert doc["htsim"]["growth_per_round"]["median"] == 0.625


def test_run_htsim_reads_its_packet_count_and_reports_its_failure(tmp_path: Path) -> None:
    bench_perm = load("bench_perm")
    bench_perm.htsim_inputs("perm128", tmp_path)
    fake = tmp_path / "htsim_uec"  # checks the files it is given, then reports as htsim does
    fake.write_text("#!/bin/sh\ntest \"$2\" = 128 && test -s \"$4\" && test -s \"$6\" || exit 3\n"
                    "echo 'Flow done'\necho 'New: 63616 Rtx: 0 RTS: 0 Bounced: 0 ACKs: 9'\n")
    fake.chmod(0o755)
    wall, packets = bench_perm.run_htsim(str(fake), "perm128", tmp_path)
    assert packets == 63616 and wall > 0
    fake.write_text("#!/bin/sh\necho 'no such topology' >&2\nexit 1\n")
    with pytest.raises(RuntimeError, match="htsim run of perm128 failed.*no such topology"):
        bench_perm.run_htsim(str(fake), "perm128", tmp_path)
