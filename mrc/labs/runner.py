"""Run a lab: every transport on the same fabric, workload, fault schedule and seed.

``run_lab`` is the Python API behind ``mrc-lab run`` (and notebooks): it validates the lab
completely first (a :class:`LabError` before anything runs), then drives one stack per
transport through the run, and returns a :class:`LabResult` of pandas tables plus the
summary dict; with ``out`` it also writes the files. The stack is built by a factory
(``SimStack`` by default), so the live runtime can plug its own stack into the same runner.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mrc.labs import collective as coll
from mrc.labs import summary as summ
from mrc.labs.errors import LabError
from mrc.labs.faults import install
from mrc.labs.schema import (
    TRANSPORT_KINDS,
    Collective,
    Lab,
    TransportSpec,
    check_bin,
    check_float,
    check_int,
    fault_windows,
    load_lab,
    materialize,
    set_keys,
    validate,
)
from mrc.labs.workloads import Job, make_job
from mrc.units import PS_PER_US
from topology.spec import FabricSpec

#: The packet simulator is meant for lab-sized fabrics; refuse what would not fit in memory.
MAX_SIM_NIC_PORTS = 16_384
PROGRESS_DELAY_S = 2.0
RUNTIME = "sim"

StackFactory = Callable[[FabricSpec, int, int, str], Any]


def sim_stack_factory(spec: FabricSpec, seed: int, bin_ps: int, transport_name: str) -> Any:
    from mrc.sim.stack import SimStack

    return SimStack(spec, seed, bin_ps, transport_name)


# ====================================================================== results
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
        from mrc.labs.plot import plot_bandwidth

        return plot_bandwidth(self.timeseries, self.summary, faults=self.fault_spans,
                              bin_us=self.lab.run.bin_us, subtitle=self.lab.description,
                              iterations=self.iterations, path=path)

    def table(self) -> str:
        return comparison_table(self.summary)

    def collective_text(self) -> str | None:
        if self.collective is None or not isinstance(self.lab.workload, Collective):
            return None
        return coll.format_table(self.collective, kind=self.lab.workload.kind,
                                 ranks=len(self.lab.workload.hosts),
                                 nic_ceiling_gbps=self.summary["nic_goodput_ceiling_gbps"])

    def write(self, out_dir: str | Path) -> list[Path]:
        """timeseries.csv, events.csv, summary.json, bandwidth.png (+ collective.csv and
        iterations.csv, or flows.csv) and lab.json (the resolved lab) into ``out_dir``."""
        from mrc.labs.plot import close

        out = Path(out_dir)
        written = summ.write_outputs(out, summary=self.summary, timeseries=self.timeseries,
                                     events=self.events, collective=self.collective,
                                     iterations=self.iterations, flows=self.flows,
                                     lab=self.lab.to_dict())
        fig = self.plot(out / "bandwidth.png")
        close(fig)
        self.out_dir = out
        return [*written, out / "bandwidth.png"]

    def __repr__(self) -> str:
        return f"LabResult({self.lab.name!r})\n{self.table()}"


def comparison_table(summary: Mapping[str, Any]) -> str:
    """The short per-transport comparison printed after a run (goodput in Gb/s)."""
    def num(value: Any, fmt: str = ".1f") -> str:
        return "-" if value is None else format(value, fmt)

    header = (f"{'transport':<14}{'kind':<5}{'outcome':<11}{'before':>8}{'during':>8}"
              f"{'after':>8}{'min':>8}{'detect_us':>11}{'recover_us':>11}{'retx_pkts':>10}"
              f"{'drops':>8}{'bad_evs':>8}")
    lines = [header]
    for name, t in summary.get("transports", {}).items():
        g = t["goodput_gbps"]
        lines.append(
            f"{name:<14}{t['kind']:<5}{t['outcome']:<11}{num(g['before']):>8}"
            f"{num(g['during']):>8}{num(g['after']):>8}{num(g['min']):>8}"
            f"{num(t['detect_us']):>11}{num(t['recovery_us']):>11}"
            f"{t['retransmitted_packets']:>10}{t['dropped_packets']:>8}"
            f"{t['paths_marked_bad']:>8}")
        if t.get("failure_reason"):
            lines.append(f"{'':<14}failed at {num(t['failed_at_us'])} us: {t['failure_reason']}")
    ceiling = summary.get("goodput_ceiling_gbps")
    if ceiling is not None:
        lines.append(f"goodput in Gb/s (both directions summed); ceiling {ceiling:.1f} Gb/s")
    return "\n".join(lines)


# ====================================================================== preparing a run
def prepare(lab_or_path: str | Path | Mapping[str, Any] | Lab, *, seed: int | None = None,
            bin_us: float | None = None,
            overrides: Mapping[str, Any] | None = None,
            max_nic_ports: int | None = MAX_SIM_NIC_PORTS) -> Lab:
    """Load and validate, applying command-line style overrides (all before any run).
    ``max_nic_ports``: the packet simulator's size limit (None: no limit, the flow model)."""
    lab = load_lab(lab_or_path)
    if overrides:
        lab = validate(set_keys(materialize(lab), overrides), name=lab.name, source=lab.source,
                       base_dir=lab.base_dir)
    run = lab.run
    if seed is not None:
        run = dataclasses.replace(run, seed=check_int(seed, "--seed", minimum=0,
                                                      maximum=2**63 - 1))
    if bin_us is not None:
        width = check_float(bin_us, "--bin-us", gt=0)
        check_bin(width, run.duration_us, "--bin-us")
        run = dataclasses.replace(run, bin_us=width)
    if run is not lab.run:
        lab = dataclasses.replace(lab, run=run)
    ports = lab.fabric.hosts * lab.fabric.planes
    if max_nic_ports is not None and ports > max_nic_ports:
        raise LabError(f"{ports:,} NIC ports is more than the packet simulator runs "
                       f"(at most {max_nic_ports:,}); use a smaller fabric or --model flow",
                       "fabric", lab.source)
    return lab


def select_transports(lab: Lab, wanted: str | Sequence[str] | None) -> list[TransportSpec]:
    """The lab's transports, or the named subset (a bare kind name gets default params)."""
    if wanted is None:
        return list(lab.transports.values())
    if isinstance(wanted, str):
        wanted = [w.strip() for w in wanted.split(",")]
    out: list[TransportSpec] = []
    for name in dict.fromkeys(wanted):
        if not name:
            raise LabError("empty transport name", "--transport")
        if name in lab.transports:
            out.append(lab.transports[name])
        elif name in TRANSPORT_KINDS:
            out.append(TransportSpec(name, name, {}))
        else:
            known = ", ".join(lab.transports)
            raise LabError(f"unknown transport {name!r}; the lab defines: {known} "
                           f"(mrc and rc are always available)", "--transport")
    if not out:
        raise LabError("no transport selected", "--transport")
    return out


# ====================================================================== running
def run_lab(path_or_spec: str | Path | Mapping[str, Any] | Lab, *,
            out: str | Path | None = None, seed: int | None = None,
            transports: str | Sequence[str] | None = None, bin_us: float | None = None,
            progress: bool = True, overrides: Mapping[str, Any] | None = None,
            stack_factory: StackFactory | None = None, runtime: str = RUNTIME,
            live: Mapping[str, Any] | None = None) -> LabResult:
    """Run a lab (path, bundled name, dict or :class:`Lab`) and return its tables.

    ``out``: directory to write the result files into (nothing is written when None).
    ``overrides``: ``{dotted.key: value}`` applied to the lab before validation.
    ``runtime``: ``"sim"`` (the packet simulator) or ``"live"`` (real UDP datagrams through
    the user-space fabric in dilated wall-clock time, :func:`mrc.live.runner.run_live`, which
    takes the ``live`` options: dilation, pcap, bind_host, allow_non_loopback...).
    A transport whose job fails is a result (``outcome == "failed"``), not an exception;
    bad input raises :class:`LabError` before anything runs.
    """
    if runtime == "live":
        from mrc.live.runner import run_live

        return run_live(path_or_spec, out=out, seed=seed, transports=transports, bin_us=bin_us,
                        progress=progress, overrides=overrides, **dict(live or {}))
    if runtime != RUNTIME:
        raise LabError(f"unknown runtime {runtime!r}; known: sim, live", "--runtime")
    if live:
        raise LabError("live options need --runtime live", "--runtime")
    wall0 = time.perf_counter()
    lab = prepare(path_or_spec, seed=seed, bin_us=bin_us, overrides=overrides)
    specs = select_transports(lab, transports)
    factory = stack_factory or sim_stack_factory
    runs = [run_transport(lab, spec, factory, progress=progress) for spec in specs]
    result = assemble(lab, runs, wall_s=time.perf_counter() - wall0)
    if out is not None:
        result.write(out)
    return result


def run_transport(lab: Lab, spec: TransportSpec, factory: StackFactory, *,
                  progress: bool = False) -> TransportRun:
    """One transport through the whole lab on a fresh stack."""
    bin_ps = int(round(lab.run.bin_us * PS_PER_US))
    duration_ps = int(round(lab.run.duration_us * PS_PER_US))
    stack = factory(lab.fabric, lab.run.seed, bin_ps, spec.name)
    sim = stack.sim
    job = make_job(stack, lab.workload, spec.kind, dict(spec.params), lab.run.seed)
    job.start()
    install(stack, lab)
    _advance(sim, job, duration_ps, bin_ps, progress, f"{lab.name} [{spec.name}]")
    if not job.finite:
        job.stop_posting()
        grace_end = duration_ps + int(round(lab.run.grace_us * PS_PER_US))
        while job.outstanding and not job.failed and sim.now < grace_end:
            sim.run(grace_end)  # stops early when the last message completes
            job.poll(sim.now)
    job.poll(sim.now)
    sim_end_ps = sim.now
    end_ps = min(sim_end_ps, duration_ps)
    return _collect(lab, spec, stack, job, end_ps, sim_end_ps)


def _advance(sim: Any, job: Job, duration_ps: int, bin_ps: int, progress: bool,
             desc: str) -> None:
    """Run to the end of the lab (or until a finite job is done), with a progress bar that
    only appears when the run takes more than a couple of seconds."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=round(duration_ps / PS_PER_US), unit="us", desc=desc, leave=False,
                   delay=PROGRESS_DELAY_S, file=sys.stderr, dynamic_ncols=True)
    chunk = max(bin_ps, duration_ps // 400, 1)
    shown = 0
    try:
        while sim.now < duration_ps:
            target = min(sim.now + chunk, duration_ps)
            sim.run(target)
            job.poll(sim.now)
            if bar is not None:
                now_us = round(sim.now / PS_PER_US)
                bar.update(now_us - shown)
                shown = now_us
            if job.finite and (job.finished or job.failed):
                break
            if sim.now < target:  # stopped early by something other than the job
                break
    finally:
        if bar is not None:
            bar.close()


def _frame_with_transport(frame: pd.DataFrame | None, name: str) -> pd.DataFrame:
    if frame is None:
        return pd.DataFrame(columns=["time_us", "transport", "kind", "target"])
    frame = frame.copy()
    if "transport" not in frame.columns:
        frame.insert(1 if "time_us" in frame.columns else 0, "transport", name)
    return frame


def _collect(lab: Lab, spec: TransportSpec, stack: Any, job: Job, end_ps: int,
             sim_end_ps: int) -> TransportRun:
    ts = _frame_with_transport(stack.timeseries(), spec.name)
    ts = ts[ts["time_us"] < end_ps / PS_PER_US - 1e-9].reset_index(drop=True)
    events = _frame_with_transport(stack.events(), spec.name)
    if not events.empty:
        events = events.sort_values("time_us", kind="mergesort").reset_index(drop=True)
    iterations = [{"transport": spec.name, "size_bytes": r.size_bytes, "iteration": r.iteration,
                   "warmup": r.warmup, "start_us": r.start_ps / PS_PER_US,
                   "time_us": None if r.end_ps is None or not r.ok
                   else (r.end_ps - r.start_ps) / PS_PER_US, "ok": r.ok}
                  for r in job.iterations()]
    flows = [{"transport": spec.name, "flow_id": f.flow_id, "src": f.src, "dst": f.dst,
              "size_bytes": f.size_bytes, "start_us": f.start_ps / PS_PER_US,
              "end_us": None if f.end_ps is None else f.end_ps / PS_PER_US,
              "fct_us": None if f.end_ps is None or not f.ok
              else (f.end_ps - f.start_ps) / PS_PER_US, "ok": f.ok}
             for f in job.flows()]
    return TransportRun(
        name=spec.name, kind=spec.kind, outcome=job.outcome(),
        failed_at_us=None if job.failed_at_ps is None else job.failed_at_ps / PS_PER_US,
        failure_reason=job.failure_reason, end_us=end_ps / PS_PER_US,
        sim_end_us=sim_end_ps / PS_PER_US, totals=dict(stack.totals()), timeseries=ts,
        events=events, nic_ceiling_gbps=float(stack.goodput_ceiling_gbps()),
        ceiling_nics=job.ceiling_nics, iterations=iterations, flows=flows)


# ====================================================================== assembling
def fault_spans(lab: Lab) -> list[dict[str, Any]]:
    """Fault windows for the plot: each flap's down periods are their own spans."""
    out = []
    for window, fault in zip(fault_windows(lab), lab.faults, strict=True):
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
        if flows is not None:
            entry["flows"] = summ.flow_stats(flows[flows["transport"] == r.name])
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
               "nic_goodput_ceiling_gbps": summ._r(nic_ceiling), "ceiling_nics": nics})
    timeseries = _concat(r.timeseries for r in runs)
    events = _concat(r.events for r in runs)
    return LabResult(lab=lab, summary=summary, timeseries=timeseries, events=events,
                     collective=table, iterations=iterations, flows=flows,
                     fault_spans=fault_spans(lab))

