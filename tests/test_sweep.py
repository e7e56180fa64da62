"""Sweeps with a fake runner: grid expansion, stable run ids, validation (exit 2, one line),
error recording, resume, the runs table and the plot. Fast: no simulator runs here (the
real-simulator and Dask checks are in test_sweep_real.py)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from mrc.cli import main
from mrc.labs.errors import LabError
from mrc.labs.schema.lab import Lab
from mrc.labs.sweep.execute import run_sweep
from mrc.labs.sweep.file import load_sweep, run_id
from mrc.labs.sweep.plot import plot_sweep

LAB = """\
name = "base"
[fabric]
preset = "lab-small"
[workload]
kind = "write_bw"
[[fault]]
kind = "switch_reboot"
target = "p0.t1.0"
at_us = 100
duration_us = 200
[run]
duration_us = 500
"""

SWEEP = """\
lab = "base.toml"
[grid]
"run.seed" = [1, 2, 3]
fault.0.target = ["p0.t1.0", "p0.t1.1"]
"""

CALLS: list[tuple[int, str]] = []


class FakeResult:
    """What the sweep needs from a LabResult: a summary dict and ``write_files``."""

    def __init__(self, summary: dict[str, Any]) -> None:
        self.summary = summary

    def write_files(self, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        path = out / "summary.json"
        path.write_text(json.dumps(self.summary), encoding="utf-8")
        return [path]


def fake_runner(lab: Lab, transports: list[str] | None) -> FakeResult:
    """Deterministic numbers from the lab's parameters; target p0.t1.3 raises."""
    target = lab.faults[0].target if lab.faults else "-"
    seed = lab.run.seed
    CALLS.append((seed, target))
    if target == "p0.t1.3":
        raise RuntimeError("simulator exploded\non two lines")
    k = int(target.rsplit(".", 1)[-1]) if target != "-" else 0
    per = {}
    for name, spec in lab.transports.items():
        if transports and name not in transports:
            continue
        failed = spec.kind == "rc" and k == 1
        per[name] = {
            "kind": spec.kind, "outcome": "failed" if failed else "completed",
            "failed_at_us": 300.0 if failed else None, "failure_reason": None,
            "bytes_delivered": 1000 * seed,
            "goodput_gbps": {"before": 100.0, "during": 90.0 - seed - 10 * k, "after": 100.0,
                             "min": 50.0 + seed},
            "detect_us": 10.0 + seed, "recovery_us": None if failed else 20.0 * seed + k,
            "recovery": "job failed" if failed else "recovered",
            "retransmitted_packets": seed, "trimmed_packets": 0,
            "dropped_packets": {"data": k, "control": 0, "probe": 0},
            "probes_sent": 0, "evs_marked_bad": 0, "evs_reintegrated": 0,
        }
    return FakeResult({"lab": lab.name, "seed": seed, "runtime": "sim", "sim_time_us": 500.0,
                       "wall_s": 0.01, "goodput_ceiling_gbps": 100.0,
                       "faults": [{"kind": "switch_reboot", "target": target, "at_us": 100.0,
                                   "until_us": 300.0}], "transports": per})


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "base.toml").write_text(LAB)
    (tmp_path / "s.toml").write_text(SWEEP)
    CALLS.clear()
    return tmp_path


def write(folder: Path, text: str, name: str = "s.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


# ====================================================================== expansion
def test_grid_is_the_product_in_file_order(folder: Path) -> None:
    sweep = load_sweep(folder / "s.toml")
    assert sweep.name == "s" and sweep.params == ["run.seed", "fault.0.target"]
    assert [tuple(r.params.values()) for r in sweep.runs] == [
        (1, "p0.t1.0"), (1, "p0.t1.1"), (2, "p0.t1.0"), (2, "p0.t1.1"), (3, "p0.t1.0"),
        (3, "p0.t1.1")]
    assert [r.index for r in sweep.runs] == list(range(6))
    first = sweep.runs[1]
    assert first.lab["run"]["seed"] == 1 and first.lab["fault"][0]["target"] == "p0.t1.1"
    assert first.transports == ("mrc", "rc") and first.kinds == ("mrc", "rc")


def test_run_ids_are_stable_and_content_derived(folder: Path) -> None:
    a = load_sweep(folder / "s.toml")
    b = load_sweep(folder / "s.toml")
    ids = [r.run_id for r in a.runs]
    assert ids == [r.run_id for r in b.runs]
    assert all(re.fullmatch(r"[0-9a-f]{12}", i) for i in ids) and len(set(ids)) == len(ids)
    assert run_id(a.runs[0].lab, "base", None) == ids[0]
    # a fixed override changes every run's lab, hence every id
    write(folder, SWEEP + '[set]\n"run.duration_us" = 400\n', "t.toml")
    assert not set(ids) & {r.run_id for r in load_sweep(folder / "t.toml").runs}


def test_zip_set_nested_keys_and_defaults_kept(folder: Path) -> None:
    path = write(folder, """\
        lab = "base.toml"
        transports = "mrc"
        [set]
        run.duration_us = 600
        [grid.transport.mrc]
        ev_count = [32, 64]
        [[zip]]
        "fault.0.at_us" = [100, 150, 200]
        "fault.0.duration_us" = [50, 100, 150]
        """)
    sweep = load_sweep(path)
    assert sweep.params == ["transport.mrc.ev_count", "fault.0.at_us", "fault.0.duration_us"]
    assert len(sweep.runs) == 6
    assert [(r.params["fault.0.at_us"], r.params["fault.0.duration_us"])
            for r in sweep.runs[:3]] == [(100, 50), (150, 100), (200, 150)]
    lab = sweep.runs[0].lab
    # the base lab has no [transport] table: setting an mrc key must keep the default rc,
    # and the default fabric preset must survive
    assert set(lab["transport"]) == {"mrc", "rc"} and lab["transport"]["mrc"]["ev_count"] == 32
    assert lab["run"]["duration_us"] == 600
    assert sweep.transports == ("mrc",) and sweep.runs[0].transports == ("mrc",)


def test_inline_and_bundled_base_labs(folder: Path) -> None:
    inline = re.sub(r"^\[(\[?)", r"[\1lab.", LAB, flags=re.M)  # [run] -> [lab.run] ...
    text = "[lab]\n" + inline + '\n[grid]\n"run.seed" = [4, 5]\n'
    sweep = load_sweep(write(folder, text, "inline.toml"))
    assert sweep.base.name == "base" and len(sweep.runs) == 2
    bundled = load_sweep(write(folder, 'lab = "t1-reboot"\n[grid]\n"run.seed" = [1, 2]\n',
                               "b.toml"))
    assert bundled.base.name == "t1-reboot"


def test_bundled_example_sweep_is_valid() -> None:
    root = Path(__file__).resolve().parents[1] / "labs"
    path = next(p for p in (root / "sweep-t1-reboot.toml", root / "sweep-t1-reboot.toml.pending")
                if p.is_file())
    sweep = load_sweep(path)
    assert sweep.name == "sweep-t1-reboot" and sweep.base.name == "t1-reboot"
    assert set(sweep.params) == {"run.seed", "fault.0.target"} and len(sweep.runs) <= 16


# ====================================================================== bad input
BAD = [
    ('[grid]\n"run.seed" = [1]\n', "lab: missing required key"),
    ('lab = "base.toml"\ngrids = 1\n', "grids: unknown key (did you mean 'grid'?)"),
    ('lab = "base.toml"\n', "grid: nothing to sweep"),
    ('lab = "nope.toml"\n[grid]\n"run.seed" = [1]\n', "no such lab file"),
    ('lab = "base.toml"\n[grid]\n"run.seed" = 3\n', "grid.run.seed: expected an array"),
    ('lab = "base.toml"\n[grid]\n"run.seed" = []\n', "grid.run.seed: an empty array"),
    ('lab = "base.toml"\n[grid]\n"run.sed" = [1, 2]\n',
     "grid.run.sed: value 1: unknown key (did you mean 'seed'?)"),
    ('lab = "base.toml"\n[grid]\n"run.seed" = [1, -2]\n',
     "grid.run.seed: value -2: must not be negative"),
    ('lab = "base.toml"\n[grid]\n"fault.0.target" = ["p0.t1.0", "p9.t1.0"]\n',
     "grid.fault.0.target: value 'p9.t1.0': unknown element"),
    ('lab = "base.toml"\n[grid]\n"fault.3.target" = ["p0.t1.0"]\n',
     "grid.fault.3.target: 'fault.3' is not an entry of the base lab"),
    ('lab = "base.toml"\n[grid]\n"run.seed" = [1, 1]\n', "1 and 1 are the same value"),
    ('lab = "base.toml"\n[grid]\n"run.seed" = [1, 1.0]\n', "1 and 1.0 are the same value"),
    ('lab = "base.toml"\n[grid]\n"run.seed" = [1]\n[set]\n"run.seed" = 2\n',
     "grid.run.seed: 'run.seed' is also given in set.run.seed"),
    ('lab = "base.toml"\n[grid]\n"fault.0" = [{}]\n"fault.0.at_us" = [1]\n',
     "overlaps 'fault.0'"),
    ('lab = "base.toml"\n[[zip]]\n"run.seed" = [1, 2]\n"fault.0.at_us" = [1]\n',
     "zip.0: zipped arrays must have equal lengths (run.seed has 2, fault.0.at_us has 1)"),
    ('lab = "base.toml"\n[zip]\n"run.seed" = [1]\n', "zip: write zipped lists as [[zip]]"),
    ('lab = "base.toml"\ntransports = ["tcp"]\n[grid]\n"run.seed" = [1]\n',
     "transports: unknown transport 'tcp'"),
    ('lab = "base.toml"\n[grid]\n"run.duration_us" = [500, 150]\n',
     "switch_reboot lasts until 300 us, after the run ends"),
    ('lab = "base.toml"\n[grid\n', "TOML syntax error"),
    ('[workload]\nkind = "write_bw"\n[run]\nduration_us = 5\n', "this is a lab file"),
]


@pytest.mark.parametrize("text,expected", BAD)
def test_bad_sweeps_exit_2_with_one_line(folder: Path, text: str, expected: str) -> None:
    path = write(folder, text, "bad.toml")
    result = CliRunner().invoke(main, ["sweep", str(path), "--out", str(folder / "o")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mrc-lab: error: {path}"), result.output
    assert expected in lines[0]
    assert not (folder / "o").exists()  # nothing ran


@pytest.mark.parametrize("args,expected", [
    (["--plot", "recovery_us"], "--by: --plot METRIC and --by PARAM go together"),
    (["--plot", "recovery_us", "--by", "run.duration_us"], "--by: 'run.duration_us' is not a "
                                                           "swept parameter"),
    (["--workers", "0"], "--workers: must be at least 1"),
    (["--workers", "two"], "--workers: expected an integer"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers or --scheduler"),
    (["--scheduler", "nohost"], "--scheduler: 'nohost' is not a scheduler address"),
])
def test_bad_options_exit_2(folder: Path, args: list[str], expected: str) -> None:
    result = CliRunner().invoke(main, ["sweep", str(folder / "s.toml"), "-q", *args])
    assert result.exit_code == 2 and expected in result.output, result.output


def test_scheduler_without_distributed_is_a_clear_error(folder: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "distributed", None)
    result = CliRunner().invoke(main, ["sweep", str(folder / "s.toml"), "-q", "--out",
                                       str(folder / "o"), "--scheduler", "tcp://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "--scheduler: needs the Dask 'distributed' package" in result.output


# ====================================================================== running
def test_errors_are_recorded_and_resume_skips_complete_runs(folder: Path) -> None:
    write(folder, 'lab = "base.toml"\n[grid]\n"run.seed" = [1, 2]\n'
                  '"fault.0.target" = ["p0.t1.1", "p0.t1.3"]\n')
    out = folder / "o"
    first = run_sweep(folder / "s.toml", out=out, workers=1, progress=False, runner=fake_runner)
    assert (first.ran, first.skipped, first.errors) == (4, 0, 2)
    table = first.table
    assert len(table) == 8 and list(table["transport"]) == ["mrc", "rc"] * 4
    bad = table[table["fault.0.target"] == "p0.t1.3"]
    assert set(bad["status"]) == {"error"}
    assert set(bad["error"]) == {"RuntimeError: simulator exploded on two lines"}
    good = table[table["status"] == "ok"]
    assert list(good.columns[:4]) == ["run_id", "run_index", "run.seed", "fault.0.target"]
    for column in ("goodput_gbps_before", "goodput_gbps_during", "goodput_gbps_after",
                   "goodput_gbps_min", "detect_us", "recovery_us", "outcome", "failed_at_us",
                   "retransmitted_packets", "sim_time_us", "faults", "job_failed"):
        assert column in table.columns
    rc = good[good["transport"] == "rc"]
    assert list(rc["outcome"]) == ["failed", "failed"] and list(rc["job_failed"]) == [1.0, 1.0]
    assert rc["recovery_us"].isna().all()
    # per-run outputs under runs/<id>/, with the traceback kept for the errored ones
    rid = bad["run_id"].iloc[0]
    assert (out / "runs" / rid / "error.txt").read_text().count("Traceback") == 1
    assert (out / "runs" / good["run_id"].iloc[0] / "summary.json").is_file()
    on_disk = pd.read_csv(out / "runs.csv")
    assert len(on_disk) == 8 and on_disk["run_id"].tolist() == table["run_id"].tolist()

    CALLS.clear()
    again = run_sweep(folder / "s.toml", out=out, workers=1, progress=False, runner=fake_runner)
    assert (again.ran, again.skipped, again.errors) == (2, 2, 2)
    assert sorted(CALLS) == [(1, "p0.t1.3"), (2, "p0.t1.3")]  # only the errored ones re-ran
    pd.testing.assert_frame_equal(again.table, table)


def test_process_pool_gives_the_same_table(folder: Path) -> None:
    one = run_sweep(folder / "s.toml", out=folder / "a", workers=1, progress=False,
                    runner=fake_runner)
    two = run_sweep(folder / "s.toml", out=folder / "b", workers=2, progress=False,
                    runner=fake_runner)
    assert one.errors == two.errors == 0 and len(one.table) == 12
    pd.testing.assert_frame_equal(one.table, two.table)


def test_cli_runs_resumes_and_plots(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mrc.labs.sweep.point.lab_runner", fake_runner)
    out = folder / "o"
    args = ["sweep", str(folder / "s.toml"), "--out", str(out), "-j", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "6 run(s) now, 0 already complete, 0 error(s)" in result.output
    assert re.search(r"^rc\s+6\s+3\s+0\s+3\s+0", result.output, re.M), result.output
    result = CliRunner().invoke(main, [*args, "--plot", "goodput_gbps.during", "--by",
                                       "fault.0.target"])
    assert result.exit_code == 0, result.output
    assert "0 run(s) now, 6 already complete" in result.output
    png = out / "plot-goodput_gbps.during-by-fault.0.target.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    listing = CliRunner().invoke(main, ["sweep", str(folder / "s.toml"), "--out", str(out),
                                        "--dry-run"])
    assert listing.output.count(" done ") == 6 and "6 runs of base x mrc, rc" in listing.output
    result = CliRunner().invoke(main, [*args, "--plot", "outcome", "--by", "run.seed"])
    assert result.exit_code == 2 and "'outcome' is not numeric" in result.output


def test_cli_exit_1_when_a_run_errors(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mrc.labs.sweep.point.lab_runner", fake_runner)
    write(folder, 'lab = "base.toml"\n[grid]\n"fault.0.target" = ["p0.t1.0", "p0.t1.3"]\n')
    result = CliRunner().invoke(main, ["sweep", str(folder / "s.toml"), "--out",
                                       str(folder / "o"), "-j", "1", "-q"])
    assert result.exit_code == 1
    assert "2 row(s) errored" in result.output
    assert len(pd.read_csv(folder / "o" / "runs.csv")) == 4


def test_plot_numeric_axis_and_unknown_metric(folder: Path) -> None:
    result = run_sweep(folder / "s.toml", out=folder / "o", workers=1, progress=False,
                       runner=fake_runner)
    path = result.plot("recovery_us", "run.seed")
    assert path.name == "plot-recovery_us-by-run.seed.png" and path.stat().st_size > 10_000
    with pytest.raises(LabError, match="no such column"):
        plot_sweep(result.table, "nope", "run.seed", folder / "x.png")
    with pytest.raises(LabError, match="not a column"):
        plot_sweep(result.table, "recovery_us", "nope", folder / "x.png")
