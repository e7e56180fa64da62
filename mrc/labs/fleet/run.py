"""``mrc-lab fleet``: run a fleet file and write its tables, summary and plot.

Outputs (``--out DIR``, default ``./mrc-lab-out/<fleet name>/``):

* ``trials.csv``: one row per (job size, trial, transport): interruptions, interruptions
  per day, effective throughput, RC's stall seconds per day (waiting for routing's repair
  and its next retransmission: lost throughput, not an interruption), interruptions by
  fault class;
* ``fleet.csv``: per (job size, transport): the mean and a 90% interval over trials, and
  the mean stall seconds per day;
* ``impacts.csv``: what each fault class does to each job size (from the flow model);
* ``summary.json``: the headline numbers; ``fleet.json``: the inputs as understood (every
  rate resolved) and where the defaults come from; ``fleet.png``: interruptions per day and
  effective throughput against job size, MRC and RC.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mrc import flow
from mrc.flow.transport_model import TransportModel
from mrc.labs.errors import LabError
from mrc.labs.fleet.impact import JobImpacts, job_impacts
from mrc.labs.fleet.montecarlo import RcTimers, simulate
from mrc.labs.fleet.schema import Fleet, load_fleet
from mrc.labs.output.folder import OutputFolder
from mrc.labs.report.summary import write_csv

#: The interval fleet.csv gives around each mean (over trials).
QUANTILES = (0.05, 0.95)


@dataclass
class FleetResult:
    fleet: Fleet
    trials: pd.DataFrame
    table: pd.DataFrame
    impacts: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)

    def plot(self, path: str | Path | None = None) -> Any:
        from mrc.labs.fleet.plot import plot_fleet

        return plot_fleet(self.table, self.summary, path=path)

    def write(self, out: str | Path | OutputFolder) -> list[Path]:
        """Write the result set into ``out`` safely, as a lab result is written
        (:mod:`mrc.labs.output.folder`: a new, empty or mrc-lab folder, filled as a whole, with a
        manifest). Returns the files written."""
        folder = out if isinstance(out, OutputFolder) else OutputFolder(out)
        with folder:
            files = self.write_files(folder.staging)
            return folder.commit(files, {"lab": self.fleet.name, "source": self.fleet.source,
                                         "runtime": "fleet", "seed": self.fleet.seed,
                                         "transports": list(self.summary.get("transports",
                                                                             {}))})

    def write_files(self, out_dir: str | Path) -> list[Path]:
        """Every output file into ``out_dir`` as it is (no checks, no manifest)."""
        from mrc.labs.report.plot import close

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, frame in (("trials.csv", self.trials), ("fleet.csv", self.table),
                            ("impacts.csv", self.impacts)):
            write_csv(frame, out / name)
            written.append(out / name)
        for name, doc in (("summary.json", self.summary), ("fleet.json", self.inputs())):
            (out / name).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            written.append(out / name)
        fig = self.plot(out / "fleet.png")
        close(fig)
        return [*written, out / "fleet.png"]

    def inputs(self) -> dict[str, Any]:
        """The fleet file as understood (every rate resolved) and where the defaults come
        from: fleet.json, the fleet's lab.json."""
        from mrc.labs.fleet import rates as rate_notes

        return {**self.fleet.to_dict(),
                "rate_sources": " ".join((rate_notes.__doc__ or "").split())}

    def text(self) -> str:
        """The table a terminal shows: per job size, both transports side by side."""
        lines = [f"{'GPUs':>8}  {'transport':<10}{'interrupts/day':>16}{'throughput':>12}"
                 f"{'(90% of trials)':>20}"]
        for row in self.table.to_dict("records"):
            lines.append(f"{row['gpus']:>8,}  {row['transport']:<10}"
                         f"{row['interruptions_per_day']:>16.3f}"
                         f"{row['effective_throughput']:>12.3f}"
                         f"{'':>4}{row['throughput_lo']:.3f}..{row['throughput_hi']:.3f}")
        f = self.fleet
        lines.append(f"{f.trials} trials x {f.days:g} days per size, seed {f.seed}; "
                     f"throughput = useful training / ideal (1 = never stopped or slowed)")
        return "\n".join(lines)


def _models(fleet: Fleet) -> dict[str, TransportModel]:
    kinds: dict[str, TransportModel] = {}
    for t in fleet.transports.values():
        if t.kind in kinds:
            raise LabError(f"a fleet compares one MRC and one RC transport; {t.kind!r} is "
                           "given twice", f"transport.{t.name}")
        kinds[t.kind] = flow.transport_model(fleet.fabric, t.name, t.kind, dict(t.params),
                                             fleet.routing)
    for kind in ("mrc", "rc"):
        if kind not in kinds:
            kinds[kind] = flow.transport_model(fleet.fabric, kind, kind, {}, fleet.routing)
    return kinds


def run_fleet(fleet_or_path: str | Path | dict[str, Any] | Fleet, *,
              out: str | Path | None = None) -> FleetResult:
    """Run every job size of a fleet file (see the module docstring)."""
    wall0 = time.perf_counter()
    fleet = load_fleet(fleet_or_path)
    try:
        models = _models(fleet)
    except ValueError as exc:
        raise LabError(str(exc), "transport", fleet.source) from None
    ev_count = models["mrc"].ev_count
    rc = models["rc"]
    timers = RcTimers(tuple(o / 1e12 for o in rc.retry_offsets),
                      None if rc.error_after_ps is None else rc.error_after_ps / 1e12)
    names = {kind: m.name for kind, m in models.items()}
    trial_rows: list[dict[str, Any]] = []
    impact_rows: list[dict[str, Any]] = []
    loss = fleet.rates["optics_degrade"].loss_probability
    for gpus in fleet.gpus:
        impacts = job_impacts(fleet.fabric, gpus, fleet.workload, models["mrc"], rc, ev_count,
                              fleet.seed, loss, fleet.routing)
        impact_rows.extend(_impact_rows(impacts))
        for row in simulate(fleet, impacts, timers):
            row["transport"] = names[str(row["transport"])]
            trial_rows.append(row)
    trials = pd.DataFrame(trial_rows)
    table = _table(trials)
    impacts_frame = pd.DataFrame(impact_rows)
    summary = _summary(fleet, table, models, time.perf_counter() - wall0)
    result = FleetResult(fleet, trials, table, impacts_frame, summary)
    if out is not None:
        result.write(out)
    return result


def _impact_rows(impacts: JobImpacts) -> list[dict[str, Any]]:
    rows = []
    for side, table in (("host", impacts.host_link), ("fabric", impacts.fabric)):
        for cls, imp in table.items():
            rows.append({"gpus": impacts.gpus, "class": cls, "side": side,
                         "mrc_fraction": imp.mrc_fraction, "rc_exposure": imp.rc_exposure,
                         "rc_fraction": imp.rc_fraction, "rc_repair_s": imp.rc_repair_s})
    return rows


def _table(trials: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (gpus, name), g in trials.groupby(["gpus", "transport"], sort=False):
        per_day = g["interruptions_per_day"]
        thr = g["effective_throughput"]
        rows.append({"gpus": int(gpus), "transport": name,
                     "interruptions_per_day": float(per_day.mean()),
                     "interruptions_lo": float(per_day.quantile(QUANTILES[0])),
                     "interruptions_hi": float(per_day.quantile(QUANTILES[1])),
                     "effective_throughput": float(thr.mean()),
                     "throughput_lo": float(thr.quantile(QUANTILES[0])),
                     "throughput_hi": float(thr.quantile(QUANTILES[1])),
                     "stall_s_per_day": float(g["stall_s_per_day"].mean())})
    return pd.DataFrame(rows).sort_values(["gpus", "transport"], kind="mergesort") \
        .reset_index(drop=True)


def _summary(fleet: Fleet, table: pd.DataFrame, models: dict[str, TransportModel],
             wall_s: float) -> dict[str, Any]:
    by_size: dict[str, dict[str, Any]] = {}
    for row in table.to_dict("records"):
        entry = by_size.setdefault(str(row["gpus"]), {})
        entry[row["transport"]] = {
            "interruptions_per_day": round(row["interruptions_per_day"], 4),
            "effective_throughput": round(row["effective_throughput"], 4)}
    transports: dict[str, dict[str, Any]] = {}
    for kind, m in models.items():
        rows = table[table["transport"] == m.name]
        transports[m.name] = {"kind": kind, **{
            f"interruptions_per_day_{r['gpus']}": round(r["interruptions_per_day"], 4)
            for r in rows.to_dict("records")}, **{
            f"effective_throughput_{r['gpus']}": round(r["effective_throughput"], 4)
            for r in rows.to_dict("records")}}
    return {"fleet": fleet.name, "model": "fleet", "seed": fleet.seed, "trials": fleet.trials,
            "days": fleet.days, "workload": fleet.workload,
            "comm_fraction": fleet.comm_fraction,
            "checkpoint_interval_min": fleet.checkpoint_s / 60,
            "restart_min": fleet.restart_s / 60, "wall_s": round(wall_s, 2),
            "routing": {"ecmp": fleet.routing.ecmp,
                        "link_down_detect_us": fleet.routing.link_down_detect_us,
                        "routing_convergence_us": fleet.routing.routing_convergence_us},
            "by_gpus": by_size, "transports": transports}
