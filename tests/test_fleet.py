"""The fleet model: calibration of the default rates, MRC versus RC, determinism, outputs,
bad input (exit 2, one line) and sweeps over the flow and fleet models."""

from __future__ import annotations

import copy
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from mrc.cli import main
from mrc.labs.errors import LabError
from mrc.labs.fleet import load_fleet, run_fleet
from mrc.labs.fleet.impact import footprint
from mrc.labs.fleet.schema import bundled_dir
from mrc.labs.schema.files import bundled_names
from mrc.labs.sweep.execute import run_sweep
from mrc.labs.sweep.file import load_sweep

DEFAULT = bundled_dir() / "default.toml"


def raw(**changes: Any) -> dict[str, Any]:
    doc = tomllib.loads(DEFAULT.read_text(encoding="utf-8"))
    for path, value in changes.items():
        node = doc
        *head, last = path.split("__")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return doc


def small(gpus: list[int], trials: int = 4, seed: int = 1) -> dict[str, Any]:
    return raw(job__gpus=gpus, run__trials=trials, run__seed=seed)


def test_defaults_reproduce_a_failure_every_two_to_three_days_at_1000_gpus() -> None:
    result = run_fleet(small([1024], trials=8))
    mrc = result.table[result.table["transport"] == "mrc"].iloc[0]
    # the calibration check the issue names; it comes from the rates (Llama 3), not a knob
    assert 1 / 3 <= mrc["interruptions_per_day"] <= 1 / 2


def test_mrc_never_worse_than_rc_and_both_worse_with_size() -> None:
    result = run_fleet(small([1024, 16384], trials=3))
    table = result.table.set_index(["gpus", "transport"])
    for gpus in (1024, 16384):
        assert table.loc[(gpus, "mrc"), "interruptions_per_day"] <= \
            table.loc[(gpus, "rc"), "interruptions_per_day"]
        assert table.loc[(gpus, "mrc"), "effective_throughput"] >= \
            table.loc[(gpus, "rc"), "effective_throughput"]
    for name in ("mrc", "rc"):
        assert table.loc[(16384, name), "effective_throughput"] < \
            table.loc[(1024, name), "effective_throughput"]


def test_impacts_come_from_the_flow_model() -> None:
    result = run_fleet(small([4096], trials=1))
    imp = result.impacts.set_index(["class", "side"])
    assert imp.loc[("nic_port", "host"), "mrc_fraction"] == pytest.approx(7 / 8)
    assert imp.loc[("t1_failure", "fabric"), "mrc_fraction"] > 0.999
    assert imp.loc[("t1_failure", "fabric"), "rc_exposure"] == pytest.approx(1.0)
    fp = footprint(load_fleet(DEFAULT).fabric, 4096)
    assert (fp.t0s, fp.t1s, fp.fabric_links) == (16 * 8, 8 * 256, 16 * 8 * 256)


def test_seeded_and_repeatable() -> None:
    a = run_fleet(small([2048], trials=3))
    b = run_fleet(small([2048], trials=3))
    c = run_fleet(small([2048], trials=3, seed=2))
    assert a.trials.equals(b.trials)
    assert not a.trials.equals(c.trials)


BAD = [
    ({"rates__host__per_year": -1}, "rates.host.per_year: must not be negative"),
    ({"rates__t1_reboot__down_s": 0}, "rates.t1_reboot.down_s: must be greater than 0"),
    ({"rates__link_down__repair_h": 1e9}, "rates.link_down.repair_h: 1e+09 h is longer than"),
    ({"rates__warp_core": {"per_year": 1}}, "rates.warp_core: unknown key"),
    ({"rates__nic__down_s": 3}, "rates.nic.down_s: unknown key"),
    ({"job__gpus": [1024, 300000]}, "job.gpus.1: 300,000 GPUs do not fit"),
    ({"job__workload": "ring"}, "job.workload: 'ring' is not one of"),
    ({"kind": "lab"}, "kind: missing or wrong file kind"),
    ({"run__trials": 0}, "run.trials: must not be below 1"),
]


@pytest.mark.parametrize(("changes", "message"), BAD)
def test_bad_fleet_files_exit_2_with_one_line(tmp_path: Path, changes: dict[str, Any],
                                              message: str) -> None:
    doc = raw(**changes)
    path = tmp_path / "bad.toml"
    path.write_text(_toml(doc), encoding="utf-8")
    res = CliRunner().invoke(main, ["fleet", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and line.startswith(f"mrc-lab: error: {path}: ")
    assert message in line


def test_non_finite_rates_are_refused() -> None:
    with pytest.raises(LabError, match="must be a finite number"):
        load_fleet(raw(rates__host__per_year=float("inf")))
    assert load_fleet(raw(rates__link_down__repair_h=1e9, run__allow_long_repairs=True))


def test_fleet_files_stay_out_of_the_lab_listing() -> None:
    assert "default" not in bundled_names()
    res = CliRunner().invoke(main, ["labs"])
    assert res.exit_code == 0 and "default" not in res.output


def test_cli_fleet(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["fleet", "--trials", "2", "--set", "job.gpus=[1024]",
                                    "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "interrupts/day" in res.output
    for name in ("fleet.csv", "trials.csv", "impacts.csv", "summary.json", "fleet.png",
                 "fleet.json"):
        assert (tmp_path / name).is_file()


def test_sweeps_run_the_flow_and_the_fleet_models(tmp_path: Path) -> None:
    flow = load_sweep({"lab": "t1-reboot", "model": "flow",
                       "grid": {"fault.0.target": ["p0.t1.3"]}},
                      base_dir=tmp_path)
    result = run_sweep(flow, out=tmp_path / "flow", workers=1, progress=False)
    assert set(result.table["status"]) == {"ok"}
    assert set(result.table["runtime"]) == {"flow"}
    fleet = load_sweep({"lab": str(DEFAULT), "set": {"run.trials": 1, "job.gpus": [1024]},
                        "grid": {"rates.t0_reboot.per_year": [0.01, 1.0]}},
                       base_dir=tmp_path)
    assert fleet.model == "fleet"
    table = run_sweep(fleet, out=tmp_path / "fleet", workers=1, progress=False).table
    rc = table[table["transport"] == "rc"].sort_values("rates.t0_reboot.per_year")
    assert list(rc["interruptions_per_day_1024"])[0] < list(rc["interruptions_per_day_1024"])[1]
    with pytest.raises(LabError, match="model: 'fleet' is not one of"):
        load_sweep({"lab": "t1-reboot", "model": "fleet", "grid": {"run.seed": [1, 2]}},
                   base_dir=tmp_path)


def _toml(doc: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer for these tests (tables of scalars and lists)."""
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in doc.items():
        if isinstance(value, dict):
            tables.append((f"{prefix}{key}", value))
        else:
            lines.append(f"{key} = {_value(value)}")
    for name, table in tables:
        body = _toml(copy.deepcopy(table), f"{name}.")
        lines.append(f"[{name}]")
        lines.append(body)
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


@pytest.mark.parametrize("kind", ["flow", "fleet"])
def test_flow_and_fleet_sweeps_on_processes_and_dask_agree(tmp_path: Path, kind: str) -> None:
    """The new models go through the sweep executors as the packet model does: a local pool
    of 2 processes and a real Dask LocalCluster (in process) give the same table."""
    distributed = pytest.importorskip("distributed")
    if kind == "flow":
        doc = {"lab": "t1-reboot", "model": "flow",
               "grid": {"fault.0.target": ["p1.t1.3", "p1.t1.0"], "run.seed": [1, 2]}}
    else:
        doc = {"lab": str(DEFAULT), "set": {"run.trials": 1, "job.gpus": [1024]},
               "grid": {"rates.t1_reboot.per_year": [0.01, 1.0]}}
    local = run_sweep(load_sweep(doc, base_dir=tmp_path), out=tmp_path / "local", workers=2,
                      progress=False).table
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        dask = run_sweep(load_sweep(doc, base_dir=tmp_path), out=tmp_path / "dask",
                         scheduler=cluster.scheduler_address, progress=False).table
    assert set(local["status"]) == {"ok"}

    def same(t: pd.DataFrame) -> pd.DataFrame:
        return t[[c for c in t.columns if not c.endswith("wall_s")]].reset_index(drop=True)

    pd.testing.assert_frame_equal(same(local), same(dask))


def test_registering_the_fleet_command_does_not_load_pandas() -> None:
    """Every ``mrc-lab`` command imports the fleet package to register ``fleet``; pandas
    (two thirds of ``mrc-lab --help``'s 0.35 s) comes only with a fleet run."""
    code = ("import sys, mrc.cli, mrc.labs.fleet as f; assert 'pandas' not in sys.modules; "
            "f.run_fleet; assert 'pandas' in sys.modules")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


def _only(classes: dict[str, float]) -> dict[str, Any]:
    """The default fleet with every rate 0 but ``classes`` (per year)."""
    doc = small([4096], trials=2)
    for cls in doc["rates"]:
        doc["rates"][cls]["per_year"] = classes.get(cls, 0.0)
    return doc


def test_rc_rides_t1_and_link_faults_out_on_its_routed_fabric() -> None:
    """T1s, T0-T1 links and flaps never interrupt RC (routing moves its QPs after detection
    or convergence): they cost it a stall, charged as lost throughput."""
    result = run_fleet(_only({"t1_failure": 2.0, "t1_reboot": 2.0, "link_down": 2.0,
                              "link_flap": 2.0}))
    rc = result.trials[result.trials["transport"] == "rc"]
    fabric = ("t1_failure", "t1_reboot")
    assert (rc[[f"interruptions_{c}" for c in fabric]] == 0).all().all()
    assert (rc["stall_s_per_day"] > 0).all()
    assert (rc["effective_throughput"] < 1).all()
    mrc = result.trials[result.trials["transport"] == "mrc"]
    assert (mrc["interruptions"] == 0).all()


def test_black_holes_interrupt_rc_only() -> None:
    """A black-holing T1 (routing never repairs it; the operator drains it after an hour):
    RC's exposed QPs error at the retry budget, 7 x 4.3 s; MRC maps the paths out."""
    result = run_fleet(_only({"t1_blackhole": 5.0}))
    by = result.trials.groupby("transport")["interruptions_t1_blackhole"].sum()
    assert by["mrc"] == 0 and by["rc"] > 0


def test_rc_stall_is_its_first_expiry_after_the_repair() -> None:
    """The adaptive ladder at NCCL's timeout 20 (4.295 s cap), to the picosecond: expiries at
    131.072, 393.216, 917.504, 1966.08 us ... A T1's repair (detection, 1 ms) costs 1966.08 us,
    a far T0-T1 link's (convergence, 1 s) 1073.610752 ms; a path back after the budget
    (7 x 4.294967296 s) errors at the budget."""
    from mrc import flow
    from mrc.labs.fleet.montecarlo import RcTimers

    fleet = load_fleet(DEFAULT)
    rc = flow.transport_model(fleet.fabric, "rc", "rc", {"timeout_exp": 20, "retry_cnt": 7},
                              fleet.routing)
    assert rc.retry_offsets[:4] == (131_072_000, 393_216_000, 917_504_000, 1_966_080_000)
    assert rc.error_after_ps == 7 * 4_294_967_296_000
    timers = RcTimers(tuple(o / 1e12 for o in rc.retry_offsets), rc.error_after_ps / 1e12)
    survives, stall = timers.stall(np.array([1e-3, 1.0, 31.0]))
    assert survives.tolist() == [True, True, False]
    assert stall.tolist() == pytest.approx([1.96608e-3, 1.073610752, 30.064771072], abs=1e-12)


def test_routing_section_of_a_fleet_file() -> None:
    fleet = load_fleet(raw(routing__routing_convergence_us=2_000_000))
    assert fleet.routing.routing_convergence_us == 2_000_000
    assert fleet.to_dict()["routing"]["routing_convergence_us"] == 2_000_000
    with pytest.raises(LabError, match="routing.routing_convergence_us"):
        load_fleet(raw(routing__routing_convergence_us=1))
