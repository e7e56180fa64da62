"""Smoke tests of the benchmark suite's machinery at toy size (no timing assertions)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from mrc import bench
from mrc.cli import main

TOY = bench.perm_spec(16, 4, 4, name="toy")
TOY_BYTES = 40_000


@pytest.mark.parametrize("kind", ["mrc", "rc"])
def test_permutation_case_counts_what_it_delivered(kind: str) -> None:
    r = bench.run_permutation("toy", TOY, kind, size=TOY_BYTES)
    assert r.flows == r.flows_ok == TOY.hosts
    # every flow placed every one of its packets exactly once
    assert r.packets == TOY.hosts * math.ceil(TOY_BYTES / TOY.mtu_bytes)
    assert r.events > r.packets > 0
    assert r.sim_us > 0 and r.wall_s > 0
    assert r.ideal_us is not None and r.fct_p50_us is not None
    assert r.fct_p50_us <= r.fct_p99_us <= r.fct_max_us <= r.sim_us
    assert r.p50_vs_ideal == pytest.approx(r.fct_p50_us / r.ideal_us)
    assert r.us_per_packet == pytest.approx(r.wall_s * 1e6 / r.packets)
    assert r.peak_rss_mb > 0


def test_same_seed_same_simulation() -> None:
    a = bench.run_permutation("toy", TOY, "mrc", size=TOY_BYTES, seed=3)
    b = bench.run_permutation("toy", TOY, "mrc", size=TOY_BYTES, seed=3)
    assert (a.events, a.packets, a.sim_us, a.fct_max_us) == (
        b.events, b.packets, b.sim_us, b.fct_max_us)


def test_scenarios_expand_to_cases() -> None:
    assert bench.cases("perm128") == ["perm128"]
    assert bench.cases("planes8") == ["planes8.mrc", "planes8.rc"]
    labs = bench.cases("labs")
    assert len(labs) == 2 * len(bench.lab_names()) and "labs.t1-reboot.rc" in labs
    assert bench.cases("lab:t1-reboot") == ["labs.t1-reboot.mrc", "labs.t1-reboot.rc"]
    for bad in ("perm7", "lab:no-such-lab"):
        with pytest.raises(ValueError):
            bench.cases(bad)


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert bench.percentile(values, 50) == 50
    assert bench.percentile(values, 99) == 99
    assert bench.percentile([7.0], 99) == 7.0


def test_json_document(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bench.SPECS, "perm128", TOY)
    monkeypatch.setattr(bench, "FLOW_BYTES", TOY_BYTES)
    lines: list[str] = []
    assert bench.report(["perm128"], as_json=True, isolated=False, echo=lines.append) == 0
    doc = json.loads("\n".join(lines))
    (row,) = doc["results"]
    assert row["case"] == "perm128" and row["packets"] > 0
    for key in ("wall_s", "sim_us", "events", "us_per_packet", "events_per_s",
                "peak_rss_mb", "fct_p50_us", "fct_p99_us", "fct_max_us", "ideal_us"):
        assert key in row
    assert "targets" not in doc  # mrc-lab bench reports measurements, not internal targets
    assert doc["machine"]["build"].startswith(("compiled core", "pure Python"))
    assert doc["machine"]["python"]
    lines.clear()
    assert bench.report(["perm128"], isolated=False, echo=lines.append) == 0
    assert not any("target" in line for line in lines)
    lines.clear()
    assert bench.report(["perm128"], isolated=False, echo=lines.append,
                        check_targets=True) == 0  # developers ask for them
    assert any(line.startswith("target perm128_us_per_packet<=8: ") for line in lines)


def test_cli_refuses_unknown_scenario() -> None:
    result = CliRunner().invoke(main, ["bench", "--scenario", "nope"])
    assert result.exit_code == 2
    assert "unknown scenario" in result.output
