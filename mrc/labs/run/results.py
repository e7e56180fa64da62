"""What a run of a lab produced: each transport's run, and the lab's result assembled from
them (tables, summary, figures), with no simulator object needed.

:func:`assemble` is shared by every runtime and by the flow model (:mod:`mrc.labs.run.flow`):
each supplies :class:`TransportRun` objects and gets the same tables, summary.json and plots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mrc.labs.output.folder import OutputFolder
from mrc.labs.report import collective as coll
from mrc.labs.report import summary as summ
from mrc.labs.report.fault_reach import off_path_faults
from mrc.labs.report.ideal import flow_ideal_us
from mrc.labs.report.stalls import stall_stats
from mrc.labs.report.table import comparison_table, goodput_sum
from mrc.labs.run.time_scale import summary_block
from mrc.labs.schema.lab import Collective, Lab, TransportSpec
from mrc.labs.schema.schedule import fault_windows
from mrc.stack.stalls import stall_threshold_ps

#: The runtime of a packet-simulator run, as summary.json names it.
RUNTIME = "sim"


@dataclass
class TransportRun:
    """What one transport's run produced, before it is summarised."""

    name: str
    kind: str
    outcome: str
    failed_at_us: float | None
    failure_reason: str | None
    end_us: float
    sim_end_us: float
    totals: dict[str, Any]
    timeseries: pd.DataFrame
    events: pd.DataFrame
    nic_ceiling_gbps: float
    ceiling_nics: int
    iterations: list[dict[str, Any]] = field(default_factory=list)
    flows: list[dict[str, Any]] = field(default_factory=list)
    #: write_bw: post -> sender CQE latency of the completed WRITEs (p50, p99, max in us)
    cqe_latency_us: dict[str, float | None] | None = None


@dataclass
class LabResult:
    """Tables first (tidy pandas), then the summary and pictures derived from them."""

    lab: Lab
    summary: dict[str, Any]
    timeseries: pd.DataFrame
    events: pd.DataFrame
    collective: pd.DataFrame | None = None
    iterations: pd.DataFrame | None = None
    flows: pd.DataFrame | None = None
    fault_spans: list[dict[str, Any]] = field(default_factory=list)
    out_dir: Path | None = None

    def plot(self, path: str | Path | None = None) -> Any:
        """The bandwidth figure (a matplotlib Figure); saved too when ``path`` is given."""
        from mrc.labs.report.plot import plot_bandwidth

        return plot_bandwidth(self.timeseries, self.summary, faults=self.fault_spans,
                              bin_us=self.lab.run.bin_us, subtitle=self.lab.description,
                              overrides=self.lab.overrides, iterations=self.iterations,
                              path=path)

    def table(self) -> str:
        return comparison_table(self.summary)

    def collective_text(self) -> str | None:
        if self.collective is None or not isinstance(self.lab.workload, Collective):
            return None
        return coll.format_table(self.collective, kind=self.lab.workload.kind,
                                 ranks=len(self.lab.workload.hosts),
                                 nic_ceiling_gbps=self.summary["nic_goodput_ceiling_gbps"])

    def write_files(self, folder: str | Path) -> list[Path]:
        """Every file of the result set, written into ``folder`` as it is (no checks, no
        manifest): timeseries.csv, events.csv, summary.json, lab.json, bandwidth.png, plus
        collective.csv, iterations.csv and busbw.png for collectives or flows.csv for flow
        workloads. :meth:`write` is the safe way to a folder of results."""
        from mrc.labs.report.plot import close, plot_busbw

        out = Path(folder)
        written = summ.write_outputs(out, summary=self.summary, timeseries=self.timeseries,
                                     events=self.events, collective=self.collective,
                                     iterations=self.iterations, flows=self.flows,
                                     lab=self.lab.to_dict())
        fig = self.plot(out / "bandwidth.png")
        close(fig)
        written.append(out / "bandwidth.png")
        if self.collective is not None and self.collective["size_bytes"].nunique() > 1:
            fig = plot_busbw(self.collective, self.summary, path=out / "busbw.png")
            close(fig)
            written.append(out / "busbw.png")
        return written

    def write(self, out: str | Path | OutputFolder) -> list[Path]:
        """Write the result set into ``out`` safely (:mod:`mrc.labs.output.folder`): a folder that
        is new, empty or made by mrc-lab, filled as a whole or not at all, with a manifest.
        ``out`` may be an :class:`OutputFolder` opened before the run (the CLI does that, so
        a bad folder is refused before anything runs). Returns the files written."""
        folder = out if isinstance(out, OutputFolder) else OutputFolder(out)
        with folder:
            files = self.write_files(folder.staging)
            final = folder.commit(files, manifest_info(self))
        self.out_dir = folder.path
        return final

    def __repr__(self) -> str:
        return f"LabResult({self.lab.name!r})\n{self.table()}"


def manifest_info(result: LabResult) -> dict[str, Any]:
    """What a result folder's manifest records about the run, beside its files."""
    lab = result.lab
    return {"lab": lab.name, "source": lab.source, "runtime": result.summary.get("runtime"),
            "seed": lab.run.seed, "overrides": dict(lab.overrides),
            "transports": list(result.summary.get("transports", {}))}


def fault_spans(lab: Lab, windows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Fault windows for the plot (``windows``: ``fault_windows``' entries, as ``assemble``
    marks them): each flap's down periods are their own spans."""
    out = []
    for window, fault in zip(windows, lab.faults, strict=True):
        entry = dict(window)
        entry["params"] = dict(fault.params)
        if fault.kind == "link_flap":
            p = fault.params
            entry["spans"] = [(fault.at_us + k * p["period_us"],
                               fault.at_us + k * p["period_us"] + p["down_us"])
                              for k in range(p["count"])]
        out.append(entry)
    return out


def _concat(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and not f.empty]
    if not frames:
        return pd.DataFrame(columns=["time_us", "transport", "metric", "value"])
    return pd.concat(frames, ignore_index=True)


def assemble(lab: Lab, runs: Sequence[TransportRun], *, wall_s: float,
             runtime: str = RUNTIME) -> LabResult:
    """Tables and summary of a finished lab (no simulator objects needed)."""
    windows = fault_windows(lab)
    for i, why in off_path_faults(lab).items():
        windows[i]["off_path"] = why  # (summary.json and the table say so)
    # fault events are the entries' starts and ends (a flap's inner downs/ups are its body)
    action_times = sorted({w["at_us"] for w in windows}
                          | {w["until_us"] for w in windows if w["until_us"] is not None})
    nic_ceiling = runs[0].nic_ceiling_gbps if runs else lab.fabric.goodput_ceiling_gbps()
    nics = max((r.ceiling_nics for r in runs), default=1)
    iterations = _concat(pd.DataFrame(r.iterations) for r in runs) \
        if any(r.iterations for r in runs) else None
    flows = _concat(pd.DataFrame(r.flows) for r in runs) if any(r.flows for r in runs) else None
    table = None
    if isinstance(lab.workload, Collective):
        table = coll.collective_table(
            iterations if iterations is not None else coll.iteration_frame([]),
            kind=lab.workload.kind, ranks=len(lab.workload.hosts), nic_ceiling_gbps=nic_ceiling)
    per_transport: dict[str, dict[str, Any]] = {}
    for r in runs:
        goodput = summ.goodput_series(r.timeseries, r.name)
        entry = summ.transport_summary(
            kind=r.kind, outcome=r.outcome, failed_at_us=r.failed_at_us,
            failure_reason=r.failure_reason, totals=r.totals, goodput=goodput, events=r.events,
            bin_us=lab.run.bin_us, end_us=r.end_us, faults=windows,
            fault_event_times_us=action_times)
        entry["sim_end_us"] = summ._r(r.sim_end_us)
        if r.cqe_latency_us is not None:
            entry["cqe_latency_us"] = {k: summ._r(v) for k, v in r.cqe_latency_us.items()}
        entry["cnps_sent"] = int(r.totals.get("cnps_sent", 0) or 0)
        if "placement_gaps" in r.totals:  # (the packet runtimes; the flow model has none)
            entry["stalls"] = stall_stats(
                r.totals["placement_gaps"], faults=windows, outcome=r.outcome,
                failed_at_us=r.failed_at_us, end_us=r.end_us,
                threshold_ps=stall_threshold_ps(lab.fabric), time_scale=lab.run.time_scale)
        pfc = summ.pfc_stats(r.totals)
        if pfc is not None:
            entry["pfc"] = pfc
        queue = summ.queue_stats(r.timeseries, r.name, bin_us=lab.run.bin_us, end_us=r.end_us)
        if queue is not None:
            entry["queue"] = queue
        fairness = summ.flow_fairness(r.timeseries, r.name, bin_us=lab.run.bin_us,
                                      end_us=r.end_us)
        if fairness is not None:
            entry["fairness"] = fairness
        per_flow = summ.flow_goodput(r.timeseries, r.name, bin_us=lab.run.bin_us,
                                     end_us=r.end_us, faults=windows)
        if per_flow is not None:
            entry["flow_goodput_gbps"] = per_flow
        if flows is not None:
            entry["flows"] = summ.flow_stats(flows[flows["transport"] == r.name],
                                             flow_ideal_us(lab))
        if table is not None:
            rows = table[table["transport"] == r.name]
            entry["collective"] = [
                {"size_bytes": int(x["size_bytes"]), "time_us": summ._r(x["time_us"]),
                 "algbw_GBps": summ._r(x["algbw_GBps"]), "busbw_GBps": summ._r(x["busbw_GBps"]),
                 "busbw_pct_ceiling": summ._r(x["busbw_pct_ceiling"], 1), "status": x["status"]}
                for x in rows.to_dict("records")]
        per_transport[r.name] = entry
    sim_time = max((r.sim_end_us for r in runs), default=0.0)
    summary = summ.build_summary(
        lab=lab.name, seed=lab.run.seed, runtime=runtime, sim_time_us=sim_time, wall_s=wall_s,
        goodput_ceiling_gbps=nic_ceiling * nics, faults=windows, transports=per_transport,
        extra={"workload": lab.workload.kind, "duration_us": summ._r(lab.run.duration_us),
               "bin_us": summ._r(lab.run.bin_us, 6),
               "nic_goodput_ceiling_gbps": summ._r(nic_ceiling), "ceiling_nics": nics,
               "goodput_sum": goodput_sum(lab), "time_scale": summary_block(lab, [lab.transports.get(r.name)
                                                        or TransportSpec(r.name, r.kind, {})
                                                        for r in runs])})
    for entry, fault in zip(summary["faults"], lab.faults, strict=True):
        if fault.drawn_from:  # a target drawn from the seed (mrc.labs.schema.targets)
            entry["drawn_from"] = fault.drawn_from
    timeseries = _concat(r.timeseries for r in runs)
    events = _concat(r.events for r in runs)
    return LabResult(lab=lab, summary=summary, timeseries=timeseries, events=events,
                     collective=table, iterations=iterations, flows=flows,
                     fault_spans=fault_spans(lab, windows))
