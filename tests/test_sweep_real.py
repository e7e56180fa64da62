"""Sweeps on the real simulator: a tiny T1-reboot grid run locally in 2 processes and on a
real Dask LocalCluster (in process) must give identical tables, and the outcomes the brief
predicts (MRC always completes; RC fails only when the rebooting T1 carries its QP)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from mrc.cli import main
from mrc.labs.sweep.execute import run_sweep

TINY_LAB = """\
name = "tiny-reboot"
[fabric]
preset = "lab-small"
[workload]
kind = "write_bw"
message_bytes = 262144
[transport.mrc]
[transport.rc]
timeout_exp = 2
retry_cnt = 2
[[fault]]
kind = "switch_reboot"
target = "p0.t1.0"
at_us = 60
duration_us = 100
[run]
duration_us = 200
bin_us = 10
"""

SWEEP = """\
lab = "tiny.toml"
[grid]
"fault.0.target" = ["p0.t1.0", "p0.t1.1"]
"run.seed" = [1, 2]
"""


def _crossed() -> set[tuple[str, int]]:
    """(target, seed) of the grid whose T1 one of h0<->h2's plane-0 QPs crosses."""
    from mrc.stack.qpn import first_qpn
    from mrc.stack.rc_connection import ecmp_t1
    from topology.spec import preset

    spec = preset("lab-small")
    out = set()
    for seed in (1, 2):
        q = first_qpn(seed)  # h0->h2 opens first (q..q+3), then h2->h0 (q+4..q+7)
        t1s = {ecmp_t1(spec, a, b, qpn, 0) for qpn in (q, q + 4) for a, b in ((0, 2), (2, 0))}
        out |= {(f"p0.t1.{k}", seed) for k in t1s & {0, 1}}
    return out


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    """Everything but wall-clock times, which no two runs share."""
    return table[[c for c in table.columns if not c.endswith("wall_s")]]


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    (tmp_path / "tiny.toml").write_text(TINY_LAB)
    path = tmp_path / "tiny-sweep.toml"
    path.write_text(SWEEP)
    return path


def test_local_processes_and_dask_cluster_give_identical_tables(sweep_file: Path) -> None:
    distributed = pytest.importorskip("distributed")
    out_local = sweep_file.parent / "local"
    result = CliRunner().invoke(main, ["sweep", str(sweep_file), "--out", str(out_local),
                                       "--workers", "2", "-q"])
    assert result.exit_code == 0, result.output
    local = pd.read_csv(out_local / "runs.csv")

    out_dask = sweep_file.parent / "dask"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        result = CliRunner().invoke(main, ["sweep", str(sweep_file), "--out", str(out_dask),
                                           "--scheduler", cluster.scheduler_address, "-q"])
    assert result.exit_code == 0, result.output
    dask = pd.read_csv(out_dask / "runs.csv")

    assert len(local) == 8 and set(local["status"]) == {"ok"}
    pd.testing.assert_frame_equal(comparable(local), comparable(dask))

    mrc = local[local["transport"] == "mrc"]
    rc = local[local["transport"] == "rc"]
    assert set(mrc["outcome"]) == {"completed"} and mrc["recovery_us"].notna().all()
    failed = rc[rc["outcome"] == "failed"]
    # RC fails exactly where the rebooting T1 carries a plane-0 packet of the default pair
    # h0<->h2 (data or ACKs, either direction: the routed fabric's hash, ecmp_t1): the lab
    # keeps routing's real-world timers, so detection (1 ms) comes after RC's retries (49 us)
    assert {(t, int(seed)) for t, seed in zip(failed["fault.0.target"], failed["run.seed"],
                                               strict=True)} == _crossed()

    assert failed["recovery_us"].isna().all() and failed["failed_at_us"].notna().all()
    # each run's own lab outputs
    for rid in local["run_id"].unique():
        for name in ("summary.json", "timeseries.csv", "events.csv", "bandwidth.png"):
            assert (out_dask / "runs" / rid / name).is_file()


def test_real_sweep_resumes_without_rerunning(sweep_file: Path) -> None:
    out = sweep_file.parent / "o"
    first = run_sweep(sweep_file, out=out, workers=1, progress=False)
    assert (first.ran, first.errors) == (4, 0)
    stamp = (out / "runs" / first.table["run_id"].iloc[0] / "summary.json").stat().st_mtime_ns
    again = run_sweep(sweep_file, out=out, workers=2, progress=False)
    assert (again.ran, again.skipped) == (0, 4)
    assert (out / "runs" / first.table["run_id"].iloc[0] / "summary.json").stat().st_mtime_ns \
        == stamp
    pd.testing.assert_frame_equal(first.table, again.table)
    png = again.plot("job_failed", "fault.0.target")
    assert png.is_file() and png.stat().st_size > 10_000


@pytest.mark.slow
def test_bundled_sweep_outcomes(tmp_path: Path) -> None:
    """The bundled example end to end (about a minute): MRC completes every run; RC fails
    exactly when the rebooting T1 carries its pinned plane-0 QP."""
    root = Path(__file__).resolve().parents[1] / "labs"
    path = next(p for p in (root / "sweep-t1-reboot.toml", root / "sweep-t1-reboot.toml.pending")
                if p.is_file())
    table = run_sweep(path, out=tmp_path, workers=2, progress=False).table
    assert set(table["status"]) == {"ok"} and len(table) == 24
    mrc = table[table["transport"] == "mrc"]
    assert set(mrc["outcome"]) == {"completed"} and mrc["recovery_us"].notna().all()
    rc_failed = table[(table["transport"] == "rc") & (table["outcome"] == "failed")]
    assert set(rc_failed["fault.0.target"]) == {"p0.t1.3"} and len(rc_failed) == 3
